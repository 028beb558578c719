package plan

import (
	"container/heap"
	"math"
)

// VTScale is the virtual time a job of cost 1 adds to a tenant of weight 1
// (pass.lua VT_SCALE).
const VTScale = 1000000

// Job is an entry of a tenant's backlog as the pass reads it: the head
// lane's first (FromHead), then the list's, in order.
type Job struct {
	ID       string
	Queued   bool    // its record's state is queued; any other entry is a tombstone, dropped when met
	FromHead bool    // in the head lane (retries), ahead of the list
	Cost     float64 // record field cost (1 when absent)
	Gen      float64 // record field gen; a release makes it Gen + 1
	Type     string  // webhook, http or task
	NB       float64 // record field nb: not before (a job promoted ahead of its due time), 0 none

	// For the pre-claim (Pass.Preclaim ≥ 0): the record's fields it reads.
	BodyLen float64 // len(field body)
	Bytes   float64 // field bytes: the body's bytes as the tenant counts them
	Attempt float64 // field attempt; a pre-claim makes it Attempt + 1
	First   float64 // field first: the first attempt's claim µs, 0 none; a pre-claim sets it to now
	PCL     bool    // field pcl = 1: pre-claimed once and lost, so the claim takes it
}

// Candidate is a tenant a pass may visit: read from ready (Score its
// score there) or touched by the pass's promotions and sweeps (Score the
// pass's now). Jobs are its backlog's first entries, as many as it may
// release and then one (its next head, for the reschedule), or all.
type Candidate struct {
	Name   string
	Loaded Loaded
	Policy Policy
	Score  float64
	Jobs   []Job
	// Cut says Jobs may not be the whole backlog: a release or reschedule
	// that needs an entry past them makes the plan Incomplete.
	Cut bool

	touched bool
	head    head
	short   bool // needed an entry past Jobs, which was Cut
	tookH   int  // entries taken from the head lane
	tookL   int  // entries taken from the backlog list
}

// Taken is how many entries the release took out of c's head lane and
// its backlog list, tombstones included, in Jobs' order.
func (c *Candidate) Taken() (head, list int) { return c.tookH, c.tookL }

// head is what the release last saw of a tenant's next job, for its
// reschedule (pass.lua c.head): not looked at, none, or a job's cost.
type head struct {
	seen, some bool
	cost       float64
}

// Pass is a pass's settings, its store.PassConfig in µs (docs/design.md
// §2.2 names them).
type Pass struct {
	Now      float64
	Lead     float64 // D
	MinLead  float64 // L
	Spacing  float64 // S, 0 none
	Capacity int     // most jobs released, −1 no limit
	Lambda   float64 // λ in thousandths, 0 when the pool is not contended
	VClock   float64 // the shard's virtual clock (<p>:{sN}:vclock)
	// Truncated: the read of ready was cut at its bound (pass.lua: more
	// when capacity is left, else capacity reached).
	Truncated bool
	// Preclaim is ε of the pre-claim µs (pass.lua 3e), < 0 none.
	Preclaim float64
}

// Released is a job the pass releases.
type Released struct {
	Tenant string
	Job    Job     // its Gen is the release's; pre-claimed, its Attempt and First are the claim's
	Slot   float64 // its planned slot
	// SendAt is the slot, or later by the lateness of its tenant's send
	// schedule; pre-claimed, the claim's send instant.
	SendAt     float64
	Preclaimed bool // claimed by the pass: running at once (Preclaim)

	c *Candidate
}

// Result is what the release of a pass decides.
type Result struct {
	Released        []Released // in release order
	Visited         int        // tenants in the round
	More            bool       // the read was cut with capacity left: pass again
	CapacityReached bool       // the capacity ran out while tenants were in the round
	VClock          float64    // the shard's virtual clock after the pass
	// Incomplete: some tenant needed a backlog entry past those read
	// (Candidate.Cut); the plan stands for nothing and the pass must be
	// read again with more, or left to the script.
	Incomplete bool
	// WaitWeight is the weight of the tenants left in the round with no
	// slot and holding none when the capacity ran out (pass.lua 3d: field
	// r of the shard's fair hash), for a pass with a capacity.
	WaitWeight float64
}

