package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/wire"
)

// TestLostRepliesLeaveNoKeyBehind drives one shard as a loaded deployment
// does, on the fake clock, with the faults of the soak: tasks that never
// reach a worker, claims and finishes whose replies are lost (the script
// ran; the caller never learns it), scripts run twice (go-redis re-sends a
// call whose reply took longer than its read timeout), finishes that arrive
// after the sweep took the job back, cancels, idempotency keys, dead
// letters. Then it drains everything and audits the keyspace: every key
// has a TTL or is reachable, the counters match the records.
func TestLostRepliesLeaveNoKeyBehind(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			t.Parallel()
			e := newEnvShards(t, 1)
			e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.MinBackoffUS = 5_000, 3, 20_000 }))
			c := &chaos{e: e, rnd: rand.New(rand.NewPCG(seed, 18)), cfg: PassConfig{Lead: 20 * time.Millisecond,
				MinLead: -1, Grace: 30 * time.Millisecond, Capacity: -1}, fcfg: FinishConfig{SucceededRetention: time.Minute,
				DeadRetention: time.Minute}}
			for step := range 400 {
				c.step(step)
			}
			c.drain()
			e.requireConsistent()
			e.requireDrained()
		})
	}
}

// chaos is the state of TestLostRepliesLeaveNoKeyBehind's workers: the
// releases they hold, the jobs they run (claimed, with the time they end).
type chaos struct {
	e       *env
	rnd     *rand.Rand
	cfg     PassConfig
	fcfg    FinishConfig
	held    []wire.Release
	running []chaosRun
	n       int
}

type chaosRun struct {
	id  string
	gen int64
	end time.Time
}

func (c *chaos) p(x float64) bool { return c.rnd.Float64() < x }

// step advances the clock 5 ms and runs one round: enqueues, a pass, claims
// of the releases due, finishes of the attempts ended.
func (c *chaos) step(step int) {
	c.e.clock.Advance(5 * time.Millisecond)
	for range c.rnd.IntN(3) {
		c.enqueue(step)
	}
	c.passAndFetch()
	c.claimDue()
	c.finishEnded(false)
}

func (c *chaos) enqueue(step int) {
	tenant := []string{"a", "b", "c"}[c.rnd.IntN(3)]
	c.n++
	it := item(fmt.Sprintf(`{"n":%d}`, c.n))
	if c.p(0.2) {
		it = idemItem(fmt.Sprintf("k%d", c.rnd.IntN(20)), string(it.Body))
	}
	if c.p(0.05) {
		it.Delay = time.Hour
	}
	rs, err := c.e.store.Enqueue(c.e.ctx, tenant, []Item{it})
	if err != nil {
		c.e.t.Fatalf("step %d: enqueue: %v", step, err)
	}
	if rs[0].Outcome == Accepted && (it.Delay > 0 || c.p(0.02)) {
		if _, _, err := c.e.store.Cancel(c.e.ctx, rs[0].ID); err != nil {
			c.e.t.Logf("cancel %s: %v", rs[0].ID, err) // a running one: conflict
		}
	}
}

// passAndFetch runs a pass (twice now and then: a re-sent call) and hands
// its releases to the workers, losing some (a task that never arrives).
func (c *chaos) passAndFetch() {
	res := c.e.pass(0, c.cfg)
	if c.p(0.05) {
		res = c.e.pass(0, c.cfg) // the first reply lost; the re-sent pass answers
	}
	for _, r := range res.Released {
		if !c.p(0.1) {
			c.held = append(c.held, r)
		}
	}
}

// claimDue claims the held releases whose slot has come (some late, past
// their grace), sometimes twice, sometimes losing the reply.
func (c *chaos) claimDue() {
	now := c.e.clock.Now()
	var keep []wire.Release
	for _, r := range c.held {
		if r.SendAt.After(now) || c.p(0.1) { // not yet, or the worker is slow
			keep = append(keep, r)
			continue
		}
		cl, err := c.e.store.Claim(c.e.ctx, r.ID, r.Gen, 2*time.Millisecond)
		if err != nil {
			c.e.t.Fatalf("claim %s: %v", r.ID, err)
		}
		if c.p(0.05) { // re-sent: the caller sees the second reply
			if cl, err = c.e.store.Claim(c.e.ctx, r.ID, r.Gen, 2*time.Millisecond); err != nil {
				c.e.t.Fatalf("claim %s again: %v", r.ID, err)
			}
		}
		switch {
		case cl.Outcome == ClaimEarly:
			keep = append(keep, r)
		case cl.Outcome == ClaimOK && !c.p(0.05): // else the reply was lost
			c.running = append(c.running, chaosRun{id: r.ID, gen: r.Gen, end: now.Add(time.Duration(c.rnd.IntN(60)) * time.Millisecond)})
		}
	}
	c.held = keep
}

