package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/store"
)

const (
	producerHash = "b178fa90e990aca0a826ca217e51f66a59125ddb4d95bae230006bde38722829" // sha256("producer-key")
	plaintextKey = "dev-only-plaintext"
	secretA      = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	secretB      = "whsec_ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7"
)

func ptr[T any](v T) *T { return &v }

func perSecond(n int64) bucket.Rate { return bucket.Rate{Tokens: n, Per: time.Second} }

// env is a fake environment for getenv.
type env map[string]string

func (e env) get(k string) string { return e[k] }

// writeFile writes content to a temporary file and returns its path.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// problemFields returns the Field of every *policy.FieldError in err, sorted.
func problemFields(t *testing.T, err error) []string {
	t.Helper()
	var out []string
	var walk func(error)
	walk = func(e error) {
		switch x := e.(type) {
		case *policy.FieldError:
			out = append(out, x.Field)
		case interface{ Unwrap() []error }:
			for _, y := range x.Unwrap() {
				walk(y)
			}
		default:
			if u := errors.Unwrap(e); u != nil {
				walk(u)
			} else {
				t.Errorf("problem %q is not a *policy.FieldError", e)
			}
		}
	}
	if err != nil {
		walk(err)
	}
	slices.Sort(out)
	return out
}

// defaultConfig is what no file at all gives.
func defaultConfig() *Config {
	return &Config{
		Listen: "127.0.0.1:8080",
		Redis: RedisConfig{URL: "redis://127.0.0.1:6379/0", Prefix: "sluice", Shards: 16, RequestTimeout: time.Second,
			WaitTimeout: 500 * time.Millisecond, MemoryHighWater: ptr(0.9)},
		Limits: map[string]LimitConfig{
			"api": {Algorithm: bucket.SlidingWindow, Limit: 1000, Window: time.Minute, FailOpen: ptr(true), Costs: ptr(APICosts{Read: 1, Write: 1, BatchItem: 1})},
		},
		Dispatch: DispatchConfig{
			Lead: 100 * time.Millisecond, MinLead: 50 * time.Millisecond, Tolerance: 6 * time.Millisecond,
			Grace: time.Second, MaxPromotions: 1000, MaxTenants: 256,
			BatchMax: 64, BatchSpan: 50 * time.Millisecond, MaxSleep: 2 * time.Second, Planner: PlannerLua,
		},
		Throttle: ThrottleConfig{DefaultPause: 30 * time.Second, MaxPause: time.Hour, AdaptiveFloor: 0.05},
		Circuit:  CircuitConfig{Failures: 5, Backoff: 10 * time.Second, MaxBackoff: 10 * time.Minute},
		Retention: RetentionConfig{
			Succeeded: 24 * time.Hour, Canceled: 24 * time.Hour, Dead: 168 * time.Hour,
			DeadMaxPerTenant: 10000, AttemptLog: 20, Idempotency: 24 * time.Hour,
		},
		LimitsBytes: LimitsBytesConfig{MaxJobBytes: policy.MiB, MaxBatchBytes: 16 * policy.MiB},
		TaskQueues:  []string{"default"},
		Worker: WorkerConfig{Concurrency: 100, TaskCheckInterval: 20 * time.Millisecond, ShutdownTimeout: 20 * time.Second, Fetchers: 4,
			IdlePoll: 500 * time.Millisecond},
		Log:     LogConfig{Format: "text", Level: "info", Asynq: "warn"},
		Secrets: SecretsConfig{KeyID: SecretsKeyIDDefault},
		Metrics: MetricsConfig{TopTenants: 100, CacheFor: 5 * time.Second},
	}
}

func assertConfig(t *testing.T, got, want *Config) {
	t.Helper()
	if reflect.DeepEqual(got, want) {
		return
	}
	gv, wv := reflect.ValueOf(*got), reflect.ValueOf(*want)
	for i := range gv.NumField() {
		if g, w := gv.Field(i).Interface(), wv.Field(i).Interface(); !reflect.DeepEqual(g, w) {
			t.Errorf("%s =\n%+v\nwant\n%+v", gv.Type().Field(i).Name, g, w)
		}
	}
}