// Supported says whether Release decides for c as pass.lua would: not a
// tenant holding lane jobs, waiting on an upstream, or with an open
// destination after now (their rules stay in the script), nor one loaded
// from a layout the plan does not read.
func Supported(c *Candidate, now float64) bool {
	return c.Loaded.State.UQ == 0 && c.Loaded.CU <= now
}

// Release runs the release of a pass over the candidates (pass.lua 3, for
// tenants Supported): the tenant with the smallest (vt, score, name) — vt
// lifted to the shard's virtual clock first — releases its next job when
// it is not blocked, its pauses and pacing end by now + D, its released
// tokens stay within ReleaseCap, and the job's GCRA slot is ≤ now + D; a
// slot at least L away moves to the first instant S from the pass's other
// such slots. Its state takes the release (TAT, send schedule, counts,
// pacing, Lead = D) and its vt grows by ⌊cost·VTScale/weight⌋. A tenant
// that cannot release leaves the round; the release stops when none is
// left or the capacity is used. The candidates' states and Jobs are
// updated in place; Save decides what each then stores.
func Release(ps Pass, cands []*Candidate) Result {
	r := Result{VClock: ps.VClock}
	h := make(round, 0, len(cands))
	for _, c := range cands {
		t := &c.Loaded.State
		if ps.VClock > t.VT {
			t.VT = ps.VClock
		}
		h = append(h, visit{c: c, vt: t.VT, score: c.Score})
	}
	heap.Init(&h)
	r.Visited = len(h)
	rl := releaser{ps: ps, horizon: ps.Now + ps.Lead}
	left, spent := ps.Capacity, 0
	for h.Len() > 0 {
		if left == 0 {
			r.CapacityReached = true
			break
		}
		top := heap.Pop(&h).(visit)
		c, t := top.c, &top.c.Loaded.State
		c.touched = true
		cost, ok := rl.try(c)
		if !ok {
			continue
		}
		if t.VT > r.VClock {
			r.VClock = t.VT
		}
		t.VT += math.Floor(cost * VTScale / c.Policy.Weight)
		top.vt = t.VT
		if rl.spent(c) {
			spent++
		} else {
			heap.Push(&h, top)
		}
		if left > 0 {
			left--
		}
	}
	if left == 0 && spent > 0 {
		r.CapacityReached = true
	}
	if ps.Truncated {
		if left != 0 {
			r.More = true
		} else {
			r.CapacityReached = true
		}
	}
	if r.CapacityReached {
		for _, v := range h {
			t := &v.c.Loaded.State
			if t.Running+t.Released == 0 && Blocked(t, &v.c.Policy, ps.Lambda) == NotBlocked {
				r.WaitWeight += v.c.Policy.Weight
			}
		}
	}
	rl.preclaimAll()
	for _, c := range cands {
		r.Incomplete = r.Incomplete || c.short
	}
	r.Released = rl.released
	return r
}

// releaser is one pass's release: its settings and what it handed out.
type releaser struct {
	ps       Pass
	horizon  float64   // now + D
	taken    []float64 // the spread slots handed out (spaced)
	released []Released
	pcBytes  float64 // the bodies pre-claimed so far
}

// try releases c's next job if every rule allows it (pass.lua X.try): its
// cost and true, or false.
func (rl *releaser) try(c *Candidate) (float64, bool) {
	t, p, now := &c.Loaded.State, &c.Policy, rl.ps.Now
	g := Gate(t)
	if ps := PaceSlot(t, p, 1, now); ps > g {
		g = ps
	}
	c.head = head{}
	if Blocked(t, p, rl.ps.Lambda) != NotBlocked || g > rl.horizon {
		return 0, false
	}
	var j *Job
	var e float64
	if t.C1 == 1 {
		if t.Qtok <= 0 {
			return 0, false
		}
		c.head = head{seen: true, some: true, cost: 1}
		if t.Rtok > 0 && t.Rtok+1 > ReleaseCap(t, p, rl.ps.Lead) {
			return 0, false
		}
		e = Earliest(t, p, 1, now)
	} else {
		if j = c.next(); j == nil {
			c.head = head{seen: true}
			return 0, false
		}
		c.head = head{seen: true, some: true, cost: j.Cost}
		if t.Rtok > 0 && t.Rtok+j.Cost > ReleaseCap(t, p, rl.ps.Lead) {
			return 0, false
		}
		e = Earliest(t, p, j.Cost, now)
	}
	if e > rl.horizon {
		return 0, false
	}
	slot := e
	if g > slot {
		slot = g
	}
	if j != nil {
		if ps := PaceSlot(t, p, j.Cost, now); ps > slot {
			slot = ps
		}
		if j.NB > slot {
			slot = j.NB
		}
	}
	spread := slot >= now+rl.ps.MinLead
	if spread {
		slot = rl.spaced(slot)
		if slot > rl.horizon {
			return 0, false
		}
	}
	if j == nil {
		if j = c.next(); j == nil {
			c.head = head{seen: true}
			return 0, false
		}
	}
	c.take()
	return rl.emit(c, *j, slot, spread), true
}

