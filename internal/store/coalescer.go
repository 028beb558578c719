package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// CoalesceMaxDefault is NewCoalescer's max when it is < 1.
const CoalesceMaxDefault = 64

// Coalescer coalesces the claims and finishes of concurrent callers into
// ClaimBatch and FinishBatch calls, per shard: a request for a shard with no
// call in flight goes at once, as a call of its own (no added wait when
// idle); the requests that arrive while a call for that shard is in flight
// queue and go together in the next call, at most max per call. Claims
// with different tolerances, and finishes with different configs, go in
// separate calls. Each caller gets exactly what Store.Claim or
// Store.Finish would have returned for its job alone.
//
// A caller whose ctx ends while its request waits or is in flight returns
// ctx.Err() at once; the others are not affected, and its request is still
// sent (or, once sent, still runs). So a claim may happen that nobody sees:
// the job sits running(gen) with its lease until the pass's sweep gives it
// a new gen and retries it (the attempt counts as lease_expired), and a
// finish with that gen is then stale. An unseen finish is simply recorded.
//
// A Coalescer is safe for concurrent use; its methods have Store's
// signatures (Heartbeat passes through), so it serves as a worker's store.
// A stream with requests has one sender goroutine, which ends when the
// stream is idle; an idle Coalescer holds no goroutine and needs no Close.
type Coalescer struct {
	s *Store
	b *batcher[coalesceKey, *coalesceReq]
}

// NewCoalescer returns a Coalescer sending through s, at most max requests
// per call (CoalesceMaxDefault when max < 1).
func NewCoalescer(s *Store, max int) *Coalescer {
	if max < 1 {
		max = CoalesceMaxDefault
	}
	c := &Coalescer{s: s}
	c.b = newBatcher(max, c.call)
	return c
}

// coalesceKey is one stream of calls: the claims of a shard at one
// tolerance, or its finishes under one config.
type coalesceKey struct {
	shard     int
	finish    bool
	tolerance time.Duration
	cfg       FinishConfig
}

// coalesceReq is one caller's request and, once answered, its result.
type coalesceReq struct {
	batchState
	claim  ClaimRequest
	finish FinishRequest
	c      Claim
	f      FinishResult
}

// Claim is Store.Claim, coalesced.
func (c *Coalescer) Claim(ctx context.Context, id string, gen int64, tolerance time.Duration) (Claim, error) {
	shard, err := c.s.jobShard(id)
	if err == nil && tolerance < 0 {
		err = invalidf("tolerance %s: want ≥ 0", tolerance)
	}
	if err != nil {
		return Claim{}, fmt.Errorf("claim job %q: %w", id, err)
	}
	r := &coalesceReq{claim: ClaimRequest{ID: id, Gen: gen}}
	if err := c.b.do(ctx, coalesceKey{shard: shard, tolerance: tolerance}, r); err != nil {
		return Claim{}, fmt.Errorf("claim job %q: %w", id, err)
	}
	return r.c, nil
}

// Finish is Store.Finish, coalesced.
func (c *Coalescer) Finish(ctx context.Context, id string, gen int64, o wire.AttemptOutcome, cfg FinishConfig) (State, error) {
	cfg = cfg.WithDefaults()
	shard, err := c.s.jobShard(id)
	if err == nil {
		err = errors.Join(cfg.validate(), checkOutcome(o))
	}
	if err != nil {
		return "", fmt.Errorf("finish job %q: %w", id, err)
	}
	r := &coalesceReq{finish: FinishRequest{ID: id, Gen: gen, Outcome: o}}
	if err := c.b.do(ctx, coalesceKey{shard: shard, finish: true, cfg: cfg}, r); err != nil {
		return "", fmt.Errorf("finish job %q: %w", id, err)
	}
	return r.f.State, r.f.Err
}

// Heartbeat is Store.Heartbeat.
func (c *Coalescer) Heartbeat(ctx context.Context, workerID string, concurrency int, ttl time.Duration) error {
	return c.s.Heartbeat(ctx, workerID, concurrency, ttl)
}

// call runs one ClaimBatch or FinishBatch for batch and answers each
// request. It runs without its callers' contexts (one caller's cancel must
// not fail the others'), bounded by coalesceCallTimeout.
func (c *Coalescer) call(k coalesceKey, batch []*coalesceReq) {
	ctx, cancel := context.WithTimeout(context.Background(), coalesceCallTimeout)
	defer cancel()
	var err error
	if k.finish {
		reqs := make([]FinishRequest, len(batch))
		for i, r := range batch {
			reqs[i] = r.finish
		}
		var rs []FinishResult
		if rs, err = c.s.finish(ctx, k.shard, reqs, k.cfg); err == nil {
			for i, r := range batch {
				r.f = rs[i]
			}
		}
	} else {
		// In job id order (ids are ULIDs: creation order), so that a
		// tenant's jobs that reach one call together are claimed in the
		// order of their send schedule: claimed out of order, the earlier
		// one is answered early and claimed again (claim.lua).
		slices.SortStableFunc(batch, func(a, b *coalesceReq) int { return strings.Compare(a.claim.ID, b.claim.ID) })
		reqs := make([]ClaimRequest, len(batch))
		for i, r := range batch {
			reqs[i] = r.claim
		}
		var cs []Claim
		if cs, err = c.s.claim(ctx, k.shard, reqs, k.tolerance); err == nil {
			for i, r := range batch {
				r.c = cs[i]
			}
		}
	}
	for _, r := range batch {
		r.answer(err)
	}
}

// coalesceCallTimeout bounds one coalesced call, which runs on no caller's
// context.
const coalesceCallTimeout = 30 * time.Second

// Confirm is the Store's Confirm (one HMGET: nothing to coalesce).
func (c *Coalescer) Confirm(ctx context.Context, id string, gen int64) (bool, error) {
	return c.s.Confirm(ctx, id, gen)
}
