package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/wire"
)

// loadBytes is Load for a document in memory, without the environment:
// decode (the loader that takes bytes), hash plaintext keys, defaults,
// validate.
func loadBytes(data []byte) (*Config, error) {
	var c Config
	if err := decode(data, &c); err != nil {
		return nil, err
	}
	c.Auth.hashPlaintextKeys()
	out := c.WithDefaults()
	if err := out.validate(); err != nil {
		return nil, err
	}
	return out, nil
}

// FuzzConfig loads YAML documents and asserts, for every accepted one: the
// defaults are a fixed point (WithDefaults changes nothing more); every
// tenant id is valid and every tenant's resolved policy validates; every
// limit validates and the api limit exists; no plaintext API key is kept;
// the deployment-wide settings survive the meta hash; and loading is
// deterministic. (Sluice never writes a configuration, so there is no YAML
// round trip to check: a zero Rate, for one, prints as "0/s".)
func FuzzConfig(f *testing.F) {
	for _, s := range []string{
		"", "{}", "listen: 127.0.0.1:0\n",
		"redis:\n  url: redis://127.0.0.1:6379/0\n  prefix: sl\n  shards: 4\n  request_timeout: 2s\n" +
			"auth:\n  keys:\n    - name: producer\n      key: secret\n      tenants: [\"acme\", \"a*\"]\n      limits: [search]\n" +
			"    - name: ops\n      sha256: 2BB80D537B1DA3E38BD30361AA855686BDE0EACD7162FEF6A25FE97BF527A25B\n      admin: true\n" +
			"defaults:\n  rate: 50/s\n  burst: 5\n  max_backlog_bytes: 64MiB\n" +
			"tenants:\n  acme:\n    concurrency: 2\n    retry: {min_backoff: 1s, max_backoff: 10s}\n" +
			"limits:\n  search:\n    algorithm: token_bucket\n    rate: 10/m\n    burst: 3\n  api:\n    algorithm: sliding_window\n    limit: 100\n    window: 1m\n    fail_open: false\n" +
			"dispatch:\n  lead: 400ms\n  min_lead: 150ms\n  tolerance: 50ms\n  grace: 30s\n" +
			"throttle:\n  default_pause: 30s\n  max_pause: 1h\n  adaptive_floor: 0.25\n" +
			"limits_bytes:\n  max_job_bytes: 1MiB\n  max_batch_bytes: 16MiB\n" +
			"task_queues: [default, emails]\negress:\n  allow: [10.0.0.0/8, \"fd00::/8\"]\n" +
			"worker:\n  concurrency: 10\n  fetchers: 2\nlog:\n  format: json\n  level: debug\n",
		"tenants:\n  \"a:b\": {}\n  \"..\": {}\n", "limits:\n  x:\n    algorithm: gcra\n    rate: 0/s\n",
		"redis:\n  shards: -1\n  request_timeout: -1s\n", "unknown: 1\n", "a: 1\n---\nb: 2\n", "listen: [1]\n",
		"throttle:\n  adaptive_floor: .nan\n", "throttle:\n  adaptive_floor: 1e-300\n", "dispatch:\n  lead: 9223372036854775807ns\n",
		"defaults:\n  webhook_secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]\n", "egress:\n  allow: [\"10.0.0.1/8\"]\n",
		"anchors: &a {}\n", "tenants: {acme: &p {rate: 1/s}, globex: *p}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := loadBytes(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("refusal without a message")
			}
			return
		}
		if again := c.WithDefaults(); !reflect.DeepEqual(again, c) {
			t.Fatalf("WithDefaults is not idempotent:\n%+v\n%+v", c, again)
		}
		checkLoadedBounds(t, c)
		checkMetaRoundTrip(t, c)
		again, err := loadBytes(data)
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("loading the same document twice differs: %v", err)
		}
	})
}