// next is c's next queued job, the tombstones before it dropped (pass.lua
// peek and pop_next), or nil.
func (c *Candidate) next() *Job {
	for len(c.Jobs) > 0 && !c.Jobs[0].Queued {
		c.take()
	}
	if len(c.Jobs) == 0 {
		c.short = c.short || c.Cut
		return nil
	}
	return &c.Jobs[0]
}

// take takes c's first backlog entry out: from the head lane, Hlen − 1.
func (c *Candidate) take() {
	if c.Jobs[0].FromHead {
		c.Loaded.State.Hlen--
		c.tookH++
	} else {
		c.tookL++
	}
	c.Jobs = c.Jobs[1:]
}

// spaced is the earliest instant ≥ x at least S away from each slot the
// pass spread before (pass.lua spaced).
func (rl *releaser) spaced(x float64) float64 {
	s := rl.ps.Spacing
	if s <= 0 {
		return x
	}
	for moved := true; moved; {
		moved = false
		for _, t := range rl.taken {
			if x > t-s && x < t+s {
				x, moved = t+s, true
			}
		}
	}
	return x
}

// emit releases j of c at slot (pass.lua X.emit): the send schedule's
// gap, TAT, pacing, the counts, the lead, the job's generation.
func (rl *releaser) emit(c *Candidate, j Job, slot float64, spread bool) float64 {
	t, p := &c.Loaded.State, &c.Policy
	if spread {
		rl.taken = append(rl.taken, slot)
	}
	iv := Interval(t, p)
	if slot > t.TAT-float64((p.Burst-j.Cost)*iv) {
		t.Sslot = slot - float64(j.Cost*iv)
	}
	c.head = head{}
	tat := t.TAT
	if slot > tat {
		tat = slot
	}
	t.TAT = tat + float64(j.Cost*iv)
	PaceTake(t, p, slot, j.Cost, rl.ps.Now)
	t.Qtok -= j.Cost
	t.Released++
	t.Rtok += j.Cost
	t.Lead = rl.ps.Lead
	j.Gen++
	send, ok := SendTarget(t, slot)
	if !ok {
		send = slot
	}
	rl.released = append(rl.released, Released{Tenant: c.Name, Job: j, Slot: slot, SendAt: send, c: c})
	return j.Cost
}

// spent says whether c, which has just released, can release nothing more
// this pass (pass.lua X.spent): its jobs all cost 1 and its earliest slot
// is past now + D, or it is blocked.
func (rl *releaser) spent(c *Candidate) bool {
	t, p := &c.Loaded.State, &c.Policy
	return (t.C1 == 1 && Earliest(t, p, 1, rl.ps.Now) > rl.horizon) || Blocked(t, p, rl.ps.Lambda) != NotBlocked
}

// visit is a tenant in the round, ordered by (vt, score, name): a strict
// order, so the pops come in one order whatever the heap's shape.
type visit struct {
	c         *Candidate
	vt, score float64
}

type round []visit

func (h round) Len() int { return len(h) }
func (h round) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.vt != b.vt {
		return a.vt < b.vt
	}
	if a.score != b.score {
		return a.score < b.score
	}
	return a.c.Name < b.c.Name
}
func (h round) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *round) Push(x any)   { *h = append(*h, x.(visit)) }
func (h *round) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
