package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
)

// privateRedis is a redis-server of one test's own (the tests below freeze
// it or fill its memory, which the shared test Redis must not suffer).
type privateRedis struct {
	addr string
	proc *os.Process
}

// startPrivateRedis starts a redis-server on a free loopback port and
// returns once it answers PING. Cleanup resumes (SIGCONT) and kills it.
func startPrivateRedis(t *testing.T) *privateRedis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not on PATH: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	dir := t.TempDir()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--maxmemory-policy", "noeviction",
		"--loglevel", "warning", "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	p := &privateRedis{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), proc: cmd.Process}
	c := redis.NewClient(&redis.Options{Addr: p.addr, MaxRetries: -1})
	defer c.Close()
	redistest.PollMsg(t, 10*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err := c.Ping(ctx).Err()
		log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
		return err == nil, fmt.Sprintf("private redis-server on %s did not answer: %v; log: %s", p.addr, err, log)
	})
	return p
}

// freeze stops the server (SIGSTOP) until the test ends: a cleanup
// registered now, so run before the API's and the clients', resumes it.
func (p *privateRedis) freeze(t *testing.T) {
	t.Helper()
	if err := p.proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.proc.Signal(syscall.SIGCONT) })
}

// newPrivateFixture serves the API with a store on r, through the client
// the binaries build (config.RedisConfig.Client, default request_timeout),
// with tweak applied to the options. It returns the fixture, the client and
// the configuration's request timeout.
func newPrivateFixture(t *testing.T, r *privateRedis, tweak func(o *Options, rdb redis.UniversalClient, prefix string)) (*fixture, redis.UniversalClient, time.Duration) {
	t.Helper()
	cfg := (&config.Config{Redis: config.RedisConfig{URL: "redis://" + r.addr + "/0"}}).WithDefaults()
	rdb, err := cfg.Redis.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := redistest.Prefix(t)
	st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Keys: config.AuthConfig{Keys: []config.KeyConfig{
			{Name: "producer", SHA256: config.HashKey(producerToken), Tenants: []string{"acme-*"}},
		}}.ByHash(),
		Redis:          rdb,
		Registry:       prometheus.NewRegistry(),
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		Store:          st,
		FileSigned:     fileSigned,
		RequestTimeout: cfg.Redis.RequestTimeout,
	}
	if tweak != nil {
		tweak(&opts, rdb, prefix)
	}
	return serveFixture(t, opts), rdb, cfg.Redis.RequestTimeout
}

// timed runs f and fails t when it took longer than bound.
func timed(t *testing.T, what string, bound time.Duration, f func() response) response {
	t.Helper()
	start := time.Now()
	r := f()
	if took := time.Since(start); took > bound {
		t.Errorf("%s answered %d after %s, want within %s", what, r.status, took.Round(time.Millisecond), bound)
	}
	return r
}

// assertUnavailable checks a 503 unavailable with Retry-After and a JSON
// error whose message contains want.
func assertUnavailable(t *testing.T, what string, r response, want string) {
	t.Helper()
	msg, _ := r.body["error"].(map[string]any)["message"].(string)
	if r.status != 503 || errorCode(r) != CodeUnavailable || r.header.Get("Retry-After") != "1" || !strings.Contains(msg, want) {
		t.Errorf("%s: %d %q Retry-After %q message %q, want 503 %s, Retry-After 1, message containing %q",
			what, r.status, errorCode(r), r.header.Get("Retry-After"), msg, CodeUnavailable, want)
	}
}

// TestFrozenRedisAnswersWithinTheTimeout freezes Redis (SIGSTOP): enqueue,
// a read and /readyz answer 503 unavailable with Retry-After within the
// configured timeout (+ a generous margin), the enqueue saying that its
// outcome is unknown; after Redis resumes, the retry under the same
// Idempotency-Key is accepted. Before the fix an enqueue took 15–18 s.
func TestFrozenRedisAnswersWithinTheTimeout(t *testing.T) {
	t.Parallel()
	red := startPrivateRedis(t)
	f, _, timeout := newPrivateFixture(t, red, nil)
	bound := timeout + 2*time.Second

	first := f.post(t, "/v1/tenants/acme-1/jobs", producerToken, hook(1))
	if first.status != 202 {
		t.Fatalf("enqueue before the freeze: %d %v", first.status, first.body)
	}
	id, _ := first.body["id"].(string)
	if r := f.do(t, "GET", "/readyz", "", "", ""); r.status != 200 {
		t.Fatalf("/readyz before the freeze: %d", r.status)
	}

	red.freeze(t)
	r := timed(t, "enqueue", bound, func() response {
		return f.post(t, "/v1/tenants/acme-1/jobs", producerToken, hook(2), HeaderIdempotencyKey, "frozen-1")
	})
	assertUnavailable(t, "enqueue", r, MessageOutcomeUnknown+": ")
	assertUnavailable(t, "enqueue", r, HeaderIdempotencyKey)
	r = timed(t, "GET job", bound, func() response { return f.get(t, "/v1/jobs/"+id, producerToken) })
	assertUnavailable(t, "GET job (a read)", r, "storage unavailable")
	r = timed(t, "/readyz", bound, func() response { return f.do(t, "GET", "/readyz", "", "", "") })
	assertUnavailable(t, "/readyz", r, "not reachable")
	if n := testutil.ToFloat64(f.metrics.RedisErrors.WithLabelValues("enqueue")); n != 1 {
		t.Errorf("sluice_redis_errors_total{op=enqueue} = %v, want 1", n)
	}

	if err := red.proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var retry response
	for deadline := time.Now().Add(10 * time.Second); ; {
		retry = f.post(t, "/v1/tenants/acme-1/jobs", producerToken, hook(2), HeaderIdempotencyKey, "frozen-1")
		if retry.status != 503 || time.Now().After(deadline) {
			break
		}
	}
	if retry.status != 202 {
		t.Errorf("retry under the same Idempotency-Key after the thaw: %d %v, want 202", retry.status, retry.body)
	}
}