func TestNoFileGivesDefaults(t *testing.T) {
	empty := writeFile(t, "")
	comments := writeFile(t, "# nothing here\n")
	for name, load := range map[string]func() (*Config, error){
		"Load no path":        func() (*Config, error) { return Load("", nil) },
		"Load empty file":     func() (*Config, error) { return Load(empty, nil) },
		"Load comments only":  func() (*Config, error) { return Load(comments, nil) },
		"FromFlags nothing":   func() (*Config, error) { return FromFlags(nil, env{}.get) },
		"FromFlags nil env":   func() (*Config, error) { return FromFlags(nil, nil) },
		"WithDefaults (zero)": func() (*Config, error) { return (&Config{}).WithDefaults(), nil },
	} {
		t.Run(name, func(t *testing.T) {
			got, err := load()
			if err != nil {
				t.Fatal(err)
			}
			assertConfig(t, got, defaultConfig())
			if !got.UI.On() {
				t.Fatal("the console is off by default")
			}
		})
	}
}

func TestLoadDesignExample(t *testing.T) {
	got, err := Load("testdata/design.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := defaultConfig()
	want.Auth.Keys = []KeyConfig{
		{Name: "producer", SHA256: producerHash, Tenants: []string{"*"}, Limits: []string{"search"}},
		{Name: "ops", SHA256: HashKey(plaintextKey), Tenants: []string{"*"}, Admin: true, FromPlaintext: true},
	}
	want.Redis.Addrs = []string{}
	want.Defaults = policy.Overrides{
		Rate: ptr(perSecond(10)), Burst: ptr[int64](1), Concurrency: ptr[int64](10), Weight: ptr[int64](1),
		Admit:           policy.AdmitOverrides{Rate: ptr(perSecond(100)), Burst: ptr[int64](1000)},
		MaxBacklog:      ptr[int64](100000),
		MaxBacklogBytes: ptr(256 * policy.MiB),
		Retry: policy.RetryOverrides{
			MaxAttempts: ptr(8), MinBackoff: ptr(policy.Duration(time.Second)), MaxBackoff: ptr(policy.Duration(time.Hour)),
			MaxDoublings: ptr(5), MaxRetryDuration: ptr(policy.Duration(24 * time.Hour)),
		},
		Timeout:  ptr(policy.Duration(15 * time.Second)),
		Adaptive: ptr(true),
	}
	want.Tenants = map[string]policy.Overrides{
		"acme": {Rate: ptr(perSecond(50)), Burst: ptr[int64](5), WebhookSecrets: policy.Secrets{secretA}},
	}
	want.Limits["search"] = LimitConfig{Algorithm: bucket.TokenBucket, Rate: perSecond(5), Burst: 20}
	want.Egress.Allow = []string{"127.0.0.0/8"}
	assertConfig(t, got, want)

	// The example's defaults are the built-in ones.
	if p := policy.Resolve(got.Defaults); !reflect.DeepEqual(p, policy.Builtin()) {
		t.Errorf("the example's defaults resolve to %+v, not Builtin()", p)
	}
}

func TestLoadEveryKey(t *testing.T) {
	got, err := Load("testdata/everything.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Listen: "0.0.0.0:9090",
		Redis: RedisConfig{
			URL: "rediss://user:pw@redis.internal:6380/0", Addrs: []string{"10.0.0.1:7000", "10.0.0.2:7000"}, Cluster: true,
			Prefix: "sl.test-1", Shards: 32, RequestTimeout: 2500 * time.Millisecond,
			WaitReplicas: 1, WaitTimeout: 750 * time.Millisecond, MemoryHighWater: ptr(0.9),
		},
		Auth: AuthConfig{Keys: []KeyConfig{
			{Name: "producer", SHA256: strings.ToUpper(producerHash), Tenants: []string{"acme-*", "globex"}, Limits: []string{"search", "geo"}},
			{Name: "ops", SHA256: HashKey(plaintextKey), Admin: true, FromPlaintext: true},
		}},
		Defaults: policy.Overrides{
			Rate: &bucket.Rate{Tokens: 600, Per: time.Minute}, Burst: ptr[int64](3), Concurrency: ptr[int64](4), Weight: ptr[int64](2),
			Admit:           policy.AdmitOverrides{Rate: &bucket.Rate{Tokens: 10000, Per: time.Hour}, Burst: ptr[int64](50)},
			MaxBacklog:      ptr[int64](5000),
			MaxBacklogBytes: ptr(policy.GiB),
			Retry: policy.RetryOverrides{
				MaxAttempts: ptr(4), MinBackoff: ptr(policy.Duration(10 * time.Second)), MaxBackoff: ptr(policy.Duration(5 * time.Minute)),
				MaxDoublings: ptr(3), MaxRetryDuration: ptr(policy.Duration(0)),
			},
			Timeout:  ptr(policy.Duration(30 * time.Second)),
			Adaptive: ptr(false), Unsigned: ptr(true), DisableOnGone: ptr(true),
		},
		Tenants: map[string]policy.Overrides{
			"acme-eu":          {Burst: ptr[int64](10), WebhookSecrets: policy.Secrets{secretA, secretB}},
			"user@example.com": {Concurrency: ptr[int64](1)},
		},
		Limits: map[string]LimitConfig{
			"api":    {Algorithm: bucket.GCRA, Rate: perSecond(20), Burst: 40, FailOpen: ptr(false), Costs: ptr(APICosts{Read: 1, Write: 2, BatchItem: 3})},
			"search": {Algorithm: bucket.FixedWindow, Limit: 100, Window: 10 * time.Second},
			"geo":    {Algorithm: bucket.SlidingLog, Limit: 5, Window: time.Second},
		},
		Dispatch: DispatchConfig{
			Lead: 300 * time.Millisecond, MinLead: 120 * time.Millisecond, Tolerance: 5 * time.Millisecond,
			Grace: 2 * time.Second, MaxPromotions: 50, MaxTenants: 16,
			BatchMax: 200, BatchSpan: 80 * time.Millisecond, MaxSleep: 5 * time.Second, Planner: PlannerLua,
		},
		Throttle: ThrottleConfig{DefaultPause: 10 * time.Second, MaxPause: 15 * time.Minute, AdaptiveFloor: 0.25},
		Circuit:  CircuitConfig{Failures: 3, Backoff: 2 * time.Second, MaxBackoff: time.Minute, Disabled: true},
		Retention: RetentionConfig{
			Succeeded: time.Hour, Canceled: 2 * time.Hour, Dead: 72 * time.Hour,
			DeadMaxPerTenant: 99, AttemptLog: 5, Idempotency: 48 * time.Hour,
		},
		LimitsBytes: LimitsBytesConfig{MaxJobBytes: 64 * policy.KiB, MaxBatchBytes: 2 * policy.MiB},
		TaskQueues:  []string{"critical", "low"},
		Egress:      EgressConfig{Allow: []string{"10.1.2.3/16", "fd00::/8", "192.168.1.10/32"}},
		Worker: WorkerConfig{Concurrency: 8, TaskCheckInterval: 80 * time.Millisecond, ShutdownTimeout: time.Minute, Fetchers: 2,
			IdlePoll: 250 * time.Millisecond},
		Log:     LogConfig{Format: "json", Level: "debug", Asynq: "warn"},
		Metrics: MetricsConfig{TopTenants: 25, CacheFor: 15 * time.Second},
		UI:      UIConfig{Enabled: new(bool)},
		Secrets: SecretsConfig{Key: testSecretsKey, KeyID: "2026-12",
			PreviousKeys: []SecretKeyConfig{{ID: "2026-06", Key: testSecretsKeyOld}}},
	}
	assertConfig(t, got, want)
	if got.UI.On() {
		t.Fatal("ui.enabled: false still serves the console")
	}

	prefixes, err := got.Egress.Prefixes()
	if err != nil {
		t.Fatal(err)
	}
	if s := fmt.Sprint(prefixes); s != "[10.1.0.0/16 fd00::/8 192.168.1.10/32]" {
		t.Errorf("Prefixes() = %s", s)
	}
	if l := got.Log.SlogLevel().String(); l != "DEBUG" {
		t.Errorf("SlogLevel() = %s", l)
	}
	if got.Limits["api"].FailsOpen() || !got.Limits["search"].FailsOpen() {
		t.Error("FailsOpen: want false for api (set false), true for search (unset)")
	}
	tenant := policy.Resolve(got.Defaults, got.Tenants["acme-eu"])
	if tenant.Burst != 10 || tenant.Concurrency != 4 || len(tenant.WebhookSecrets) != 2 {
		t.Errorf("acme-eu resolves to %+v", tenant)
	}
}

func TestPlaintextKeyIsHashedAndForgotten(t *testing.T) {
	got, err := Load("testdata/design.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	byHash := got.Auth.ByHash()
	ops, ok := byHash[HashKey(plaintextKey)]
	if !ok || ops.Name != "ops" || !ops.FromPlaintext || ops.Key != "" {
		t.Errorf("ByHash()[hash of the plaintext key] = %+v, %v", ops, ok)
	}
	producer, ok := byHash[HashKey("producer-key")]
	if !ok || producer.Name != "producer" || producer.FromPlaintext {
		t.Errorf("ByHash()[hash of producer-key] = %+v, %v", producer, ok)
	}
	if len(byHash) != 2 {
		t.Errorf("ByHash() has %d entries, want 2", len(byHash))
	}
	if s := fmt.Sprintf("%+v %#v", got, got); strings.Contains(s, plaintextKey) {
		t.Error("the loaded config still holds the plaintext key")
	}

	// An upper-case hash is matched in lower case.
	upper := KeyConfig{SHA256: strings.ToUpper(producerHash)}
	if upper.KeySHA256() != producerHash {
		t.Errorf("KeySHA256() = %s", upper.KeySHA256())
	}
	// A key built in code with a plaintext Key hashes on demand.
	if (KeyConfig{Key: "producer-key"}).KeySHA256() != producerHash {
		t.Error("KeySHA256() of a plaintext key is not its SHA-256")
	}
}

func TestEnvOverrides(t *testing.T) {
	file := writeFile(t, "listen: 127.0.0.1:1111\nredis: {url: redis://file:6379/1}\n")
	other := writeFile(t, "listen: 127.0.0.1:2222\n")
	for _, tc := range []struct {
		name     string
		args     []string
		env      env
		listen   string
		redisURL string
	}{
		{"file only", []string{"--config", file}, env{}, "127.0.0.1:1111", "redis://file:6379/1"},
		{"env over file", []string{"--config", file}, env{EnvListen: ":9999", EnvRedisURL: "redis://env:6379/2"}, ":9999", "redis://env:6379/2"},
		{"env over defaults", nil, env{EnvListen: "[::1]:8081", EnvRedisURL: "unix:///run/redis.sock"}, "[::1]:8081", "unix:///run/redis.sock"},
		{"SLUICE_CONFIG names the file", nil, env{EnvConfig: file}, "127.0.0.1:1111", "redis://file:6379/1"},
		{"--config beats SLUICE_CONFIG", []string{"-config=" + other}, env{EnvConfig: file}, "127.0.0.1:2222", RedisURLDefault},
		{"empty --config falls back", []string{"--config="}, env{EnvConfig: file}, "127.0.0.1:1111", "redis://file:6379/1"},
		{"empty env values are ignored", []string{"--config", file}, env{EnvListen: "", EnvRedisURL: ""}, "127.0.0.1:1111", "redis://file:6379/1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromFlags(tc.args, tc.env.get)
			if err != nil {
				t.Fatal(err)
			}
			if got.Listen != tc.listen || got.Redis.URL != tc.redisURL {
				t.Errorf("listen %q, redis.url %q; want %q, %q", got.Listen, got.Redis.URL, tc.listen, tc.redisURL)
			}
		})
	}

	// Values from the environment are validated like the file's.
	_, err := Load("", env{EnvListen: "nope", EnvRedisURL: "http://x"}.get)
	if got := problemFields(t, err); !slices.Equal(got, []string{"listen", "redis.url"}) {
		t.Errorf("bad env values: problems %v in %v", got, err)
	}
}

func TestFromFlagsErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"unknown flag": {[]string{"--verbose"}, "flag provided but not defined: -verbose"},
		"positional":   {[]string{"x.yaml"}, `unexpected argument "x.yaml"`},
		"missing file": {[]string{"--config", "testdata/absent.yaml"}, "read config"},
		"no value":     {[]string{"--config"}, "flag needs an argument"},
	} {
		_, err := FromFlags(tc.args, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.want)
		}
	}
	_, err := FromFlags([]string{"-h"}, nil)
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(err.Error(), "--config PATH") {
		t.Errorf("-h: error %v, want flag.ErrHelp with the usage", err)
	}
	_, err = FromFlags([]string{"--config", "testdata/absent.yaml"}, nil)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v does not wrap os.ErrNotExist", err)
	}
}

