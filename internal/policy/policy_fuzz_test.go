package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/bucket"
)

// FuzzRate asserts that a rate bucket.ParseRate accepts is within its
// bounds, prints back (String, MarshalText) to text that parses to the same
// rate, and that the API view's interval form (IntervalRate) names a rate
// with exactly its emission interval.
func FuzzRate(f *testing.F) {
	for _, s := range []string{"50/s", "600/m", "10000/h", " 1/h ", "1000000/s", "1000001/s", "1000000000/h",
		"0/s", "-1/s", "+5/s", "05/s", "1/d", "7/d", "1000000000/d", "1/w", "1/", "/s", "1//s", "9223372036854775807/h", "1e3/s", "１/s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := bucket.ParseRate(s)
		if err != nil {
			return
		}
		if r.Tokens < 1 || r.Tokens > 1_000_000_000 || r.IntervalMicros() < 1 ||
			(r.Per != time.Second && r.Per != time.Minute && r.Per != time.Hour && r.Per != bucket.Day) {
			t.Fatalf("ParseRate(%q) = %+v: out of bounds", s, r)
		}
		text, _ := r.MarshalText()
		if string(text) != r.String() {
			t.Fatalf("MarshalText %q != String %q", text, r.String())
		}
		var back bucket.Rate
		if err := back.UnmarshalText(text); err != nil || back != r {
			t.Fatalf("%q → %+v → %q → %+v, %v", s, r, text, back, err)
		}
		view, ok := IntervalRate(r.IntervalMicros()).Rate()
		if !ok || view.IntervalMicros() != r.IntervalMicros() {
			t.Fatalf("IntervalRate(%d).Rate() = %+v, %v: not the interval of %s", r.IntervalMicros(), view, ok, r)
		}
		if again, err := bucket.ParseRate(view.String()); err != nil || again != view {
			t.Fatalf("view rate %s does not parse back: %+v, %v", view, again, err)
		}
	})
}

// FuzzDuration asserts that a Duration that parses prints (String,
// MarshalText, JSON, YAML) to text that parses to the same duration.
func FuzzDuration(f *testing.F) {
	for _, s := range []string{"15s", "200ms", "1h", "1h0m0s", "1.5h", "-3m", "0", "0s", "2562047h47m16.854775807s",
		"2562047h47m16.854775808s", "1us", "1µs", "1μs", ".5s", "5.s", "1h1h", "", "s", "1e3s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var d Duration
		if err := d.UnmarshalText([]byte(s)); err != nil {
			if !strings.HasPrefix(err.Error(), "duration ") {
				t.Fatalf("error %q does not say what it was parsing", err)
			}
			return
		}
		text, _ := d.MarshalText()
		if string(text) != d.String() {
			t.Fatalf("MarshalText %q != String %q", text, d.String())
		}
		var back Duration
		if err := back.UnmarshalText(text); err != nil || back != d {
			t.Fatalf("%q → %d → %q → %d, %v", s, d, text, back, err)
		}
		if strings.HasSuffix(d.String(), "m0s") || strings.HasSuffix(d.String(), "h0m") {
			t.Fatalf("String %q keeps a trailing zero unit", d.String())
		}
		yamlRoundTrip(t, d)
	})
}

// FuzzByteSize asserts that a size that parses is not negative and prints
// (String, JSON string and JSON number, YAML) to text that parses to the
// same size.
func FuzzByteSize(f *testing.F) {
	for _, s := range []string{"1024", "1024B", "1MiB", "256MiB", "8GiB", "0", "0B", "-1", "+1", " 1", "1 MiB", "1KB",
		"9223372036854775807", "9223372036854775807B", "8589934591GiB", "8589934592GiB", "B", "MiB", "0x10", "1.5MiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseByteSize(s)
		if err != nil {
			return
		}
		if b < 0 {
			t.Fatalf("ParseByteSize(%q) = %d", s, b)
		}
		back, err := ParseByteSize(b.String())
		if err != nil || back != b {
			t.Fatalf("%q → %d → %q → %d, %v", s, b, b.String(), back, err)
		}
		for _, js := range []string{`"` + b.String() + `"`, b.String(), `"` + s + `"`} {
			if !json.Valid([]byte(js)) {
				continue // s itself may need escaping; the first two are plain
			}
			var j ByteSize
			if err := json.Unmarshal([]byte(js), &j); err != nil || j != b {
				t.Fatalf("JSON %s → %d, %v; want %d", js, j, err, b)
			}
		}
		yamlRoundTrip(t, b)
	})
}

