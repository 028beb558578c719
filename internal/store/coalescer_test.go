package store

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/wire"
)

// Many goroutines claim and finish through one Coalescer, every job twice
// at once: exactly one claim of each is ok, the other stale, as the single
// calls would answer, and every job ends succeeded with one attempt.
func TestCoalescerConcurrent(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 2)
	e.seed(params(func(p *Params) { p.Burst, p.Concurrency = 5, 10 }))
	var rel []wire.Release
	for _, tn := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		rel = append(rel, e.released(tn, 5)...)
	}
	for _, r := range rel {
		e.clock.Set(r.Slot)
	}
	c := NewCoalescer(e.store, 8)
	type result struct {
		claim Claim
		state State
		err   error
	}
	results := make([][2]result, len(rel))
	var wg sync.WaitGroup
	for i, r := range rel {
		for k := range 2 {
			wg.Go(func() {
				cl, err := c.Claim(e.ctx, r.ID, r.Gen, 2*ms)
				res := result{claim: cl, err: err}
				if err == nil && cl.Outcome == ClaimOK {
					res.state, res.err = c.Finish(e.ctx, r.ID, r.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}, FinishConfig{})
				}
				results[i][k] = res
			})
		}
	}
	wg.Wait()
	for i, r := range rel {
		ok, stale := 0, 0
		for _, res := range results[i] {
			switch {
			case res.err != nil:
				t.Fatalf("job %s: %v", r.ID, res.err)
			case res.claim.Outcome == ClaimOK && res.state == StateSucceeded && res.claim.Job.Attempt == 1:
				ok++
			case res.claim.Outcome == ClaimStale && (res.claim.State == StateRunning || res.claim.State == StateSucceeded):
				stale++
			default:
				t.Fatalf("job %s: %+v", r.ID, res)
			}
		}
		if ok != 1 || stale != 1 {
			t.Fatalf("job %s: %d ok, %d stale, want one of each", r.ID, ok, stale)
		}
		if j := e.job(r.ID); j.State != StateSucceeded || j.Attempt != 1 {
			t.Fatalf("job %s: %+v", r.ID, j)
		}
	}
	for _, tn := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		if st := e.state(tn); st.Running != 0 || st.Released != 0 || st.Backlog != 0 {
			t.Fatalf("tenant %s: %+v", tn, st)
		}
	}
	e.requireConsistent()
}

// Requests with different tolerances go in separate calls, each with its
// own: a job 1ms early is early at a tolerance of 0 and claimed at 2ms.
func TestCoalescerSeparatesTolerances(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst = 100_000, 1 }))
	a, b := e.released("a", 2), e.released("b", 2)
	e.claimAt(a[0])
	e.claimAt(b[0])
	e.clock.Set(a[1].Slot.Add(-ms))
	c := NewCoalescer(e.store, 0)
	var wg sync.WaitGroup
	var strict, loose Claim
	var errStrict, errLoose error
	wg.Go(func() { strict, errStrict = c.Claim(e.ctx, a[1].ID, a[1].Gen, 0) })
	wg.Go(func() { loose, errLoose = c.Claim(e.ctx, b[1].ID, b[1].Gen, 2*ms) })
	wg.Wait()
	if errStrict != nil || errLoose != nil {
		t.Fatal(errStrict, errLoose)
	}
	if strict.Outcome != ClaimEarly || strict.Wait != ms || loose.Outcome != ClaimOK {
		t.Fatalf("strict %+v, loose %+v", strict, loose)
	}
}

// A coalesced call claims its jobs in job id (creation) order, whatever
// order their callers came in: two due jobs of one tenant (T = 100 ms,
// burst 1) reaching one call latest first — the earlier one is claimed
// and the later one is early by T, as if they had come in order. Claimed
// latest first, the later one went out and the earlier one was answered
// early behind it (a reservation on the send schedule), and the jobs
// queued after them waited behind that reservation too: at saturation
// that reordering was most of the workers' early replies.
func TestCoalescerClaimsInJobOrder(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst = 100_000, 1 }))
	rel := e.released("a", 2)
	if rel[0].ID >= rel[1].ID {
		t.Fatalf("ids %s, %s: want creation order", rel[0].ID, rel[1].ID)
	}
	e.clock.Set(rel[1].Slot) // both due
	c := NewCoalescer(e.store, 0)
	shard, err := e.store.jobShard(rel[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	later := &coalesceReq{claim: ClaimRequest{ID: rel[1].ID, Gen: rel[1].Gen}, batchState: batchState{done: make(chan struct{})}}
	earlier := &coalesceReq{claim: ClaimRequest{ID: rel[0].ID, Gen: rel[0].Gen}, batchState: batchState{done: make(chan struct{})}}
	c.call(coalesceKey{shard: shard, tolerance: 2 * ms}, []*coalesceReq{later, earlier})
	if earlier.err != nil || later.err != nil {
		t.Fatal(earlier.err, later.err)
	}
	if earlier.c.Outcome != ClaimOK || later.c.Outcome != ClaimEarly || later.c.Wait != 100*ms {
		t.Fatalf("earlier %+v, later %+v; want the earlier claimed, the later early by T", earlier.c, later.c)
	}
}

// A caller whose context is done gets ctx.Err() and sends nothing; an
// invalid request is refused as Store refuses it.
func TestCoalescerCanceledAndInvalid(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	rel := e.released("acme", 1)[0]
	e.clock.Set(rel.Slot)
	c := NewCoalescer(e.store, 0)
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	if _, err := c.Claim(ctx, rel.ID, rel.Gen, 2*ms); !errors.Is(err, context.Canceled) {
		t.Fatalf("claim with a canceled ctx: %v", err)
	}
	if j := e.job(rel.ID); j.State != StateReleased {
		t.Fatalf("job %s after a canceled claim, want released", j.State)
	}
	if _, err := c.Claim(e.ctx, rel.ID, rel.Gen, -ms); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative tolerance: %v", err)
	}
	if _, err := c.Finish(e.ctx, rel.ID, rel.Gen, wire.AttemptOutcome{Kind: 99}, FinishConfig{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad outcome: %v", err)
	}
	if _, err := c.Claim(e.ctx, "nope", 1, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bad id: %v", err)
	}
	if _, err := c.Finish(e.ctx, rel.ID, rel.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess}, FinishConfig{}); !errors.Is(err, ErrStale) {
		t.Fatalf("finish of a released job: %v, want ErrStale", err)
	}
}
