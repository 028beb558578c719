package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// A tenant's recent attempts: every finish of a running job is recorded
// (outcome, status, latency, time, job id), newest first, at most RecentMax;
// a stale finish is not; a batch's attempts land in request order; another
// tenant's ring is its own.
func TestRecentAttemptsRing(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency, p.AdmitBurst = 1000, 1, 10, 100 }))
	if got, err := e.store.RecentAttempts(e.ctx, "acme"); err != nil || len(got) != 0 {
		t.Fatalf("before any attempt: %+v, %v", got, err)
	}
	kinds := []wire.FinishKind{wire.FinishSuccess, wire.FinishRetry, wire.FinishPermanent}
	var want []RecentAttempt // oldest first
	for i := range RecentMax + 5 {
		id := e.enqueueOne("acme", item(fmt.Sprintf(`{"i":%d}`, i))).ID
		c := e.attempt(id)
		e.clock.Advance(time.Duration(i+1) * ms)
		o := wire.AttemptOutcome{Kind: kinds[i%3], Status: 200 + i, Latency: time.Duration(i+1)*ms + 7*time.Microsecond}
		e.finish(id, c.Gen, o, FinishConfig{})
		want = append(want, RecentAttempt{JobID: id, Outcome: o.Kind.String(), Status: o.Status,
			Latency: o.Latency, At: e.clock.Now()})
		if i == 0 { // a second finish of the same claim is stale: not recorded
			if _, err := e.store.Finish(e.ctx, id, c.Gen, o, FinishConfig{}); !errors.Is(err, ErrStale) {
				t.Fatalf("second finish: %v", err)
			}
		}
	}
	requireRecent(t, e, "acme", want[len(want)-RecentMax:])

	// Two attempts in one FinishBatch: both recorded, in request order.
	a, b := e.enqueueOne("acme", item(`{"a":1}`)).ID, e.enqueueOne("acme", item(`{"b":1}`)).ID
	ca, cb := e.attempt(a), e.attempt(b)
	res, err := e.store.FinishBatch(e.ctx, 0, []FinishRequest{
		{ID: a, Gen: ca.Gen, Outcome: wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 201, Latency: 3 * ms}},
		{ID: b, Gen: cb.Gen, Outcome: wire.AttemptOutcome{Kind: wire.FinishGone, Status: 410, Latency: 4 * ms}},
	}, FinishConfig{})
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("batch: %+v, %v", res, err)
	}
	want = append(want,
		RecentAttempt{JobID: a, Outcome: "success", Status: 201, Latency: 3 * ms, At: e.clock.Now()},
		RecentAttempt{JobID: b, Outcome: "gone", Status: 410, Latency: 4 * ms, At: e.clock.Now()})
	requireRecent(t, e, "acme", want[len(want)-RecentMax:])

	// Another tenant's ring is its own.
	id := e.enqueueOne("globex", item(`{}`)).ID
	c := e.attempt(id)
	e.finish(id, c.Gen, wire.AttemptOutcome{Kind: wire.FinishThrottled, Status: 429, Latency: ms}, FinishConfig{})
	requireRecent(t, e, "globex", []RecentAttempt{{JobID: id, Outcome: "throttled", Status: 429, Latency: ms, At: e.clock.Now()}})
	requireRecent(t, e, "acme", want[len(want)-RecentMax:])
	if _, err := e.store.RecentAttempts(e.ctx, ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty tenant: %v", err)
	}
	e.requireConsistent()
}

// requireRecent requires tenant's recent attempts to be want (oldest first)
// newest first.
func requireRecent(t *testing.T, e *env, tenant string, want []RecentAttempt) {
	t.Helper()
	got, err := e.store.RecentAttempts(e.ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d recent attempts, want %d: %+v", tenant, len(got), len(want), got)
	}
	for i, g := range got {
		w := want[len(want)-1-i]
		if g.JobID != w.JobID || g.Outcome != w.Outcome || g.Status != w.Status || g.Latency != w.Latency || !g.At.Equal(w.At) {
			t.Fatalf("%s: recent attempt %d = %+v, want %+v", tenant, i, g, w)
		}
	}
}

// A ring cut short or with bytes left over is a protocol error, not a guess.
func TestParseRecentMalformed(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"\x01", "\x01" + string(make([]byte, 15)), "\x00x", "\x01" + string(make([]byte, 15)) + "\x05ab"} {
		if _, err := parseRecent(raw); !errors.Is(err, ErrProtocol) {
			t.Errorf("parseRecent(%q): %v, want ErrProtocol", raw, err)
		}
	}
}
