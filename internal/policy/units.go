package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written as a Go duration string ("200ms",
// "15s", "24h") in JSON and YAML. It marshals in the shortest form
// ParseDuration reads back: "1h", not "1h0m0s".
type Duration time.Duration

// String formats d like time.Duration.String without trailing zero units.
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with time.ParseDuration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration %q: want a Go duration such as 15s or 200ms", b)
	}
	*d = Duration(v)
	return nil
}

// UnmarshalYAML implements yaml.Unmarshaler. A bad value is reported as a
// *yaml.TypeError with its line, so decoding goes on and every bad value in a
// document is listed.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	return scalarYAML(n, d.UnmarshalText)
}

// ByteSize is a size in bytes, written as a non-negative integer optionally
// followed by one of the units B, KiB, MiB, GiB (powers of 1024): "1024",
// "1024B", "1MiB", "256MiB". In JSON it is a string or a plain number.
type ByteSize int64

// The units ParseByteSize accepts.
const (
	KiB ByteSize = 1 << 10
	MiB ByteSize = 1 << 20
	GiB ByteSize = 1 << 30
)

// ParseByteSize parses s as described on ByteSize.
func ParseByteSize(s string) (ByteSize, error) {
	num, mult := s, ByteSize(1)
	for _, u := range []struct {
		suffix string
		mult   ByteSize
	}{{"KiB", KiB}, {"MiB", MiB}, {"GiB", GiB}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || strings.TrimLeft(num, "0123456789") != "" {
		return 0, fmt.Errorf("size %q: want a non-negative integer with an optional unit B, KiB, MiB or GiB", s)
	}
	if n > math.MaxInt64/int64(mult) {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return ByteSize(n) * mult, nil
}

// String formats b in the largest unit that divides it exactly ("256MiB"),
// or as a plain integer.
func (b ByteSize) String() string {
	for _, u := range []struct {
		suffix string
		mult   ByteSize
	}{{"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}} {
		if b != 0 && b%u.mult == 0 {
			return strconv.FormatInt(int64(b/u.mult), 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// MarshalText implements encoding.TextMarshaler.
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseByteSize.
func (b *ByteSize) UnmarshalText(text []byte) error {
	v, err := ParseByteSize(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// UnmarshalJSON accepts a string ("256MiB") or a plain number of bytes.
func (b *ByteSize) UnmarshalJSON(data []byte) error {
	if bytes.HasPrefix(data, []byte(`"`)) {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		return b.UnmarshalText([]byte(s))
	}
	return b.UnmarshalText(data)
}

// UnmarshalYAML implements yaml.Unmarshaler; see Duration.UnmarshalYAML.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	return scalarYAML(n, b.UnmarshalText)
}

// scalarYAML feeds a scalar node's text to parse and turns a failure into a
// line-numbered *yaml.TypeError, which the yaml decoder collects instead of
// stopping at. (A TypeError holds strings, so the cause is formatted here.)
func scalarYAML(n *yaml.Node, parse func([]byte) error) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a scalar value", n.Line)}}
	}
	if err := parse([]byte(n.Value)); err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	return nil
}
