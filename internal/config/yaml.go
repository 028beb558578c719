package config

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/policy"
)

// limitYAML mirrors LimitConfig with a Rate that reports a bad value as a
// line-numbered *yaml.TypeError, so decoding goes on and lists every problem
// (bucket.Rate's UnmarshalText error would stop the decoder).
type limitYAML struct {
	Algorithm bucket.Algorithm `yaml:"algorithm"`
	Limit     int64            `yaml:"limit"`
	Window    time.Duration    `yaml:"window"`
	Rate      yamlRate         `yaml:"rate"`
	Burst     int64            `yaml:"burst"`
	FailOpen  *bool            `yaml:"fail_open"`
	Scope     string           `yaml:"scope"`
	Costs     *APICosts        `yaml:"costs"`
}

// UnmarshalYAML implements yaml.v3's obsolete Unmarshaler, whose unmarshal
// argument decodes with the caller's Decoder and so keeps KnownFields.
func (l *LimitConfig) UnmarshalYAML(unmarshal func(any) error) error {
	var m limitYAML
	if err := unmarshal(&m); err != nil {
		return policy.RenameYAMLType(err, "config.limitYAML", "config.LimitConfig")
	}
	*l = LimitConfig{
		Algorithm: m.Algorithm,
		Limit:     m.Limit,
		Window:    m.Window,
		Rate:      bucket.Rate(m.Rate),
		Burst:     m.Burst,
		FailOpen:  m.FailOpen,
		Scope:     m.Scope,
		Costs:     m.Costs,
	}
	return nil
}

type yamlRate bucket.Rate

func (r *yamlRate) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: rate: want N/s, N/m, N/h or N/d", n.Line)}}
	}
	if err := (*bucket.Rate)(r).UnmarshalText([]byte(n.Value)); err != nil {
		// A TypeError holds strings, so the cause is formatted here.
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	return nil
}
