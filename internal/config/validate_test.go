package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/policy"
)

// loadString loads content as a config file.
func loadString(t *testing.T, content string) (*Config, error) {
	t.Helper()
	return Load(writeFile(t, content), nil)
}

func TestSeveralProblemsReportedAtOnce(t *testing.T) {
	_, err := loadString(t, `
listen: localhost
redis: {url: "ftp://x", prefix: "a:b", shards: 2000}
auth:
  keys:
    - {name: "bad name", sha256: "xyz"}
defaults: {burst: 0, retry: {max_attempts: 0}}
tenants:
  "a/b": {weight: 1}
  acme: {concurrency: -1, webhook_secrets: ["whsec_nope"]}
limits:
  search: {algorithm: token_bucket, rate: 5/s, burst: 0}
dispatch: {lead: 60ms, min_lead: 50ms, tolerance: 2s, grace: 1s}
throttle: {adaptive_floor: 1.5}
retention: {dead_max_per_tenant: -1}
limits_bytes: {max_job_bytes: 2MiB, max_batch_bytes: 1MiB}
task_queues: ["{q}"]
egress: {allow: ["10.0.0.1", "fd00::/8"]}
worker: {concurrency: -5}
log: {format: xml, level: loud}
metrics: {top_tenants: 1001, cache_for: -1s}
`)
	want := []string{
		"auth.keys[0].name", "auth.keys[0].sha256",
		"defaults.burst", "defaults.retry.max_attempts",
		"dispatch.grace", "dispatch.lead",
		"egress.allow[0]",
		"limits.search.burst",
		"limits_bytes.max_batch_bytes",
		"listen",
		"log.format", "log.level",
		"metrics.cache_for", "metrics.top_tenants",
		"redis.prefix", "redis.shards", "redis.url",
		"retention.dead_max_per_tenant",
		"task_queues[0]",
		`tenants."a/b"`,
		"tenants.acme.concurrency", "tenants.acme.webhook_secrets[0]",
		"throttle.adaptive_floor",
		"worker.concurrency",
	}
	if got := problemFields(t, err); !slices.Equal(got, want) {
		t.Errorf("problems\n%v\nin\n%v\nwant\n%v", got, err, want)
	}
	for _, msg := range []string{
		"limits.search.burst: must be at least 1, got 0",
		"dispatch.lead: must be at least 2 × dispatch.min_lead (100ms), got 60ms",
		"dispatch.grace: must be at least dispatch.tolerance (2s), got 1s",
		"redis.shards: must be from 1 to 1024, got 2000",
	} {
		if !strings.Contains(err.Error(), msg) {
			t.Errorf("error\n%v\ndoes not contain %q", err, msg)
		}
	}
}

// A limit at a daily rate loads; one whose burst × 1/rate would not stay
// exact in the limiter's scripts is refused at load, naming the largest
// burst, not later when the limiter is built.
func TestDailyLimits(t *testing.T) {
	cfg, err := loadString(t, "limits:\n  daily: {algorithm: gcra, rate: 1000/d, burst: 50}\n")
	if err != nil {
		t.Fatal(err)
	}
	if l := cfg.Limits["daily"]; l.Rate.String() != "1000/d" || l.Rate.IntervalMicros() != 86_400_000 {
		t.Fatalf("limit %+v", l)
	}
	_, err = loadString(t, "limits:\n  daily: {algorithm: token_bucket, rate: 1/d, burst: 60000}\n")
	if got := problemFields(t, err); !slices.Equal(got, []string{"limits.daily.burst"}) ||
		!strings.Contains(err.Error(), fmt.Sprintf("must be at most %d at rate 1/d", bucket.MaxSpanMicros/86_400_000_000)) {
		t.Fatalf("problems %v in %v", got, err)
	}
}

