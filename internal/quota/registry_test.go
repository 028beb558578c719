package quota

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/upstream"
)

// TestPutUpstreamVersions: a PUT creates at version 1, each PUT bumps it,
// If-Match guards it (0: must not exist), the record reads back with the
// defaults applied, the Params the scripts take and src api, and the
// listing holds the name.
func TestPutUpstreamVersions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.reg.Upstream(e.ctx, "sms"); !errors.Is(err, ErrUpstreamNotFound) {
		t.Fatalf("Upstream before any PUT: %v, want ErrUpstreamNotFound", err)
	}
	v, err := e.reg.PutUpstream(e.ctx, "sms", upCfg(20, 0), SourceAPI, "0")
	if err != nil || v != 1 {
		t.Fatalf("create: version %d, %v; want 1", v, err)
	}
	rec := e.upstream("sms")
	want := upstream.Config{Rate: bucket.Rate{Tokens: 20, Per: time.Second}, Burst: 1, PauseScope: upstream.ScopeTenant, Pacing: upstream.PacingHeaders}
	if rec.Config != want || rec.Version != 1 || rec.Source != SourceAPI || !rec.PausedUntil.IsZero() || rec.PauseReason != "" {
		t.Fatalf("record = %+v", rec)
	}
	if rec.Params != (upstream.Params{IntervalUS: 50_000, Burst: 1}) {
		t.Errorf("params = %+v", rec.Params)
	}
	if _, err := e.reg.PutUpstream(e.ctx, "sms", upCfg(30, 2), SourceAPI, "0"); !errors.Is(err, ErrVersionMismatch) {
		t.Fatalf("create again with If-Match 0: %v, want a version mismatch", err)
	}
	var stale *VersionMismatchError
	_, err = e.reg.PutUpstream(e.ctx, "sms", upCfg(30, 2), SourceAPI, `"u7"`)
	if !errors.As(err, &stale) || stale.Current != 1 || stale.Want != 7 {
		t.Fatalf("stale If-Match: %v, want current 1, want 7", err)
	}
	if got := e.upstream("sms"); got.Config != want || got.Version != 1 {
		t.Fatalf("a refused PUT changed the record: %+v", got)
	}
	for i, ifMatch := range []string{`"u1"`, "2", "*", ""} {
		v, err := e.reg.PutUpstream(e.ctx, "sms", upCfg(int64(30+i), 2), SourceAPI, ifMatch)
		if err != nil || v != int64(2+i) {
			t.Fatalf("update with If-Match %q: version %d, %v; want %d", ifMatch, v, err, 2+i)
		}
	}
	if got := e.upstream("sms"); got.Config.Rate.Tokens != 33 || got.Config.Burst != 2 || got.Version != 5 {
		t.Errorf("after updates: %+v", got)
	}
	names, err := e.reg.UpstreamNames(e.ctx, "", 10)
	if err != nil || !slices.Equal(names, []string{"sms"}) {
		t.Errorf("listing = %v, %v", names, err)
	}
}

// TestPutUpstreamBadInput: bad names, configurations, sources and If-Match
// values are errors wrapping ErrInvalid, and nothing is written.
func TestPutUpstreamBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct {
		name, src, ifMatch string
		cfg                upstream.Config
	}{
		{"a:b", SourceAPI, "", upCfg(1, 1)},
		{"", SourceAPI, "", upCfg(1, 1)},
		{strings.Repeat("x", upstream.MaxNameLen+1), SourceAPI, "", upCfg(1, 1)},
		{"ok", SourceAPI, "", upstream.Config{}},
		{"ok", SourceAPI, "", upstream.Config{Rate: bucket.Rate{Tokens: 1, Per: time.Second}, PauseScope: "everyone"}},
		{"ok", SourceAPI, "", upCfg(1, upstream.MaxBurst+1)},
		{"ok", "file", "", upCfg(1, 1)},
		{"ok", SourceAPI, "W/\"u1\"", upCfg(1, 1)},
		{"ok", SourceAPI, "-1", upCfg(1, 1)},
		{"ok", SourceAPI, "u", upCfg(1, 1)},
	} {
		if _, err := e.reg.PutUpstream(e.ctx, tc.name, tc.cfg, tc.src, tc.ifMatch); !errors.Is(err, ErrInvalid) {
			t.Errorf("PutUpstream(%.20q, %+v, %q, %q) = %v, want ErrInvalid", tc.name, tc.cfg, tc.src, tc.ifMatch, err)
		}
	}
	keys, err := e.rdb.Keys(e.ctx, e.prefix+":*").Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("refused PUTs wrote %v (%v)", keys, err)
	}
}

