package store

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// Finished counts the jobs that ended by an attempt — succeeded or dead —
// in the whole seconds before now's, over every shard: a retry, a stale
// finish and the current second's jobs are not counted; each shard's
// counter keeps the last 11 s and expires. FinishRate counts the last whole
// second and the current one so far, over the time they span.
func TestFinished(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acme, globex := "acme", "globex"
	for i := 0; e.store.keys.shardOf(globex) == e.store.keys.shardOf(acme); i++ {
		globex = fmt.Sprintf("globex-%d", i)
	}
	for tn, n := range map[string]int{acme: 4, globex: 2} {
		if _, err := e.store.PutTenantPolicy(e.ctx, tn, Overrides{RateUS: ptr(1000)}, AnyVersion); err != nil {
			t.Fatal(err)
		}
		for range n {
			e.enqueueOne(tn, item(`{}`))
		}
	}
	deliver := func(tn string, kind wire.FinishKind) wire.Release {
		t.Helper()
		r, ok := e.pop(tn, time.Second)
		if !ok {
			t.Fatalf("%s: no job released", tn)
		}
		e.claimAt(r)
		e.finish(r.ID, r.Gen, wire.AttemptOutcome{Kind: kind, Status: 200}, FinishConfig{})
		return r
	}
	finished := func(window time.Duration) int64 {
		t.Helper()
		n, err := e.store.Finished(e.ctx, window)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// rate checks FinishRate against jobs ended over 1 s + the current
	// second's elapsed part (the test clock moves a little with each call).
	rate := func(jobs float64) {
		t.Helper()
		elapsed := float64(e.clock.Now().Sub(epoch)%time.Second) / float64(time.Second)
		got, err := e.store.FinishRate(e.ctx)
		if want := jobs / (1 + elapsed); err != nil || math.Abs(got-want) > want*0.005 {
			t.Fatalf("at %s: FinishRate %v, %v; want %v", e.clock.Now().Sub(epoch), got, err, want)
		}
	}

	e.clock.Set(epoch.Add(100 * time.Millisecond)) // second 0: 3 succeed
	first := deliver(acme, wire.FinishSuccess)
	deliver(acme, wire.FinishSuccess)
	deliver(globex, wire.FinishSuccess)
	if n := finished(time.Second); n != 0 {
		t.Fatalf("during second 0: %d finished, want 0 (the current second is not counted)", n)
	}
	rate(3) // second 0 so far: 3 jobs in its first 0.1 s (and none in the second before)

	e.clock.Set(epoch.Add(1100 * time.Millisecond)) // second 1: 1 dead; a retry and a stale finish
	deliver(globex, wire.FinishPermanent)
	if got := e.job(deliver(acme, wire.FinishRetry).ID).State; got != StateRetrying {
		t.Fatalf("retried job: %s, want retrying", got)
	}
	if _, err := e.store.Finish(e.ctx, first.ID, first.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}, FinishConfig{}); !errors.Is(err, ErrStale) {
		t.Fatalf("a second finish of a succeeded job: %v, want ErrStale", err)
	}
	if got := e.clock.Now(); got.Sub(epoch) >= 2*time.Second {
		t.Fatalf("the deliveries ran into second %s", got.Sub(epoch))
	}
	if n := finished(time.Second); n != 3 {
		t.Fatalf("in second 1, the last second: %d finished, want 3", n)
	}
	rate(3 + 1) // second 0's 3 and second 1's dead letter, over 1.1 s

	e.clock.Set(epoch.Add(2500 * time.Millisecond))
	if n1, n2, n11 := finished(time.Second), finished(2*time.Second), finished(MaxFinishedWindow); n1 != 1 || n2 != 4 || n11 != 4 {
		t.Fatalf("in second 2: last 1 s %d, 2 s %d, 11 s %d; want 1, 4, 4", n1, n2, n11)
	}
	rate(1) // second 1's dead letter, over 1.5 s

	// 40 s on, the shard's first finish drops the seconds older than 11 s.
	e.clock.Set(epoch.Add(40 * time.Second))
	deliver(acme, wire.FinishSuccess)
	key := e.store.keys.finished(e.store.keys.shardOf(acme))
	fields, err := e.rdb.HKeys(e.ctx, key).Result()
	want := fmt.Sprint(epoch.Add(40 * time.Second).Unix())
	if err != nil || len(fields) != 1 || fields[0] != want {
		t.Fatalf("%s after 40 s: fields %v (%v), want only [%s]", key, fields, err, want)
	}
	if ttl := e.rdb.PTTL(e.ctx, key).Val(); ttl <= 0 || ttl > MaxFinishedWindow {
		t.Fatalf("%s: TTL %s, want (0, %s]", key, ttl, MaxFinishedWindow)
	}
	e.clock.Set(epoch.Add(41 * time.Second))
	if n := finished(MaxFinishedWindow); n != 1 {
		t.Fatalf("41 s: %d finished in the last 11 s, want 1", n)
	}

	for _, w := range []time.Duration{0, 1500 * time.Millisecond, MaxFinishedWindow + time.Second} {
		if _, err := e.store.Finished(e.ctx, w); !errors.Is(err, ErrInvalid) {
			t.Fatalf("window %s: %v, want ErrInvalid", w, err)
		}
	}
}
