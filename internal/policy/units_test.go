package policy

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestParseByteSize(t *testing.T) {
	good := []struct {
		in   string
		want ByteSize
	}{
		{"0", 0},
		{"1024", 1024},
		{"1024B", 1024},
		{"1KiB", 1024},
		{"1MiB", 1 << 20},
		{"256MiB", 256 << 20},
		{"3GiB", 3 << 30},
		{"007", 7},
	}
	for _, tc := range good {
		got, err := ParseByteSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	bad := []string{"", "B", "MiB", "-1", "+1", "-0", "1.5MiB", "1 MiB", "1MB", "1KB", "1mib", "1TiB", "abc", "9223372036854775807KiB", "99999999999999999999"}
	for _, in := range bad {
		if got, err := ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestByteSizeString(t *testing.T) {
	for _, tc := range []struct {
		in   ByteSize
		want string
	}{
		{0, "0"}, {1, "1"}, {1023, "1023"}, {1024, "1KiB"}, {1536, "1536"},
		{256 * MiB, "256MiB"}, {GiB, "1GiB"}, {GiB + KiB, "1048577KiB"},
	} {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("ByteSize(%d).String() = %q, want %q", int64(tc.in), got, tc.want)
		}
		back, err := ParseByteSize(tc.want)
		if err != nil || back != tc.in {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", tc.want, back, err, tc.in)
		}
	}
}

func TestByteSizeJSON(t *testing.T) {
	for in, want := range map[string]ByteSize{`"1MiB"`: MiB, `2048`: 2048, `"2048"`: 2048} {
		var b ByteSize
		if err := json.Unmarshal([]byte(in), &b); err != nil || b != want {
			t.Errorf("unmarshal %s = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{`"1MB"`, `-5`, `1.5`, `true`, `"x"`} {
		var b ByteSize
		if err := json.Unmarshal([]byte(in), &b); err == nil {
			t.Errorf("unmarshal %s = %d, want an error", in, b)
		}
	}
	out, err := json.Marshal(256 * MiB)
	if err != nil || string(out) != `"256MiB"` {
		t.Errorf("marshal 256MiB = %s, %v", out, err)
	}
}

func TestDurationText(t *testing.T) {
	for _, tc := range []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"}, {200 * time.Millisecond, "200ms"}, {15 * time.Second, "15s"},
		{time.Minute, "1m"}, {90 * time.Second, "1m30s"}, {time.Hour, "1h"},
		{168 * time.Hour, "168h"}, {time.Hour + 30*time.Minute, "1h30m"},
		{time.Hour + 5*time.Second, "1h0m5s"}, {-time.Second, "-1s"},
	} {
		got := Duration(tc.in).String()
		if got != tc.want {
			t.Errorf("Duration(%v).String() = %q, want %q", tc.in, got, tc.want)
		}
		var back Duration
		if err := back.UnmarshalText([]byte(got)); err != nil || time.Duration(back) != tc.in {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", got, back, err, tc.in)
		}
	}
	var d Duration
	if err := d.UnmarshalText([]byte("15")); err == nil {
		t.Error(`UnmarshalText("15") succeeded; a duration needs a unit`)
	}
}

func TestScalarYAMLReportsLine(t *testing.T) {
	var v struct {
		A Duration `yaml:"a"`
		B ByteSize `yaml:"b"`
		C Duration `yaml:"c"`
	}
	err := yaml.Unmarshal([]byte("a: 5x\nb: 1MB\nc: [1]\n"), &v)
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{"line 1: duration \"5x\"", "line 2: size \"1MB\"", "line 3: want a scalar"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}