func TestUnknownKeysRejected(t *testing.T) {
	for name, tc := range map[string]struct{ yaml, want string }{
		"top level":       {"listen: :1\nbogus: 1\n", "line 2: field bogus not found in type config.Config"},
		"redis":           {"redis: {url: redis://x:1/0, database: 1}\n", "field database not found in type config.RedisConfig"},
		"auth key":        {"auth: {keys: [{name: a, key: k, role: admin}]}\n", "field role not found in type config.KeyConfig"},
		"defaults":        {"defaults: {rate: 5/s, max_rate: 6/s}\n", "field max_rate not found in type policy.Overrides"},
		"defaults retry":  {"defaults: {retry: {attempts: 3}}\n", "field attempts not found in type policy.RetryOverrides"},
		"defaults admit":  {"defaults: {admit: {capacity: 3}}\n", "field capacity not found in type policy.AdmitOverrides"},
		"tenant":          {"tenants: {acme: {secrets: []}}\n", "field secrets not found in type policy.Overrides"},
		"limit":           {"limits: {s: {algorithm: gcra, rate: 1/s, burst: 1, cost: 2}}\n", "field cost not found in type config.LimitConfig"},
		"api costs":       {"limits: {api: {algorithm: gcra, rate: 1/s, burst: 4, costs: {batch: 10}}}\n", "field batch not found in type config.APICosts"},
		"dispatch":        {"dispatch: {lead_time: 1s}\n", "field lead_time not found in type config.DispatchConfig"},
		"egress":          {"egress: {deny: []}\n", "field deny not found in type config.EgressConfig"},
		"log":             {"log: {output: stderr}\n", "field output not found in type config.LogConfig"},
		"misspelled case": {"Listen: :1\n", "field Listen not found"},
	} {
		_, err := loadString(t, tc.yaml)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.want)
		}
	}
}