// TestUpstreamNamesPages: the listing pages in byte order from a cursor.
func TestUpstreamNamesPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	all := []string{"a", "b-1", "b.2", "c", "d@x", "e"}
	for _, n := range slices.Backward(all) {
		if _, err := e.reg.PutUpstream(e.ctx, n, upCfg(1, 1), SourceAPI, ""); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(all)
	var got []string
	after := ""
	for range 10 {
		page, err := e.reg.UpstreamNames(e.ctx, after, 4)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 4 {
			t.Fatalf("page of %d names, limit 4", len(page))
		}
		got = append(got, page...)
		if len(page) < 4 {
			break
		}
		after = page[len(page)-1]
	}
	if !slices.Equal(got, all) {
		t.Errorf("pages = %v, want %v", got, all)
	}
	for _, limit := range []int{0, -1, MaxUpstreamNames + 1} {
		if _, err := e.reg.UpstreamNames(e.ctx, "", limit); !errors.Is(err, ErrInvalid) {
			t.Errorf("limit %d: %v, want ErrInvalid", limit, err)
		}
	}
	recs, err := e.reg.Upstreams(e.ctx, []string{"e", "nope", "a", "bad:name"})
	if err != nil || len(recs) != 2 || recs[0].Name != "e" || recs[1].Name != "a" {
		t.Errorf("Upstreams = %+v, %v; want e and a", recs, err)
	}
}

func TestChargeUpstream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const T = 50 * ms // 20/s
	e.seedUpstream("sms-7", `{"rate":"20/s","burst":1}`, T.Microseconds(), epoch.Add(time.Second))
	charge := func(delta int64) {
		t.Helper()
		if err := e.reg.ChargeUpstream(e.ctx, "sms-7", delta); err != nil {
			t.Fatalf("ChargeUpstream(%+d): %v", delta, err)
		}
	}
	charge(3)
	if got, want := e.upstreamTAT("sms-7"), epoch.Add(time.Second+3*T); !got.Equal(want) {
		t.Fatalf("after a charge of 3: tat +%s, want +%s", got.Sub(epoch), want.Sub(epoch))
	}
	charge(-2)
	if got, want := e.upstreamTAT("sms-7"), epoch.Add(time.Second+T); !got.Equal(want) {
		t.Fatalf("after a refund of 2: tat +%s, want +%s", got.Sub(epoch), want.Sub(epoch))
	}
	charge(-1000) // never below now
	if got := e.upstreamTAT("sms-7"); !got.Equal(epoch) {
		t.Fatalf("after a large refund: tat +%s, want now", got.Sub(epoch))
	}
	e.clock.Advance(time.Minute)
	charge(-5) // a tat already past stays
	if got := e.upstreamTAT("sms-7"); !got.Equal(epoch) {
		t.Fatalf("a refund on an idle upstream moved tat to +%s", got.Sub(epoch))
	}
	charge(0)

	// No such upstream: a no-op that creates nothing.
	if err := e.reg.ChargeUpstream(e.ctx, "nope", 4); err != nil {
		t.Fatalf("unknown upstream: %v, want nil", err)
	}
	if n := e.rdb.Exists(e.ctx, e.reg.UpstreamKey("nope")).Val(); n != 0 {
		t.Fatalf("the charge of an unknown upstream created its hash")
	}
	// Bad input: refused, nothing written.
	for _, bad := range []struct {
		name  string
		delta int64
	}{{"", 1}, {"a:b", 1}, {"{x}", 1}, {"sms-7", 1_000_001}, {"sms-7", -1_000_001}} {
		if err := e.reg.ChargeUpstream(e.ctx, bad.name, bad.delta); !errors.Is(err, ErrInvalid) {
			t.Errorf("ChargeUpstream(%q, %d): %v, want ErrInvalid", bad.name, bad.delta, err)
		}
	}
	if got := e.upstreamTAT("sms-7"); !got.Equal(epoch) {
		t.Fatalf("refused charges moved tat to +%s", got.Sub(epoch))
	}
}

// UpstreamSettings reads each upstream's params and cost_header in one
// call; an unregistered one is not Found; bad names and corrupt fields are
// errors.
func TestUpstreamSettings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seedUpstream("llm", `{"rate":"90000/m","burst":1000,"cost_header":"X-Usage-Tokens"}`, 667, time.Time{})
	e.seedUpstream("sms", `{"rate":"20/s","burst":1}`, 50_000, time.Time{})
	got, err := e.reg.UpstreamSettings(e.ctx, []string{"sms", "llm", "missing"})
	if err != nil {
		t.Fatal(err)
	}
	want := []UpstreamSettings{
		{Found: true, Params: upstream.Params{IntervalUS: 50_000, Burst: 1}},
		{Found: true, Params: upstream.Params{IntervalUS: 667, Burst: 1}, CostHeader: "X-Usage-Tokens"},
		{},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("settings %+v, want %+v", got, want)
	}
	if got, err := e.reg.UpstreamSettings(e.ctx, nil); err != nil || got != nil {
		t.Fatalf("no upstreams: %+v, %v", got, err)
	}
	if _, err := e.reg.UpstreamSettings(e.ctx, []string{"bad:name"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad name: %v, want ErrInvalid", err)
	}
	if _, err := e.reg.UpstreamRuntime(e.ctx, "missing"); !errors.Is(err, ErrUpstreamNotFound) {
		t.Fatalf("params of a missing upstream: %v, want ErrUpstreamNotFound", err)
	}
	if err := e.rdb.HSet(e.ctx, e.reg.UpstreamKey("sms"), "cfg", "{").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.UpstreamSettings(e.ctx, []string{"sms"}); !errors.Is(err, ErrProtocol) {
		t.Fatalf("corrupt cfg: %v, want ErrProtocol", err)
	}
}