// TestFrozenRedisBoundsTheAPILimiterToo: with the API limiter failing open
// on a frozen Redis, the limiter and the enqueue share one timeout.
func TestFrozenRedisBoundsTheAPILimiterToo(t *testing.T) {
	t.Parallel()
	red := startPrivateRedis(t)
	f, _, timeout := newPrivateFixture(t, red, func(o *Options, rdb redis.UniversalClient, prefix string) {
		o.APILimiter, o.APILimit, o.APIFailOpen = newLimiter(t, rdb, prefix, ReservedLimit, apiLimit), apiLimit, true
	})
	if r := f.post(t, "/v1/tenants/acme-1/jobs", producerToken, hook(1)); r.status != 202 {
		t.Fatalf("enqueue before the freeze: %d %v", r.status, r.body)
	}
	red.freeze(t)
	r := timed(t, "enqueue", timeout+2*time.Second, func() response {
		return f.post(t, "/v1/tenants/acme-1/jobs", producerToken, hook(2))
	})
	assertUnavailable(t, "enqueue", r, "")
	if n := testutil.ToFloat64(f.metrics.FailOpen); n != 1 {
		t.Errorf("sluice_api_limiter_fail_open_total = %v, want 1", n)
	}
}

// TestOutOfMemoryIsStorageFull fills a Redis whose maxmemory is low
// (noeviction): enqueue answers 507 storage_full with Retry-After, counts
// it, and stores nothing — not the job, not the idempotency key.
func TestOutOfMemoryIsStorageFull(t *testing.T) {
	t.Parallel()
	red := startPrivateRedis(t)
	f, rdb, _ := newPrivateFixture(t, red, nil)
	ctx := context.Background()
	big := `{"type":"webhook","url":"https://example.com/hook","event":"e","payload":{"pad":"` + strings.Repeat("x", 100_000) + `"}}`

	if r := f.post(t, "/v1/tenants/acme-1/jobs", producerToken, hook(1)); r.status != 202 { // loads the functions
		t.Fatalf("first enqueue: %d %v", r.status, r.body)
	}
	limit := redistest.UsedMemory(t, rdb) + 1<<20
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(limit, 10)).Err(); err != nil {
		t.Fatal(err)
	}

	var full response
	var before, after int64
	var key string
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatalf("no 507 after %d enqueues of 100 kB under maxmemory %d", i, limit)
		}
		before, key = rdb.DBSize(ctx).Val(), fmt.Sprint("fill-", i)
		r := f.post(t, "/v1/tenants/acme-1/jobs", producerToken, big, HeaderIdempotencyKey, key)
		if r.status == 202 {
			continue
		}
		full, after = r, rdb.DBSize(ctx).Val()
		break
	}
	msg, _ := full.body["error"].(map[string]any)["message"].(string)
	if full.status != 507 || errorCode(full) != CodeStorageFull || full.header.Get("Retry-After") != strconv.Itoa(StorageFullRetryAfter) || msg == "" {
		t.Errorf("enqueue into a full Redis: %d %q Retry-After %q message %q, want 507 %s Retry-After %d",
			full.status, errorCode(full), full.header.Get("Retry-After"), msg, CodeStorageFull, StorageFullRetryAfter)
	}
	if before != after {
		t.Errorf("the refused enqueue changed the number of keys: %d → %d", before, after)
	}
	// Well below what is used, so that even a small batch is refused.
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(limit/2, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	before = rdb.DBSize(ctx).Val()
	batch := f.post(t, "/v1/tenants/acme-1/jobs:batch", producerToken, `{"jobs":[`+hook(7)+`]}`)
	if batch.status != 507 || errorCode(batch) != CodeStorageFull {
		t.Errorf("batch into a full Redis: %d %q, want 507 %s", batch.status, errorCode(batch), CodeStorageFull)
	}
	if after = rdb.DBSize(ctx).Val(); before != after {
		t.Errorf("the refused batch changed the number of keys: %d → %d", before, after)
	}
	if n := testutil.ToFloat64(f.metrics.StorageFull); n != 2 {
		t.Errorf("sluice_api_storage_full_total = %v, want 2", n)
	}

	// With room again, the refused request's key is new: nothing was kept.
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	r := f.post(t, "/v1/tenants/acme-1/jobs", producerToken, big, HeaderIdempotencyKey, key)
	if r.status != 202 || r.header.Get(HeaderReplayed) != "" {
		t.Errorf("the refused request again, with room: %d replayed %q, want 202 and not a replay", r.status, r.header.Get(HeaderReplayed))
	}
}