// Decoding problems (unknown keys, bad values) are listed together, by line.
func TestDecodeProblemsListedTogether(t *testing.T) {
	_, err := loadString(t, `
bogus: 1
redis: {shards: many}
limits:
  s: {algorithm: gcra, rate: 5/fortnight, burst: 1}
dispatch: {lead: soon}
defaults: {timeout: 15, max_backlog_bytes: 1MB}
`)
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{
		"line 2: field bogus not found",
		"line 3: cannot unmarshal !!str `many` into int",
		`line 5: rate "5/fortnight"`,
		"line 6: cannot unmarshal !!str `soon` into time.Duration",
		`line 7: duration "15"`,
		`line 7: size "1MB"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error\n%v\ndoes not contain %q", err, want)
		}
	}
}

func TestMoreThanOneDocument(t *testing.T) {
	_, err := loadString(t, "listen: :1\n---\nlisten: :2\n")
	if err == nil || !strings.Contains(err.Error(), "want one document") {
		t.Errorf("error %v", err)
	}
}

func TestBadTenantIDs(t *testing.T) {
	for _, id := range []string{`"."`, `".."`, `"a b"`, `"a:b"`, `"{s1}"`, `"*"`, `"é"`, `"` + strings.Repeat("x", 129) + `"`, `""`} {
		_, err := loadString(t, "tenants:\n  "+id+": {burst: 2}\n")
		fields := problemFields(t, err)
		if len(fields) != 1 || !strings.HasPrefix(fields[0], "tenants.") || !errors.Is(err, policy.ErrInvalidTenantID) {
			t.Errorf("tenant %s: problems %v in %v", id, fields, err)
		}
	}
	cfg, err := loadString(t, "tenants:\n  A-z_0.9@x: {burst: 2}\n  '...': {}\n")
	if err != nil || len(cfg.Tenants) != 2 {
		t.Errorf("valid tenant ids: %v", err)
	}
}

// A tenant's overrides are checked merged with the defaults too.
func TestTenantMergedWithDefaults(t *testing.T) {
	_, err := loadString(t, `
defaults: {retry: {min_backoff: 10m}}
tenants:
  acme: {retry: {max_backoff: 1m}}
  globex: {retry: {max_backoff: 20m}}
`)
	got := problemFields(t, err)
	if !slices.Equal(got, []string{"tenants.acme.retry.max_backoff"}) {
		t.Errorf("problems %v in %v", got, err)
	}
	// The defaults alone merged over the built-in max_backoff (1h).
	_, err = loadString(t, "defaults: {retry: {min_backoff: 2h}}\n")
	if got := problemFields(t, err); !slices.Equal(got, []string{"defaults.retry.max_backoff"}) {
		t.Errorf("problems %v in %v", got, err)
	}
}

func TestBadLimits(t *testing.T) {
	for _, tc := range []struct {
		name, limit string
		want        []string
	}{
		{"valid window", "{algorithm: sliding_window, limit: 10, window: 1s}", nil},
		{"valid bucket", "{algorithm: gcra, rate: 10/m, burst: 3}", nil},
		{"no algorithm", "{limit: 10, window: 1s}", []string{"limits.x.algorithm"}},
		{"unknown algorithm", "{algorithm: leaky, rate: 1/s, burst: 1}", []string{"limits.x.algorithm"}},
		{"window algorithm with rate", "{algorithm: fixed_window, limit: 10, window: 1s, rate: 5/s}", []string{"limits.x.rate"}},
		{"window algorithm with burst only", "{algorithm: sliding_log, burst: 5}", []string{"limits.x.burst", "limits.x.limit", "limits.x.window"}},
		{"window too short", "{algorithm: sliding_window, limit: 1, window: 500us}", []string{"limits.x.window"}},
		{"window not whole µs", "{algorithm: fixed_window, limit: 1, window: 1000001ns}", []string{"limits.x.window"}},
		{"bucket algorithm with window", "{algorithm: token_bucket, rate: 5/s, burst: 1, window: 1s, limit: 3}", []string{"limits.x.limit", "limits.x.window"}},
		{"bucket without rate", "{algorithm: gcra, burst: 1}", []string{"limits.x.rate"}},
		{"zero burst", "{algorithm: token_bucket, rate: 5/s}", []string{"limits.x.burst"}},
		{"fail_open off api", "{algorithm: gcra, rate: 5/s, burst: 1, fail_open: false}", []string{"limits.x.fail_open"}},
	} {
		_, err := loadString(t, "limits:\n  x: "+tc.limit+"\n")
		if got := problemFields(t, err); !slices.Equal(got, tc.want) {
			t.Errorf("%s: problems %v, want %v (error: %v)", tc.name, got, tc.want, err)
		}
	}
	for name, want := range map[string]string{`"a:b"`: `limits."a:b"`, `"{x}"`: `limits."{x}"`, strings.Repeat("n", 65): "limits." + strings.Repeat("n", 65)} {
		_, err := loadString(t, "limits:\n  "+name+": {algorithm: gcra, rate: 1/s, burst: 1}\n")
		if got := problemFields(t, err); !slices.Equal(got, []string{want}) {
			t.Errorf("limit name %s: problems %v", name, got)
		}
	}
	// The api entry given in full replaces the default, and is validated.
	_, err := loadString(t, "limits: {api: {algorithm: sliding_window, limit: 0, window: 1m}}\n")
	if got := problemFields(t, err); !slices.Equal(got, []string{"limits.api.limit"}) {
		t.Errorf("api limit 0: problems %v", got)
	}
}

func TestBadAuth(t *testing.T) {
	valid := "b178fa90e990aca0a826ca217e51f66a59125ddb4d95bae230006bde38722829"
	for _, tc := range []struct {
		name, keys string
		want       []string
	}{
		{"valid", `[{name: a, sha256: ` + valid + `, tenants: ["*"], limits: [search]}]`, nil},
		{"neither", `[{name: a}]`, []string{"auth.keys[0]"}},
		{"both", `[{name: a, sha256: ` + valid + `, key: k}]`, []string{"auth.keys[0]"}},
		{"short hash", `[{name: a, sha256: abc}]`, []string{"auth.keys[0].sha256"}},
		{"non-hex hash", `[{name: a, sha256: ` + strings.Repeat("g", 64) + `}]`, []string{"auth.keys[0].sha256"}},
		{"no name", `[{key: k}]`, []string{"auth.keys[0].name"}},
		{"duplicate name", `[{name: a, key: k1}, {name: a, key: k2}]`, []string{"auth.keys[1].name"}},
		{"same key twice", `[{name: a, key: producer-key}, {name: b, sha256: ` + strings.ToUpper(valid) + `}]`, []string{"auth.keys[1]"}},
		{"bad glob", `[{name: a, key: k, tenants: ["acme-[", ""]}]`, []string{"auth.keys[0].tenants[0]", "auth.keys[0].tenants[1]"}},
		{"unknown limit", `[{name: a, key: k, limits: [geo]}]`, []string{"auth.keys[0].limits[0]"}},
		{"api limit", `[{name: a, key: k, limits: [api]}]`, []string{"auth.keys[0].limits[0]"}},
	} {
		_, err := loadString(t, "limits: {search: {algorithm: gcra, rate: 1/s, burst: 1}}\nauth:\n  keys: "+tc.keys+"\n")
		if got := problemFields(t, err); !slices.Equal(got, tc.want) {
			t.Errorf("%s: problems %v, want %v (error: %v)", tc.name, got, tc.want, err)
		}
	}
	_, err := loadString(t, "auth: {keys: [{name: a, sha256: "+valid+", key: very-secret-plaintext}]}\n")
	if err == nil || strings.Contains(err.Error(), "very-secret-plaintext") {
		t.Errorf("error reveals the plaintext key: %v", err)
	}
}

func TestKeyPermissions(t *testing.T) {
	k := KeyConfig{Tenants: []string{"acme-*", "globex"}, Limits: []string{"search"}}
	for id, want := range map[string]bool{"acme-eu": true, "acme-": true, "globex": true, "globex2": false, "acme": false} {
		if got := k.AllowsTenant(id); got != want {
			t.Errorf("AllowsTenant(%q) = %v, want %v", id, got, want)
		}
	}
	if (KeyConfig{Admin: true}).AllowsTenant("acme") {
		t.Error("an admin key without tenant patterns allows a tenant")
	}
	for _, tc := range []struct {
		key  KeyConfig
		name string
		want bool
	}{
		{k, "search", true}, {k, "geo", false}, {k, "api", false},
		{KeyConfig{Admin: true}, "geo", true}, {KeyConfig{Admin: true, Limits: []string{"api"}}, "api", false},
	} {
		if got := tc.key.AllowsLimit(tc.name); got != tc.want {
			t.Errorf("%+v.AllowsLimit(%q) = %v, want %v", tc.key, tc.name, got, tc.want)
		}
	}
}

func TestTimingConstraints(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"lead exactly 2 × min_lead", "dispatch: {lead: 100ms, min_lead: 50ms}", nil},
		{"lead below 2 × min_lead", "dispatch: {lead: 99ms, min_lead: 50ms}", []string{"dispatch.lead"}},
		{"min_lead below 1.5 × TCI", "dispatch: {lead: 200ms, min_lead: 50ms}\nworker: {task_check_interval: 40ms}", []string{"dispatch.min_lead"}},
		{"grace equal to tolerance", "dispatch: {tolerance: 5ms, grace: 5ms}", nil},
		{"fetchers equal to concurrency", "worker: {concurrency: 3, fetchers: 3}", nil},
		{"fetchers above concurrency", "worker: {concurrency: 3, fetchers: 4}", []string{"worker.fetchers"}},
		{"negative fetchers", "worker: {fetchers: -1}", []string{"worker.fetchers"}},
		{"negative idle poll", "worker: {idle_poll: -1s}", []string{"worker.idle_poll"}},
		{"negative grace", "dispatch: {grace: -1s}", []string{"dispatch.grace"}},
		{"planner go", "dispatch: {planner: go}", nil},
		{"unknown planner", "dispatch: {planner: python}", []string{"dispatch.planner"}},
		{"max_pause below default_pause", "throttle: {default_pause: 2h}", []string{"throttle.max_pause"}},
		{"floor 1", "throttle: {adaptive_floor: 1}", nil},
		{"circuit failures out of range", "circuit: {failures: 1001, backoff: -1s}", []string{"circuit.backoff", "circuit.failures"}},
		{"circuit max_backoff below backoff", "circuit: {backoff: 1m, max_backoff: 30s}", []string{"circuit.max_backoff"}},
		{"circuit backoff above the default cap", "circuit: {backoff: 1h}", nil},
		{"circuit max_backoff past the bound", "circuit: {max_backoff: 3000h}", []string{"circuit.max_backoff"}},
		{"negative floor", "throttle: {adaptive_floor: -0.1}", []string{"throttle.adaptive_floor"}},
		{"negative retention", "retention: {succeeded: -1h, attempt_log: -1}", []string{"retention.attempt_log", "retention.succeeded"}},
		{"duplicate queue", "task_queues: [a, b, a, '']", []string{"task_queues[2]", "task_queues[3]"}},
		{"negative sizes", "limits_bytes: {max_job_bytes: 0, max_batch_bytes: 1KiB}", []string{"limits_bytes.max_batch_bytes"}},
		{"cluster needs db 0", "redis: {url: redis://x:1/3, addrs: [a:1, b]}", []string{"redis.addrs[1]", "redis.url"}},
	} {
		_, err := loadString(t, tc.yaml+"\n")
		if got := problemFields(t, err); !slices.Equal(got, tc.want) {
			t.Errorf("%s: problems %v, want %v (error: %v)", tc.name, got, tc.want, err)
		}
	}
}

func TestRedisURLErrorHidesPassword(t *testing.T) {
	_, err := Load("", env{EnvRedisURL: "redis://user:hunter2@host:notaport/0"}.get)
	if got := problemFields(t, err); !slices.Equal(got, []string{"redis.url"}) {
		t.Fatalf("problems %v in %v", got, err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error reveals the password: %v", err)
	}
}

func TestRequestTimeoutBounds(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want []string
	}{
		{"redis: {request_timeout: -1s}", []string{"redis.request_timeout"}},
		{"redis: {request_timeout: 2m}", []string{"redis.request_timeout"}},
		{"redis: {request_timeout: 1m}", nil},
		{"redis: {request_timeout: 250ms}", nil},
	} {
		c, err := loadString(t, tc.yaml+"\n")
		if got := problemFields(t, err); !slices.Equal(got, tc.want) {
			t.Errorf("%s: problems %v, want %v (error: %v)", tc.yaml, got, tc.want, err)
		}
		if err == nil && c.Redis.RequestTimeout <= 0 {
			t.Errorf("%s: RequestTimeout = %s", tc.yaml, c.Redis.RequestTimeout)
		}
	}
}

func TestWaitReplicasBounds(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want []string
		// wantTimeout is the resolved wait_timeout when the file is valid.
		wantTimeout time.Duration
	}{
		{"redis: {wait_replicas: 1}", nil, 500 * time.Millisecond},
		{"redis: {wait_replicas: 2, request_timeout: 250ms}", nil, 125 * time.Millisecond},
		{"redis: {wait_replicas: 1, wait_timeout: 2s, request_timeout: 5s}", nil, 2 * time.Second},
		{"redis: {wait_replicas: -1}", []string{"redis.wait_replicas"}, 0},
		{"redis: {wait_replicas: 17}", []string{"redis.wait_replicas"}, 0},
		{"redis: {wait_timeout: 3s, request_timeout: 5s}", []string{"redis.wait_timeout"}, 0},
		{"redis: {wait_timeout: -1ms}", []string{"redis.wait_timeout"}, 0},
		{"redis: {wait_timeout: 1s}", []string{"redis.wait_timeout"}, 0}, // not below request_timeout (1s)
		{"redis: {wait_replicas: 99, wait_timeout: 1s}", []string{"redis.wait_replicas", "redis.wait_timeout"}, 0},
	} {
		c, err := loadString(t, tc.yaml+"\n")
		if got := problemFields(t, err); !slices.Equal(got, tc.want) {
			t.Errorf("%s: problems %v, want %v (error: %v)", tc.yaml, got, tc.want, err)
		}
		if err == nil && c.Redis.WaitTimeout != tc.wantTimeout {
			t.Errorf("%s: WaitTimeout = %s, want %s", tc.yaml, c.Redis.WaitTimeout, tc.wantTimeout)
		}
	}
}

func TestMemoryHighWaterBounds(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want []string
		// wantHW is the resolved high-water mark when the file is valid.
		wantHW float64
	}{
		{"redis: {prefix: sluice}", nil, MemoryHighWaterDefault},
		{"redis: {memory_high_water: 0}", nil, 0},
		{"redis: {memory_high_water: 0.75}", nil, 0.75},
		{"redis: {memory_high_water: 0.99}", nil, 0.99},
		{"redis: {memory_high_water: 1}", []string{"redis.memory_high_water"}, 0},
		{"redis: {memory_high_water: -0.1}", []string{"redis.memory_high_water"}, 0},
		{"redis: {memory_high_water: .nan}", []string{"redis.memory_high_water"}, 0},
		{"redis: {memory_high_water: 90}", []string{"redis.memory_high_water"}, 0},
	} {
		c, err := loadString(t, tc.yaml+"\n")
		if got := problemFields(t, err); !slices.Equal(got, tc.want) {
			t.Errorf("%s: problems %v, want %v (error: %v)", tc.yaml, got, tc.want, err)
		}
		if err == nil && c.Redis.HighWater() != tc.wantHW {
			t.Errorf("%s: HighWater() = %v, want %v", tc.yaml, c.Redis.HighWater(), tc.wantHW)
		}
	}
}

func TestAPICosts(t *testing.T) {
	cfg, err := loadString(t, "limits: {api: {algorithm: sliding_window, limit: 50, window: 1m, costs: {batch_item: 2}}}\n")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := *cfg.Limits[APILimitName].Costs, (APICosts{Read: 1, Write: 1, BatchItem: 2}); got != want {
		t.Errorf("costs %+v, want %+v (unset fields at their defaults)", got, want)
	}
	cfg, err = loadString(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := *cfg.Limits[APILimitName].Costs, (APICosts{Read: 1, Write: 1, BatchItem: 1}); got != want {
		t.Errorf("default costs %+v, want %+v", got, want)
	}
	for _, tc := range []struct {
		name, limits string
		want         []string
	}{
		{"negative", "{api: {algorithm: sliding_window, limit: 50, window: 1m, costs: {read: -1}}}", []string{"limits.api.costs.read"}},
		{"above the capacity", "{api: {algorithm: gcra, rate: 1/s, burst: 4, costs: {write: 5, batch_item: 4}}}", []string{"limits.api.costs.write"}},
		{"on another limit", "{x: {algorithm: gcra, rate: 1/s, burst: 4, costs: {write: 1}}}", []string{"limits.x.costs"}},
	} {
		_, err := loadString(t, "limits: "+tc.limits+"\n")
		if got := problemFields(t, err); !slices.Equal(got, tc.want) {
			t.Errorf("%s: problems %v, want %v (error: %v)", tc.name, got, tc.want, err)
		}
	}
}

// A rate above bucket.MaxRate is refused, naming the bound, wherever the
// file gives one (never run at the bound instead).
func TestRateAboveTheBound(t *testing.T) {
	for name, yaml := range map[string]string{
		"defaults": "defaults: {rate: 1000000000/s}\n",
		"tenant":   "tenants: {acme: {rate: 1000001/s}}\n",
		"admit":    "tenants: {acme: {admit: {rate: 60000001/m, burst: 1}}}\n",
		"upstream": "upstreams: {sms: {rate: 1000000000/s}}\n",
		"limit":    "limits: {x: {algorithm: gcra, rate: 2000000/s, burst: 1}}\n",
	} {
		_, err := loadString(t, yaml)
		if err == nil || !strings.Contains(err.Error(), "above the maximum 1000000/s") {
			t.Errorf("%s: error %v, want one naming the bound 1000000/s", name, err)
		}
	}
	if _, err := loadString(t, "defaults: {rate: 1000000/s}\nupstreams: {sms: {rate: 60000000/m}}\n"); err != nil {
		t.Errorf("rates at the bound: %v", err)
	}
}
