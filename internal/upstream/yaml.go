package upstream

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/bucket"
)

// configYAML mirrors Config with a rate that reports a bad value as a
// line-numbered *yaml.TypeError, so that decoding goes on to find the
// configuration's other problems (bucket.Rate's UnmarshalText error would
// stop the decoder).
type configYAML struct {
	Rate        yamlRate `yaml:"rate"`
	Burst       int64    `yaml:"burst"`
	Concurrency int64    `yaml:"concurrency"`
	Adaptive    bool     `yaml:"adaptive"`
	PauseScope  string   `yaml:"pause_scope"`
	CostHeader  string   `yaml:"cost_header"`
	Pacing      string   `yaml:"pacing"`
}

// UnmarshalYAML implements yaml.v3's older Unmarshaler, whose unmarshal
// argument decodes with the caller's Decoder and so keeps KnownFields (an
// unknown field is an error).
func (c *Config) UnmarshalYAML(unmarshal func(any) error) error {
	var m configYAML
	if err := unmarshal(&m); err != nil {
		var te *yaml.TypeError
		if fe, ok := err.(*yaml.TypeError); ok {
			te = &yaml.TypeError{Errors: make([]string, len(fe.Errors))}
			for i, e := range fe.Errors {
				te.Errors[i] = strings.ReplaceAll(e, "upstream.configYAML", "upstream.Config")
			}
			return te
		}
		return err
	}
	*c = Config{Rate: bucket.Rate(m.Rate), Burst: m.Burst, Concurrency: m.Concurrency, Adaptive: m.Adaptive,
		PauseScope: m.PauseScope, CostHeader: m.CostHeader, Pacing: m.Pacing}
	return nil
}

type yamlRate bucket.Rate

// UnmarshalYAML reads a rate scalar ("20/s"), naming the line of a bad one.
func (r *yamlRate) UnmarshalYAML(n *yaml.Node) error {
	var text string
	if err := n.Decode(&text); err != nil {
		return err
	}
	rate, err := bucket.ParseRate(text)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*r = yamlRate(rate)
	return nil
}