// UpstreamCache reads an upstream at most once per ttl (a change shows
// after it, or at once after Forget); a missing name is cached too, unless
// RecheckMissing.
func TestUpstreamCache(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putUpstream("sms", 50*time.Millisecond, 2)
	reads := 0
	read := func(ctx context.Context, names []string) ([]UpstreamSettings, error) {
		reads += len(names)
		return e.reg.UpstreamSettings(ctx, names)
	}
	for _, recheck := range []bool{false, true} {
		reads = 0
		c := NewUpstreamCache(read, time.Second)
		c.RecheckMissing = recheck
		now := epoch
		c.Clock = func() time.Time { return now }
		burst := func(name string) int64 {
			t.Helper()
			got, err := c.Settings(e.ctx, []string{name})
			if err != nil {
				t.Fatal(err)
			}
			return got[0].Params.Burst
		}
		if burst("sms") != 2 || burst("nope") != 0 {
			t.Fatal("first reads wrong")
		}
		e.putUpstream("sms", 50*time.Millisecond, 5)
		e.putUpstream("nope", 50*time.Millisecond, 3)
		gotSMS, gotNope := burst("sms"), burst("nope")
		wantNope := int64(0)
		if recheck {
			wantNope = 3
		}
		if gotSMS != 2 || gotNope != wantNope {
			t.Fatalf("recheck %v within the ttl: bursts %d, %d; want 2 (cached), %d", recheck, gotSMS, gotNope, wantNope)
		}
		wantReads := 2 // sms and nope once each
		if recheck {
			wantReads = 3 // and nope again
		}
		if reads != wantReads {
			t.Fatalf("recheck %v: %d reads, want %d", recheck, reads, wantReads)
		}
		c.Forget("sms")
		if got := burst("sms"); got != 5 {
			t.Fatalf("after Forget: burst %d, want 5", got)
		}
		e.putUpstream("sms", 50*time.Millisecond, 2)
		now = now.Add(time.Second)
		if got := burst("sms"); got != 2 {
			t.Fatalf("after the ttl: burst %d, want 2", got)
		}
		if _, err := c.One(e.ctx, "ghost"); !errors.Is(err, ErrUpstreamNotFound) {
			t.Fatalf("One of a missing upstream: %v", err)
		}
		e.reg.rdb.Del(e.ctx, e.reg.UpstreamKey("nope"))
	}
}

// MissingUpstreams finds every upstream a joined error reports missing,
// once each, and nothing in a Redis error.
func TestMissingUpstreams(t *testing.T) {
	t.Parallel()
	err := errors.Join(
		&UpstreamNotFoundError{Upstream: "a"},
		errors.New("redis: connection refused"),
		errors.Join(&UpstreamNotFoundError{Upstream: "b"}, &UpstreamNotFoundError{Upstream: "a"}),
	)
	if got := MissingUpstreams(err); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("missing %v, want [a b]", got)
	}
	if got := MissingUpstreams(errors.New("redis: connection refused")); got != nil {
		t.Fatalf("missing %v in a Redis error, want none", got)
	}
	if !errors.Is(&UpstreamNotFoundError{Upstream: "a"}, ErrUpstreamNotFound) {
		t.Fatal("UpstreamNotFoundError is not ErrUpstreamNotFound")
	}
	// Redis unreachable: the calls fail, and no upstream is reported missing
	// (its jobs keep waiting).
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = down.Close() })
	reg, err := New(down, Config{Prefix: "down", Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = reg.GrantUpstreams(context.Background(), 0, []UpstreamDemand{{Upstream: "sms", Wanted: 1, Weight: 1, Unit: 1}},
		GrantConfig{Horizon: 100 * time.Millisecond})
	if err == nil || errors.Is(err, ErrUpstreamNotFound) || MissingUpstreams(err) != nil {
		t.Fatalf("grant with Redis down: %v (missing %v); want a Redis error, nothing missing", err, MissingUpstreams(err))
	}
}