// finishEnded finishes the attempts that ended; unless all, some outcomes
// fail, some replies are lost, some calls are re-sent.
func (c *chaos) finishEnded(all bool) {
	now := c.e.clock.Now()
	var keep []chaosRun
	for _, r := range c.running {
		if r.end.After(now) {
			keep = append(keep, r)
			continue
		}
		o := wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 204}
		if !all {
			switch x := c.rnd.Float64(); {
			case x < 0.05:
				o = wire.AttemptOutcome{Kind: wire.FinishPermanent, Status: 400}
			case x < 0.15:
				o = wire.AttemptOutcome{Kind: wire.FinishRetry, Status: 503}
			case x < 0.17:
				o = wire.AttemptOutcome{Kind: wire.FinishThrottled, Status: 429, Pause: 10 * time.Millisecond}
			}
		}
		times := 1
		if !all && c.p(0.05) {
			times = 2 // re-sent
		}
		for range times {
			if _, err := c.e.store.Finish(c.e.ctx, r.id, r.gen, o, c.fcfg); err != nil && !errors.Is(err, ErrStale) {
				c.e.t.Fatalf("finish %s: %v", r.id, err)
			}
		}
	}
	c.running = keep
}

// requireDrained fails unless every key left under the prefix, once no job
// is live, has a TTL or is one a shard keeps for good (its policy, virtual
// clock, tenant index, its name set and backfill marker: the permanent keys
// of internal/e2e's expiry test): the soak's final check, on the store
// alone.
func (e *env) requireDrained() {
	e.t.Helper()
	keys, err := redistest.Keys(e.ctx, e.rdb, e.prefix+":*")
	if err != nil {
		e.t.Fatal(err)
	}
	permanent := regexp.MustCompile(`^` + regexp.QuoteMeta(e.prefix) + `:\{s\d+\}:(policy|vclock|tenants|tenant_names|tenants_backfilled|agg|top|gate:[audp]|dead:[nx])$`)
	for _, k := range keys {
		if permanent.MatchString(k) {
			continue
		}
		if ttl := e.rdb.PTTL(e.ctx, k).Val(); ttl == -1 { // −2: expired since the scan
			e.t.Errorf("drained, but %s has no TTL (%s): %v", k, e.rdb.Type(e.ctx, k).Val(), e.rdb.HGetAll(e.ctx, k).Val())
		}
	}
}

// drain runs passes, claims every release at once and finishes every
// attempt with success until no job is live.
func (c *chaos) drain() {
	for round := 0; ; round++ {
		if round > 20_000 {
			c.e.t.Fatal("the jobs did not drain")
		}
		c.e.clock.Advance(5 * time.Millisecond)
		for _, r := range c.e.pass(0, c.cfg).Released {
			c.held = append(c.held, r)
		}
		now := c.e.clock.Now()
		var keep []wire.Release
		for _, r := range c.held {
			if r.SendAt.After(now) {
				keep = append(keep, r)
				continue
			}
			if cl := c.e.claim(r.ID, r.Gen); cl.Outcome == ClaimOK {
				c.running = append(c.running, chaosRun{id: r.ID, gen: r.Gen, end: now})
			} else if cl.Outcome == ClaimEarly {
				keep = append(keep, r)
			}
		}
		c.held = keep
		c.finishEnded(true)
		if len(c.held) == 0 && len(c.running) == 0 && c.live() == 0 {
			return
		}
	}
}

// live counts the shard's jobs not yet terminal, from the tenants' state.
func (c *chaos) live() int64 {
	var n int64
	for _, tn := range []string{"a", "b", "c"} {
		st := c.e.state(tn)
		n += st.Backlog + st.Running
	}
	return n
}
