package plan

import "math"

// The pre-claim's bounds (pass.lua X.PC_BODY, X.PC_BYTES): a body larger
// than PreclaimBody, or one that would take the pass's pre-claimed bodies
// past PreclaimBytes, is left to the claim.
const (
	PreclaimBody  = 16384
	PreclaimBytes = 1048576
)

// CatchUp is the most a late send schedule catches up a job, µs
// (lifecycle.lua CLAIM.CATCH_UP).
const CatchUp = 500

// preclaimAll settles the pre-claim after the release, in release order,
// as claims at now right after the pass would (pass.lua 3e,
// X.preclaim_all): a webhook or http job whose send target is ≤ now + ε is
// claimed by the pass unless its tenant is disabled, paused (indefinitely,
// or its gate past now) or at its concurrency, it was pre-claimed once and
// lost, its body is over PreclaimBody, or the pass's pre-claimed bodies
// would pass PreclaimBytes.
func (rl *releaser) preclaimAll() {
	eps, now := rl.ps.Preclaim, rl.ps.Now
	if eps < 0 {
		return
	}
	for i := range rl.released {
		r := &rl.released[i]
		if r.Job.Type == "task" || r.SendAt > now+eps {
			continue
		}
		t, p := &r.c.Loaded.State, &r.c.Policy
		target, ok := SendTarget(t, r.Slot)
		if !ok || target > now+eps {
			continue
		}
		if t.Disabled == 1 || t.AdminPaused == 1 || Gate(t) > now || t.Running >= p.Concurrency {
			continue
		}
		if r.Job.PCL || r.Job.BodyLen > PreclaimBody || rl.pcBytes+r.Job.BodyLen > PreclaimBytes {
			continue
		}
		rl.pcBytes += r.Job.BodyLen
		r.SendAt = claimSend(r.Slot, target, eps, now)
		claim(t, p, &r.Job, r.Slot, r.SendAt, now)
		r.Preclaimed = true
	}
}

// claimSend is when a job planned at slot with send target target goes
// out, claimed at now with tolerance eps: the target, caught up by at
// most min(⌊ε/4⌋, CatchUp) when it is late, never before the slot nor now
// (lifecycle.lua CLAIM.send, for a job in its schedule's plan).
func claimSend(slot, target, eps, now float64) float64 {
	send := target
	if target > slot {
		step := lmin(math.Floor(eps/4), CatchUp)
		send = lmax(slot, target-step)
	}
	return lmax(now, send)
}

// claim moves j, released at slot, to running, sent at send (lifecycle.lua
// CLAIM.run, in plan): the send schedule (its TAT Stat, Slast, Sslot), the
// counts, the attempt, the first attempt's time.
func claim(t *Tenant, p *Policy, j *Job, slot, send, now float64) {
	iv := Interval(t, p)
	t.Released--
	t.Rtok -= j.Cost
	t.Stat = lmax(t.Stat, send) + float64(j.Cost*iv)
	t.Slast, t.Sslot = send, slot
	t.Running++
	t.Live--
	t.Bytes -= j.Bytes
	j.Attempt++
	if j.First == 0 {
		j.First = now
	}
}
