package store

import (
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// sim drives one shard like production does, on the fake clock: dispatcher
// passes at chosen times, and workers that claim every released job exactly
// at its slot and finish it (success, or what outcome says) after a hold
// time. Events run in time order, so the clock only moves forward. It
// records every release.
type sim struct {
	e       *env
	shard   int
	cfg     PassConfig
	hold    func() time.Duration       // how long a claimed job runs; nil = 0
	outcome func() wire.AttemptOutcome // each finish's outcome; nil = success
	// outcomeOf, when set, gives each finish's outcome by its job (before outcome).
	outcomeOf func(ClaimedJob) wire.AttemptOutcome
	check     func(at string) // called after every event; nil = none
	// waitEarly makes a claim answered early wait and claim again, as a
	// worker does (else an early claim fails the test); sentAt then keeps
	// each job's claim instant, its send time.
	waitEarly bool
	sentAt    map[string]time.Time
	waiting   []wire.Release // released, not yet claimed, by slot
	running   []simRun       // claimed, by finish time
	released  []wire.Release // every release, in order
	claims    int
	finished  int
	succeeded int
}

type simRun struct {
	job ClaimedJob
	end time.Time
}

func newSim(e *env, tenant string, cfg PassConfig) *sim {
	return &sim{e: e, shard: e.store.keys.shardOf(tenant), cfg: cfg}
}

// passAt runs the workers' events due by at, then a pass at at.
func (s *sim) passAt(at time.Time) PassResult {
	s.e.t.Helper()
	s.runUntil(at)
	s.e.clock.Set(at)
	res := s.e.pass(s.shard, s.cfg)
	lead := s.cfg.WithDefaults().Lead
	for _, r := range res.Released {
		if r.Slot.Before(at) || r.Slot.After(at.Add(lead)) {
			s.e.t.Fatalf("pass at +%s released %s at +%s, outside [now, now + D]", at.Sub(epoch), r.ID, r.Slot.Sub(epoch))
		}
	}
	s.released = append(s.released, res.Released...)
	s.waiting = append(s.waiting, res.Released...)
	slices.SortStableFunc(s.waiting, func(a, b wire.Release) int { return a.Slot.Compare(b.Slot) })
	s.checkpoint(fmt.Sprintf("pass at +%s", at.Sub(epoch)))
	return res
}

// runUntil claims and finishes, in time order, everything due by at.
func (s *sim) runUntil(at time.Time) {
	s.e.t.Helper()
	for {
		claimAt, finishAt := farFuture, farFuture
		if len(s.waiting) > 0 {
			claimAt = s.waiting[0].Slot
		}
		if len(s.running) > 0 {
			finishAt = s.running[0].end
		}
		switch {
		case finishAt.After(at) && claimAt.After(at):
			return
		case !finishAt.After(claimAt): // finish first at equal times: frees the slot
			r := s.running[0]
			s.running = s.running[1:]
			s.e.clock.Set(r.end)
			o := wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}
			if s.outcomeOf != nil {
				o = s.outcomeOf(r.job)
			} else if s.outcome != nil {
				o = s.outcome()
			}
			if s.e.finish(r.job.ID, r.job.Gen, o, FinishConfig{}) == StateSucceeded {
				s.succeeded++
			}
			s.finished++
			s.checkpoint("finish " + r.job.ID)
		default:
			rel := s.waiting[0]
			s.waiting = s.waiting[1:]
			if s.waitEarly {
				s.claimOrWait(rel)
				continue
			}
			job := s.e.claimAt(rel)
			s.claims++
			var d time.Duration
			if s.hold != nil {
				d = s.hold()
			}
			s.running = append(s.running, simRun{job: job, end: rel.Slot.Add(d)})
			slices.SortStableFunc(s.running, func(a, b simRun) int { return a.end.Compare(b.end) })
			s.checkpoint("claim " + rel.ID)
		}
	}
}

// claimOrWait claims rel at its due time (its Slot field, moved by earlier
// early answers): claimed, it runs from now; answered early, it is back in
// waiting, due when the claim said.
func (s *sim) claimOrWait(rel wire.Release) {
	s.e.t.Helper()
	s.e.clock.Set(rel.Slot)
	c := s.e.claim(rel.ID, rel.Gen)
	if c.Outcome == ClaimEarly {
		rel.Slot = s.e.clock.Now().Add(c.Wait)
		s.waiting = append(s.waiting, rel)
		slices.SortStableFunc(s.waiting, func(a, b wire.Release) int { return a.Slot.Compare(b.Slot) })
		return
	}
	if c.Outcome != ClaimOK {
		s.e.t.Fatalf("claim %s@%d at +%s: %+v", rel.ID, rel.Gen, rel.Slot.Sub(epoch), c)
	}
	if s.sentAt == nil {
		s.sentAt = map[string]time.Time{}
	}
	s.sentAt[rel.ID] = c.Job.SendAt // the worker waits for it: up to ε after the claim
	s.claims++
	var d time.Duration
	if s.hold != nil {
		d = s.hold()
	}
	s.running = append(s.running, simRun{job: c.Job, end: s.e.clock.Now().Add(d)})
	slices.SortStableFunc(s.running, func(a, b simRun) int { return a.end.Compare(b.end) })
	s.checkpoint("claim " + rel.ID)
}

func (s *sim) checkpoint(at string) {
	if s.check != nil {
		s.check(at)
	}
}

// slots are the slots of every release, sorted.
func (s *sim) slots() []time.Time {
	out := make([]time.Time, len(s.released))
	for i, r := range s.released {
		out[i] = r.Slot
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// gcraViolation checks sorted unit-cost slots against GCRA's bound: any
// window [sᵢ, sⱼ] holds at most b + (sⱼ − sᵢ)/T tokens. It returns the first
// violation, or "".
func gcraViolation(slots []time.Time, burst int64, interval time.Duration) string {
	for i := range slots {
		for j := i; j < len(slots); j++ {
			tokens := int64(j - i + 1)
			span := slots[j].Sub(slots[i])
			if tokens > burst+int64(span/interval) {
				return fmt.Sprintf("%d tokens in [+%s, +%s] (%s), bound b + Δ/T = %d",
					tokens, slots[i].Sub(epoch), slots[j].Sub(epoch), span, burst+int64(span/interval))
			}
		}
	}
	return ""
}
