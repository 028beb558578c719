package store

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// wakes runs action and returns the wake-ups it published on shard, in
// order (a marker published after it ends the read).
func (e *env) wakes(shard int, action func()) []time.Time {
	e.t.Helper()
	channel := e.store.keys.wake(shard)
	sub := e.rdb.Subscribe(e.ctx, channel)
	defer sub.Close()
	if _, err := sub.Receive(e.ctx); err != nil { // the subscription confirmation
		e.t.Fatal(err)
	}
	action()
	if err := e.rdb.Publish(e.ctx, channel, "marker").Err(); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	var got []time.Time
	for {
		msg, err := sub.ReceiveMessage(ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		if msg.Payload == "marker" {
			return got
		}
		us, err := strconv.ParseInt(msg.Payload, 10, 64)
		if err != nil {
			e.t.Fatalf("wake-up %q: %v", msg.Payload, err)
		}
		got = append(got, time.UnixMicro(us).UTC())
	}
}

// requireWake requires exactly one wake-up, at want.
func requireWake(t *testing.T, what string, got []time.Time, want time.Time) {
	t.Helper()
	if len(got) != 1 || !got[0].Equal(want) {
		t.Fatalf("%s: wake-ups %v, want one at %s", what, got, want)
	}
}

// A claim that gives a job back (a timed admin pause) puts its tenant back
// in ready: on an otherwise idle shard that is its earliest time.
func TestWakeOnClaimGiveBack(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	rel := e.released("acme", 1)[0]
	if err := e.store.Pause(e.ctx, "acme", epoch.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	e.clock.Set(rel.Slot)
	got := e.wakes(0, func() {
		if c := e.claim(rel.ID, rel.Gen); c.Outcome != ClaimReturned {
			t.Fatalf("claim: %+v, want returned", c)
		}
	})
	requireWake(t, "claim give-back", got, e.state("acme").NextAt)
	if !got[0].Equal(epoch.Add(time.Minute)) {
		t.Fatalf("wake-up at %s, want the pause's end", got[0])
	}
}

// A finish that frees a tenant at its concurrency cap, and one that puts a
// retry in the delayed set of an idle shard, publish.
func TestWakeOnFinish(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(func(p *Params) { p.Concurrency = 1 }))
	e.enqueue("acme", batchOf(2, "acme")...)
	rel := e.passTenant("acme", time.Second, -1)
	if len(rel) != 1 {
		t.Fatalf("released %d, want 1 (concurrency 1)", len(rel))
	}
	e.claimAt(rel[0])
	if st := e.state("acme"); !st.NextAt.IsZero() {
		t.Fatalf("tenant at its cap is in ready at %s", st.NextAt)
	}
	got := e.wakes(0, func() { e.finish(rel[0].ID, rel[0].Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess}, FinishConfig{}) })
	requireWake(t, "finish freeing the cap", got, e.state("acme").NextAt)

	rel = e.passTenant("acme", time.Second, -1)
	e.claimAt(rel[0])
	var due time.Time
	got = e.wakes(0, func() {
		e.finish(rel[0].ID, rel[0].Gen, wire.AttemptOutcome{Kind: wire.FinishRetry, Status: 500}, FinishConfig{})
		due = e.job(rel[0].ID).Due
	})
	requireWake(t, "finish of a retry on an idle shard", got, due)
}

// Cancelling a released job frees its tenant's concurrency: its next job
// is due, and that is published.
func TestWakeOnCancel(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(func(p *Params) { p.Concurrency = 1 }))
	e.enqueue("acme", batchOf(2, "acme")...)
	rel := e.passTenant("acme", time.Second, -1)
	got := e.wakes(0, func() {
		if _, _, err := e.store.Cancel(e.ctx, rel[0].ID); err != nil {
			t.Fatal(err)
		}
	})
	requireWake(t, "cancel of a released job", got, e.state("acme").NextAt)
}

// Resuming an indefinitely paused tenant puts it back in ready.
func TestWakeOnResume(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.enqueueOne("acme", item(`{}`))
	if err := e.store.Pause(e.ctx, "acme", time.Time{}); err != nil {
		t.Fatal(err)
	}
	got := e.wakes(0, func() {
		if err := e.store.Resume(e.ctx, "acme"); err != nil {
			t.Fatal(err)
		}
	})
	requireWake(t, "resume", got, e.state("acme").NextAt)
}

// A faster rate moves a backlogged tenant's next slot earlier.
func TestWakeOnPolicyPut(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst = 10_000_000, 1 }))
	e.released("acme", 1)
	e.enqueueOne("acme", item(`{"next":1}`))
	slow := e.state("acme").NextAt
	got := e.wakes(0, func() {
		if _, err := e.store.PutTenantPolicy(e.ctx, "acme", Overrides{RateUS: ptr(1_000_000)}, AnyVersion); err != nil {
			t.Fatal(err)
		}
	})
	fast := e.state("acme").NextAt
	if !fast.Before(slow) {
		t.Fatalf("next slot %s after the faster rate, was %s", fast, slow)
	}
	requireWake(t, "policy put", got, fast)
}

// Replaying a dead letter of an idle shard queues it: due now.
func TestWakeOnReplay(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	rel := e.released("acme", 1)[0]
	e.claimAt(rel)
	e.finish(rel.ID, rel.Gen, wire.AttemptOutcome{Kind: wire.FinishPermanent, Status: 400}, FinishConfig{})
	got := e.wakes(0, func() {
		if _, err := e.store.Replay(e.ctx, rel.ID); err != nil {
			t.Fatal(err)
		}
	})
	requireWake(t, "replay", got, e.state("acme").NextAt)
}
