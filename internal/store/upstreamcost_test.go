package store

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/upstream"
)

// seedUpstream writes an upstream hash as the registry and the coordinator
// do (fields cfg, p, tat), for the cost-correction functions to read.
func (e *env) seedUpstream(name, cfg string, intervalUS int64, tat time.Time) {
	e.t.Helper()
	fields := []any{"cfg", cfg, "p", `{"iv":` + strconv.FormatInt(intervalUS, 10) + `,"b":1,"c":0,"a":0,"s":0}`, "v", 1}
	if !tat.IsZero() {
		fields = append(fields, "tat", tat.UnixMicro())
	}
	if err := e.rdb.HSet(e.ctx, e.store.UpstreamKey(name), fields...).Err(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) upstreamTAT(name string) time.Time {
	e.t.Helper()
	v, err := e.rdb.HGet(e.ctx, e.store.UpstreamKey(name), "tat").Int64()
	if err != nil {
		e.t.Fatal(err)
	}
	return time.UnixMicro(v).UTC()
}

func TestChargeUpstream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const T = 50 * ms // 20/s
	e.seedUpstream("sms-7", `{"rate":"20/s","burst":1}`, T.Microseconds(), epoch.Add(time.Second))
	charge := func(delta int64) {
		t.Helper()
		if err := e.store.ChargeUpstream(e.ctx, "sms-7", delta); err != nil {
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
	if err := e.store.ChargeUpstream(e.ctx, "nope", 4); err != nil {
		t.Fatalf("unknown upstream: %v, want nil", err)
	}
	if n := e.rdb.Exists(e.ctx, e.store.UpstreamKey("nope")).Val(); n != 0 {
		t.Fatalf("the charge of an unknown upstream created its hash")
	}
	// Bad input: refused, nothing written.
	for _, bad := range []struct {
		name  string
		delta int64
	}{{"", 1}, {"a:b", 1}, {"{x}", 1}, {"sms-7", 1_000_001}, {"sms-7", -1_000_001}} {
		if err := e.store.ChargeUpstream(e.ctx, bad.name, bad.delta); !errors.Is(err, ErrInvalid) {
			t.Errorf("ChargeUpstream(%q, %d): %v, want ErrInvalid", bad.name, bad.delta, err)
		}
	}
	if got := e.upstreamTAT("sms-7"); !got.Equal(epoch) {
		t.Fatalf("refused charges moved tat to +%s", got.Sub(epoch))
	}
}

// quota.UpstreamSettings reads each upstream's params and cost_header in one
// call; an unregistered one is not Found; bad names and corrupt fields are
// errors.
func TestUpstreamSettings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seedUpstream("llm", `{"rate":"90000/m","burst":1000,"cost_header":"X-Usage-Tokens"}`, 667, time.Time{})
	e.seedUpstream("sms", `{"rate":"20/s","burst":1}`, 50_000, time.Time{})
	got, err := e.store.UpstreamSettings(e.ctx, []string{"sms", "llm", "missing"})
	if err != nil {
		t.Fatal(err)
	}
	want := []quota.UpstreamSettings{
		{Found: true, Params: upstream.Params{IntervalUS: 50_000, Burst: 1}},
		{Found: true, Params: upstream.Params{IntervalUS: 667, Burst: 1}, CostHeader: "X-Usage-Tokens"},
		{},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("settings %+v, want %+v", got, want)
	}
	if got, err := e.store.UpstreamSettings(e.ctx, nil); err != nil || got != nil {
		t.Fatalf("no upstreams: %+v, %v", got, err)
	}
	if _, err := e.store.UpstreamSettings(e.ctx, []string{"bad:name"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad name: %v, want ErrInvalid", err)
	}
	if _, err := e.store.UpstreamRuntime(e.ctx, "missing"); !errors.Is(err, quota.ErrUpstreamNotFound) {
		t.Fatalf("params of a missing upstream: %v, want quota.ErrUpstreamNotFound", err)
	}
	if err := e.rdb.HSet(e.ctx, e.store.UpstreamKey("sms"), "cfg", "{").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.UpstreamSettings(e.ctx, []string{"sms"}); !errors.Is(err, ErrProtocol) {
		t.Fatalf("corrupt cfg: %v, want ErrProtocol", err)
	}
}

// quota.UpstreamCache reads an upstream at most once per ttl (a change shows
// after it, or at once after Forget); a missing name is cached too, unless
// RecheckMissing.
func TestUpstreamCache(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putUpstream("sms", 50*time.Millisecond, 2)
	reads := 0
	read := func(ctx context.Context, names []string) ([]quota.UpstreamSettings, error) {
		reads += len(names)
		return e.store.UpstreamSettings(ctx, names)
	}
	for _, recheck := range []bool{false, true} {
		reads = 0
		c := quota.NewUpstreamCache(read, time.Second)
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
		if _, err := c.One(e.ctx, "ghost"); !errors.Is(err, quota.ErrUpstreamNotFound) {
			t.Fatalf("One of a missing upstream: %v", err)
		}
		e.store.rdb.Del(e.ctx, e.store.UpstreamKey("nope"))
	}
}

// A claim tells the worker the job's reserved cost and its upstreams (record
// field ups, written by enqueue), which cost correction needs.
func TestClaimCarriesCostAndUpstreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.Burst = 5 }))
	r := e.enqueueOne("acme", Item{Type: "webhook", Body: []byte(`{}`), Cost: 4})
	key, err := e.store.keys.job(r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.HSet(e.ctx, key, "ups", "llm,sms-7").Err(); err != nil {
		t.Fatal(err)
	}
	rel, ok := e.pop("acme", 100*ms)
	if !ok {
		t.Fatal("nothing released")
	}
	j := e.claimAt(rel)
	if j.Cost != 4 || !slices.Equal(j.Upstreams, []string{"llm", "sms-7"}) {
		t.Fatalf("claimed cost %d, upstreams %q; want 4, [llm sms-7]", j.Cost, j.Upstreams)
	}
}