// FuzzValidTenantID asserts that an accepted tenant id is 1 to
// MaxTenantIDLen bytes of [A-Za-z0-9._@-], neither "." nor "..", one URL
// path segment as it is (no escaping), without ':' or braces; and that a
// refusal wraps ErrInvalidTenantID and never echoes the id (its message
// stays short whatever the id).
func FuzzValidTenantID(f *testing.F) {
	for _, s := range []string{"acme", "a.b_c@d-e", ".", "..", "...", "", "a:b", "@-]", "{s1}", "a/b", "a%2Fb", "é", "a b",
		strings.Repeat("x", MaxTenantIDLen), strings.Repeat("x", MaxTenantIDLen+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := ValidTenantID(id)
		if err != nil {
			if !errors.Is(err, ErrInvalidTenantID) {
				t.Fatalf("error %v does not wrap ErrInvalidTenantID", err)
			}
			if len(err.Error()) > 100 || (len(id) > 16 && strings.Contains(err.Error(), id)) {
				t.Fatalf("error %q echoes the id or grows with it", err)
			}
			return
		}
		if id == "" || len(id) > MaxTenantIDLen || id == "." || id == ".." || strings.ContainsAny(id, ":{}/%") {
			t.Fatalf("accepted tenant id %q", id)
		}
		for i := 0; i < len(id); i++ {
			if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._@-", rune(id[i])) {
				t.Fatalf("accepted tenant id %q with byte 0x%02x", id, id[i])
			}
		}
		if url.PathEscape(id) != id {
			t.Fatalf("tenant id %q is not one path segment as it is (escapes to %q)", id, url.PathEscape(id))
		}
		u, err := url.Parse("/v1/tenants/" + id + "/jobs")
		if err != nil || u.Path != "/v1/tenants/"+id+"/jobs" {
			t.Fatalf("tenant id %q changes the path: %v, %v", id, u, err)
		}
	})
}

