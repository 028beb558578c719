package policy

import (
	"errors"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/bucket"
)

// YAML decoding goes through mirror types whose rate fields are yamlRate, so
// that a bad rate is reported with its line and decoding goes on to find the
// other problems (bucket.Rate's UnmarshalText error would stop the decoder).
// The UnmarshalYAML methods use yaml.v3's older func-argument form because it
// decodes with the caller's Decoder, keeping KnownFields in force.

type overridesYAML struct {
	Rate            *yamlRate      `yaml:"rate"`
	Burst           *int64         `yaml:"burst"`
	Concurrency     *int64         `yaml:"concurrency"`
	Weight          *int64         `yaml:"weight"`
	Admit           AdmitOverrides `yaml:"admit"`
	MaxBacklog      *int64         `yaml:"max_backlog"`
	MaxBacklogBytes *ByteSize      `yaml:"max_backlog_bytes"`
	Retry           RetryOverrides `yaml:"retry"`
	Timeout         *Duration      `yaml:"timeout"`
	Adaptive        *bool          `yaml:"adaptive"`
	Unsigned        *bool          `yaml:"unsigned"`
	DisableOnGone   *bool          `yaml:"disable_on_gone"`
	Pacing          *Pacing        `yaml:"pacing"`
	WebhookSecrets  Secrets        `yaml:"webhook_secrets"`
	MaxResultBytes  *ByteSize      `yaml:"max_result_bytes"`
	ResultHeaders   []string       `yaml:"result_headers"`
	Upstreams       []string       `yaml:"upstreams"`
}

// UnmarshalYAML implements yaml.v3's obsolete Unmarshaler; see the comment at
// the top of yaml.go.
func (o *Overrides) UnmarshalYAML(unmarshal func(any) error) error {
	var m overridesYAML
	if err := unmarshal(&m); err != nil {
		return RenameYAMLType(err, "policy.overridesYAML", "policy.Overrides")
	}
	*o = Overrides{
		Rate:            (*bucket.Rate)(m.Rate),
		Burst:           m.Burst,
		Concurrency:     m.Concurrency,
		Weight:          m.Weight,
		Admit:           m.Admit,
		MaxBacklog:      m.MaxBacklog,
		MaxBacklogBytes: m.MaxBacklogBytes,
		Retry:           m.Retry,
		Timeout:         m.Timeout,
		Adaptive:        m.Adaptive,
		Unsigned:        m.Unsigned,
		DisableOnGone:   m.DisableOnGone,
		Pacing:          m.Pacing,
		WebhookSecrets:  m.WebhookSecrets,
		MaxResultBytes:  m.MaxResultBytes,
		ResultHeaders:   m.ResultHeaders,
		Upstreams:       m.Upstreams,
	}
	return nil
}

type admitYAML struct {
	Rate  *yamlRate `yaml:"rate"`
	Burst *int64    `yaml:"burst"`
}

// UnmarshalYAML implements yaml.v3's obsolete Unmarshaler; see the comment at
// the top of yaml.go.
func (a *AdmitOverrides) UnmarshalYAML(unmarshal func(any) error) error {
	var m admitYAML
	if err := unmarshal(&m); err != nil {
		return RenameYAMLType(err, "policy.admitYAML", "policy.AdmitOverrides")
	}
	*a = AdmitOverrides{Rate: (*bucket.Rate)(m.Rate), Burst: m.Burst}
	return nil
}

// yamlRate is a bucket.Rate that reports a bad value as a line-numbered
// *yaml.TypeError.
type yamlRate bucket.Rate

func (r *yamlRate) UnmarshalYAML(n *yaml.Node) error {
	return scalarYAML(n, (*bucket.Rate)(r).UnmarshalText)
}

// renameType replaces a mirror type's name in yaml's messages by the public
// type's, so messages name what the reader knows.
func RenameYAMLType(err error, mirror, public string) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	out := &yaml.TypeError{Errors: make([]string, len(te.Errors))}
	for i, e := range te.Errors {
		out.Errors[i] = strings.ReplaceAll(e, mirror, public)
	}
	return out
}