// checkMetaRoundTrip asserts that c's part of the meta hash, as the
// throttler writes it, reads back (wire.ParseMeta, what every process does)
// to c.Meta() in whole microseconds, with every setting stored (none rounds
// to zero microseconds and goes missing, leaving each process its own).
func checkMetaRoundTrip(t *testing.T, c *Config) {
	t.Helper()
	m := c.Meta()
	fields := m.Fields()
	h := make(map[string]string, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		h[fields[i]] = fields[i+1]
	}
	back, err := wire.ParseMeta(h)
	if err != nil {
		t.Fatalf("the meta hash of a loaded config does not parse: %v (fields %v)", err, fields)
	}
	want := m
	want.Lead, want.MinLead = want.Lead.Truncate(time.Microsecond), want.MinLead.Truncate(time.Microsecond)
	for _, d := range []*time.Duration{&want.Settings.Tolerance, &want.Settings.Grace, &want.Settings.SucceededRetention,
		&want.Settings.CanceledRetention, &want.Settings.IdempotencyRetention, &want.Settings.DeadRetention,
		&want.Settings.DefaultPause, &want.Settings.MaxPause} {
		*d = d.Truncate(time.Microsecond) // the hash's unit
	}
	if !reflect.DeepEqual(back, want) {
		t.Fatalf("meta round trip: %+v → %v → %+v", m, fields, back)
	}
	if n := len(wire.Meta{}.FixedFields()) + 2*reflect.TypeFor[wire.Settings]().NumField(); len(fields) != n {
		t.Fatalf("the meta hash of a loaded config has %d of its %d fields: a setting rounds to 0µs and goes missing: %v",
			len(fields), n, fields)
	}
}

// checkLoadedBounds asserts what validation promises of a loaded Config.
func checkLoadedBounds(t *testing.T, c *Config) {
	t.Helper()
	if err := policy.Resolve(c.Defaults).Validate(); err != nil {
		t.Fatalf("loaded defaults resolve to an invalid policy: %v", err)
	}
	for id, o := range c.Tenants {
		if err := policy.ValidTenantID(id); err != nil {
			t.Fatalf("loaded tenant id %q: %v", id, err)
		}
		if err := policy.Resolve(c.Defaults, o).Validate(); err != nil {
			t.Fatalf("loaded tenant %q resolves to an invalid policy: %v", id, err)
		}
	}
	if _, ok := c.Limits[APILimitName]; !ok {
		t.Fatalf("loaded config without the %s limit", APILimitName)
	}
	for name, l := range c.Limits {
		if !validName(name) || l.Bucket().Validate() != nil {
			t.Fatalf("loaded limit %q %+v", name, l)
		}
	}
	for _, k := range c.Auth.Keys {
		if k.Key != "" || !isSHA256Hex(k.KeySHA256()) {
			t.Fatalf("loaded key %q keeps plaintext or has no hash", k.Name)
		}
	}
	if _, err := c.Egress.Prefixes(); err != nil {
		t.Fatalf("loaded egress.allow: %v", err)
	}
	if c.LimitsBytes.MaxJobBytes <= 0 || c.LimitsBytes.MaxBatchBytes < c.LimitsBytes.MaxJobBytes ||
		!(c.Throttle.AdaptiveFloor > 0 && c.Throttle.AdaptiveFloor <= 1) || c.Redis.Shards < 1 || len(c.TaskQueues) == 0 {
		t.Fatalf("loaded config out of bounds: %+v", c)
	}
}

// TestMetaDurationsBelowOneMicrosecond is FuzzConfig's finding: a positive
// deployment-wide duration below 1µs was accepted, then stored in the meta
// hash as 0 µs — left out (dispatch.tolerance: every process kept its own
// ε) or refused by every reader (dispatch.min_lead). Now it is refused.
func TestMetaDurationsBelowOneMicrosecond(t *testing.T) {
	for _, doc := range []string{
		"dispatch:\n  tolerance: 500ns\n",
		"dispatch:\n  min_lead: 999ns\n  lead: 1ms\nworker:\n  task_check_interval: 1ns\n",
		"retention:\n  idempotency: 1ns\n",
		"throttle:\n  default_pause: 1ns\n",
	} {
		_, err := loadBytes([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), "must be at least 1µs") {
			t.Errorf("load %q = %v, want a 'must be at least 1µs' refusal", doc, err)
		}
	}
	c, err := loadBytes([]byte("dispatch:\n  tolerance: 1µs\n"))
	if err != nil {
		t.Fatal(err)
	}
	checkMetaRoundTrip(t, c)
}
