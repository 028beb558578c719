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

// A record cut short is a protocol error, not a guess.
func TestParseRecentMalformed(t *testing.T) {
	t.Parallel()
	whole := string(make([]byte, 15)) + "\x02ab" // a record: head, id length 2, id
	for _, raw := range []string{"\x01", string(make([]byte, 15)), string(make([]byte, 15)) + "\x05ab", whole + "x"} {
		if _, err := parseRecent(raw); !errors.Is(err, ErrProtocol) {
			t.Errorf("parseRecent(%q): %v, want ErrProtocol", raw, err)
		}
	}
	if got, err := parseRecent(whole + whole); err != nil || len(got) != 2 || got[0].JobID != "ab" {
		t.Errorf("parseRecent(two records): %+v, %v", got, err)
	}
}

// The ring key grows by one record per finish and is cut back to the last
// RecentMax records by the append that takes it past 4 KiB; it has the
// succeeded retention as its TTL from its creation on; RecentAttempts returns the last
// RecentMax whatever its length.
func TestRecentAttemptsRingIsCutBack(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency, p.AdmitBurst = 1000, 1, 10, 1000 }))
	key := e.store.keys.tenantRecent("acme")
	cfg := FinishConfig{SucceededRetention: 2 * time.Hour}
	var ids []string
	longest := 0
	for i := range 200 {
		id := e.enqueueOne("acme", item(fmt.Sprintf(`{"i":%d}`, i))).ID
		c := e.attempt(id)
		e.finish(id, c.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200, Latency: ms}, cfg)
		ids = append(ids, id)
		n, err := e.rdb.StrLen(e.ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		longest = max(longest, int(n))
		if ttl := e.rdb.PTTL(e.ctx, key).Val(); ttl <= time.Hour || ttl > 2*time.Hour {
			t.Fatalf("after finish %d: the ring's TTL is %s, want the succeeded retention (2h)", i, ttl)
		}
	}
	record := recentHead + len(ids[0])
	if longest > 4096 || longest <= 4096-record {
		t.Fatalf("the ring grew to %d bytes, want it cut back at the append that passes 4096", longest)
	}
	got, err := e.store.RecentAttempts(e.ctx, "acme")
	if err != nil || len(got) != RecentMax {
		t.Fatalf("%d recent attempts, %v; want %d", len(got), err, RecentMax)
	}
	for i, g := range got {
		if want := ids[len(ids)-1-i]; g.JobID != want {
			t.Fatalf("recent attempt %d is job %s, want %s (newest first)", i, g.JobID, want)
		}
	}
	e.requireConsistent()
}

// A tenant whose hash still holds the ring an earlier release kept there
// (field ra: a count byte, then the records) shows it until its ring key
// exists; the tenant's next save deletes the field.
func TestRecentAttemptsOfAnEarlierRelease(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency, p.AdmitBurst = 1000, 1, 10, 100 }))
	old := e.enqueueOne("acme", item(`{"old":1}`)).ID
	c := e.attempt(old)
	e.finish(old, c.Gen, wire.AttemptOutcome{Kind: wire.FinishRetry, Status: 503, Latency: ms}, FinishConfig{})
	key := e.store.keys.tenant("acme")
	records := e.rdb.Get(e.ctx, e.store.keys.tenantRecent("acme")).Val()
	// As an earlier release left it: the field, and no key.
	if err := e.rdb.HSet(e.ctx, key, "ra", "\x01"+records).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Del(e.ctx, e.store.keys.tenantRecent("acme")).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := e.store.RecentAttempts(e.ctx, "acme")
	if err != nil || len(got) != 1 || got[0].JobID != old || got[0].Status != 503 {
		t.Fatalf("the earlier release's ring: %+v, %v; want job %s's 503", got, err, old)
	}
	if err := e.rdb.HSet(e.ctx, key, "ra", "\x02"+records).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.RecentAttempts(e.ctx, "acme"); !errors.Is(err, ErrProtocol) {
		t.Fatalf("a ring whose count is wrong: %v, want ErrProtocol", err)
	}
	id := e.enqueueOne("acme", item(`{"new":1}`)).ID // a save of the tenant
	if e.rdb.HExists(e.ctx, key, "ra").Val() {
		t.Fatal("the tenant's next save left field ra")
	}
	c = e.attempt(id)
	e.finish(id, c.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200, Latency: ms}, FinishConfig{})
	if got, err := e.store.RecentAttempts(e.ctx, "acme"); err != nil || len(got) != 1 || got[0].JobID != id {
		t.Fatalf("after a finish: %+v, %v; want the new ring's one attempt", got, err)
	}
	e.requireConsistent()
}