// FuzzOverridesJSON asserts, for a PUT policy body DecodeJSON accepts: its
// JSON encoding decodes to the same Overrides (a fixed point) with DecodeJSON
// and with a KnownFields YAML decoder (the two formats agree), and when Validate accepts it every set field is within its bound
// and so is the policy it resolves to over Builtin, unless only the backoff
// order against a Builtin value fails.
func FuzzOverridesJSON(f *testing.F) {
	for _, s := range []string{
		`{"rate":"50/s","burst":5,"concurrency":2,"weight":3,"admit":{"rate":"100/m","burst":10},"max_backlog":5,` +
			`"max_backlog_bytes":"1MiB","retry":{"max_attempts":3,"min_backoff":"1s","max_backoff":"1m","max_doublings":2,` +
			`"max_retry_duration":"1h"},"timeout":"10s","adaptive":false,"webhook_secrets":["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]}`,
		`{}`, `null`, `{"webhook_secrets":[]}`, `{"max_backlog_bytes":1048576}`, `{"max_backlog_bytes":-1}`,
		`{"rate":"0/s"}`, `{"burst":1000001}`, `{"retry":{"min_backoff":"2s","max_backoff":"1s"}}`, `{"timeout":"-1s"}`,
		`{"admit":{}}`, `{"retry":{}}`, `{"unknown":1}`, `{} {}`, `{"rate":"1/s"}x`, `{"timeout":"1h0m0.000000001s"}`,
		`{"webhook_secrets":["whsec_"]}`, `{"max_backlog_bytes":"10000000000000"}`, `{"burst":1e2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := DecodeJSON(bytes.NewReader(data))
		if err != nil {
			return
		}
		js, err := json.Marshal(o)
		if err != nil {
			t.Fatalf("marshal %#v: %v", o, err)
		}
		back, err := DecodeJSON(bytes.NewReader(js))
		if err != nil || !reflect.DeepEqual(back, o) {
			t.Fatalf("JSON round trip: %s → %s → %+v, %v; want %+v", data, js, back, err, o)
		}
		if o.Validate() != nil {
			return
		}
		// What the API accepts can be written in the config file: valid
		// overrides only (YAML refuses control characters, escaped or not,
		// that a JSON string may carry, as in an invalid secret "\x7f").
		checkYAMLReadsJSON(t, o, js)
		checkOverridesBounds(t, o)
		p := Resolve(o)
		if err := p.Validate(); err != nil && !onlyBackoffOrder(err) {
			t.Fatalf("valid overrides %s resolve to an invalid policy: %v", data, err)
		}
	})
}

// FuzzOverridesYAML asserts, for a YAML overrides document a KnownFields
// decoder accepts (the configuration's defaults and tenants), that its JSON
// encoding (what Redis stores) decodes to the same Overrides with
// DecodeJSON and with the YAML decoder.
func FuzzOverridesYAML(f *testing.F) {
	for _, s := range []string{
		"rate: 50/s\nburst: 5\nadmit:\n  rate: 10/m\nmax_backlog_bytes: 256MiB\nretry:\n  min_backoff: 1s\ntimeout: 15s\n",
		"webhook_secrets: []\n", "rate: [1]\n", "rate: 0/s\ntimeout: x\nmax_backlog_bytes: -1\n", "unknown: 1\n",
		"adaptive: yes\n", "burst: 0x10\n", "max_backlog_bytes: 1048576\n", "retry: {max_attempts: 2, max_doublings: 70}\n",
		"&a {rate: 1/s}\n", "admit: ~\n", "rate: !!binary MS9z\n", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var o Overrides
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&o); err != nil {
			return
		}
		js, err := json.Marshal(o)
		if err != nil {
			t.Fatalf("marshal %#v: %v", o, err)
		}
		back, err := DecodeJSON(bytes.NewReader(js))
		if err != nil || !reflect.DeepEqual(back, o) {
			t.Fatalf("YAML %q → %+v → JSON %s → %+v, %v", data, o, js, back, err)
		}
		if o.Validate() == nil { // valid overrides: see FuzzOverridesJSON
			checkYAMLReadsJSON(t, o, js)
		}
	})
}

// checkYAMLReadsJSON asserts that the JSON encoding of o, read as YAML (of
// which JSON is a subset: a PUT body pasted into the configuration) with
// unknown fields refused, decodes to o.
func checkYAMLReadsJSON(t *testing.T, o Overrides, js []byte) {
	t.Helper()
	var back Overrides
	dec := yaml.NewDecoder(bytes.NewReader(js))
	dec.KnownFields(true)
	if err := dec.Decode(&back); err != nil {
		t.Fatalf("JSON %s of %+v does not decode as YAML: %v", js, o, err)
	}
	if !reflect.DeepEqual(back, o) {
		t.Fatalf("JSON %s read as YAML: %+v, want %+v", js, back, o)
	}
}

// checkOverridesBounds asserts the documented bound of every field o sets.
func checkOverridesBounds(t *testing.T, o Overrides) {
	t.Helper()
	in := func(name string, v *int64, lo, hi int64) {
		if v != nil && (*v < lo || *v > hi) {
			t.Fatalf("valid overrides with %s = %d outside %d…%d", name, *v, lo, hi)
		}
	}
	in("burst", o.Burst, 1, MaxBurst)
	in("concurrency", o.Concurrency, 1, MaxCount)
	in("weight", o.Weight, 1, MaxCount)
	in("admit.burst", o.Admit.Burst, 1, MaxBurst)
	in("max_backlog", o.MaxBacklog, 1, MaxBacklogLimit)
	if o.MaxBacklogBytes != nil {
		in("max_backlog_bytes", (*int64)(o.MaxBacklogBytes), 1, int64(MaxBacklogBytesLimit))
	}
	for _, r := range []*bucket.Rate{o.Rate, o.Admit.Rate} {
		if r != nil && r.IntervalMicros() < 1 {
			t.Fatalf("valid overrides with rate %+v", *r)
		}
	}
	dur := func(name string, v *Duration, lo, hi time.Duration) {
		if v != nil && (time.Duration(*v) < lo || time.Duration(*v) > hi) {
			t.Fatalf("valid overrides with %s = %s outside %s…%s", name, *v, Duration(lo), Duration(hi))
		}
	}
	dur("retry.min_backoff", o.Retry.MinBackoff, 1, MaxDuration)
	dur("retry.max_backoff", o.Retry.MaxBackoff, 1, MaxDuration)
	dur("retry.max_retry_duration", o.Retry.MaxRetryDuration, 0, MaxDuration)
	dur("timeout", o.Timeout, 1, MaxTimeout)
	if r := o.Retry; (r.MaxAttempts != nil && (*r.MaxAttempts < 1 || *r.MaxAttempts > MaxCount)) ||
		(r.MaxDoublings != nil && (*r.MaxDoublings < 0 || *r.MaxDoublings > MaxDoublingsLimit)) {
		t.Fatalf("valid overrides with retry %+v", r)
	}
	if len(o.WebhookSecrets) > MaxWebhookSecrets {
		t.Fatalf("valid overrides with %d secrets", len(o.WebhookSecrets))
	}
	if _, err := o.WebhookSecrets.Keys(); err != nil {
		t.Fatalf("valid overrides with a bad secret: %v", err)
	}
}

// onlyBackoffOrder reports whether err holds only the
// retry.max_backoff-below-min_backoff problem, which Overrides.Validate
// checks only when both are set (one may meet the other's Builtin value).
func onlyBackoffOrder(err error) bool {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return false
	}
	for _, e := range j.Unwrap() {
		var fe *FieldError
		if !errors.As(e, &fe) || fe.Field != "retry.max_backoff" || !strings.Contains(fe.Err.Error(), "at least retry.min_backoff") {
			return false
		}
	}
	return true
}

// yamlRoundTrip fails t unless v, as a YAML field, decodes back to v.
func yamlRoundTrip[T comparable](t *testing.T, v T) {
	t.Helper()
	type doc struct {
		V T `yaml:"v"`
	}
	out, err := yaml.Marshal(doc{v})
	var back doc
	if err == nil {
		err = yaml.Unmarshal(out, &back)
	}
	if err != nil || back.V != v {
		t.Fatalf("YAML round trip of %v: %s → %v, %v", v, out, back.V, err)
	}
}