func TestWithDefaultsKeepsValuesAndInput(t *testing.T) {
	in := &Config{
		Listen:     ":1",
		Redis:      RedisConfig{Shards: 3, Addrs: []string{"a:1"}},
		Limits:     map[string]LimitConfig{"api": {Algorithm: bucket.GCRA, Rate: perSecond(1), Burst: 1}},
		Dispatch:   DispatchConfig{Grace: 5 * time.Second},
		Throttle:   ThrottleConfig{AdaptiveFloor: 1},
		TaskQueues: []string{"q"},
	}
	out := in.WithDefaults()
	if out.Listen != ":1" || out.Redis.Shards != 3 || out.Dispatch.Grace != 5*time.Second ||
		out.Throttle.AdaptiveFloor != 1 || !slices.Equal(out.TaskQueues, []string{"q"}) {
		t.Errorf("WithDefaults changed set values: %+v", out)
	}
	if out.Redis.URL != RedisURLDefault || out.Dispatch.Lead != store.LeadDefault {
		t.Errorf("WithDefaults left zero values: %+v", out)
	}
	if api := out.Limits["api"]; api.Algorithm != bucket.GCRA || !api.FailsOpen() || api.FailOpen == nil {
		t.Errorf("api limit = %+v; want the given one with fail_open set to true", api)
	}
	if in.Limits["api"].FailOpen != nil || in.Redis.URL != "" {
		t.Error("WithDefaults modified its receiver")
	}
	out.TaskQueues[0], out.Redis.Addrs[0] = "changed", "changed"
	if in.TaskQueues[0] != "q" || in.Redis.Addrs[0] != "a:1" {
		t.Error("WithDefaults' result shares slices with its receiver")
	}
}

// TestFetchersDefaultFollowsConcurrency: without worker.fetchers a worker
// runs four asynq servers, or one per job slot when its concurrency is
// smaller (validation wants 1 ≤ fetchers ≤ concurrency); a set value stays.
func TestFetchersDefaultFollowsConcurrency(t *testing.T) {
	for _, tc := range []struct{ concurrency, fetchers, want int }{
		{0, 0, 4}, {100, 0, 4}, {4, 0, 4}, {2, 0, 2}, {1, 0, 1}, {100, 1, 1}, {100, 7, 7},
	} {
		c := &Config{Worker: WorkerConfig{Concurrency: tc.concurrency, Fetchers: tc.fetchers}}
		if got := c.WithDefaults().Worker.Fetchers; got != tc.want {
			t.Errorf("concurrency %d, fetchers %d: default fetchers %d, want %d", tc.concurrency, tc.fetchers, got, tc.want)
		}
		var p problems
		c.WithDefaults().Worker.validate(&p)
		if err := errors.Join(p.errs...); err != nil {
			t.Errorf("concurrency %d, fetchers %d: the defaults do not validate: %v", tc.concurrency, tc.fetchers, err)
		}
	}
}

// TestMetaCarriesEverySetting: a configuration with defaults applied sets
// every field of its meta, and the store's defaults are the file's.
func TestMetaCarriesEverySetting(t *testing.T) {
	m := (&Config{}).WithDefaults().Meta()
	if m.Prefix != store.PrefixDefault || m.Shards != store.ShardsDefault || m.Lead != store.LeadDefault || m.MinLead != store.MinLeadDefault {
		t.Errorf("fixed part %+v", m)
	}
	if m.Settings != store.DefaultSettings() {
		t.Errorf("settings %+v, want store.DefaultSettings() %+v", m.Settings, store.DefaultSettings())
	}
}

// The keys of testdata/everything.yaml: bytes 0…31 and 31…0.
const (
	testSecretsKey    = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	testSecretsKeyOld = "Hx4dHBsaGRgXFhUUExIREA8ODQwLCgkIBwYFBAMCAQA="
)
