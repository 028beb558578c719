package plan

// Saved is what the save of a tenant a pass touched writes (lib.lua
// reschedule and save_tenant, as the tenant cache's flush calls them).
type Saved struct {
	Name   string
	State  Tenant  // field s: State.Encode()
	RS     string  // field rs
	Block  Block   // what blocked it, under the pass's λ
	Ready  bool    // in ready, at Score; else out of it
	Score  float64 // its ready score
	F0     float64 // fields f0 and ff: the fast finishes it mints
	FX     float64 // field fx, when HasFX: the ready score a token puts it back at
	HasFX  bool
	Unread bool // the pass read it but did not visit it: nothing is written (State is not set)
	// Incomplete: its reschedule needed a backlog entry past those read
	// (Candidate.Cut); the plan stands for nothing.
	Incomplete bool
}

// Save decides what c stores after the pass's release: its reschedule —
// the digest rs, and its ready score, max(its head job's earliest slot,
// Gate, PaceSlot), or none when it is blocked, has no job, or its head
// would exceed ReleaseCap (rs then RSHeld) —, the held weight it adds to
// the shard's (FW: its weight while it holds a slot), its dead set found
// empty (DZ), and the fast finishes it mints (T_FIELDS.mint).
func Save(ps Pass, c *Candidate) Saved {
	t, p := &c.Loaded.State, &c.Policy
	sv := Saved{Name: c.Name}
	if !c.touched {
		sv.Unread = true
		return sv
	}
	sv.Score, sv.Ready, sv.RS, sv.Block = reschedule(ps, c)
	if t.DZ == 0 && t.Running > 0 {
		t.DZ = 1 // the caller found its dead set empty (lib.lua trim_dead on an empty set): else pass.lua trims it
	}
	fw := 0.0
	if t.Running+t.Released > 0 {
		fw = p.Weight
	}
	t.FW = fw
	sv.F0, sv.FX, sv.HasFX = mint(t, p, sv.RS, sv.Block, ps.Lambda > 0)
	sv.State, sv.Incomplete = *t, c.short
	return sv
}

// reschedule is lib.lua reschedule for a tenant holding no lane jobs.
func reschedule(ps Pass, c *Candidate) (score float64, ready bool, rs string, code Block) {
	t, p, now := &c.Loaded.State, &c.Policy, ps.Now
	sig, code := SchedSig(t, p, ps.Lambda, now)
	rs = string(sig)
	if code != NotBlocked {
		return 0, false, rs, code
	}
	h := c.head
	if !h.seen {
		h.seen = true
		if t.C1 == 1 {
			h.some, h.cost = t.Qtok > 0, 1
		} else if len(c.Jobs) > 0 {
			h.some, h.cost = true, c.Jobs[0].Cost // the first entry, as head_job reads it
		} else if c.Cut {
			c.short = true // the caller sees it: Saved.Incomplete
		}
	}
	if !h.some {
		return 0, false, rs, code
	}
	if t.Rtok > 0 && t.Rtok+h.cost > ReleaseCap(t, p, t.Lead) {
		return 0, false, RSHeld, code
	}
	return lmax(lmax(Earliest(t, p, h.cost, now), Gate(t)), PaceSlot(t, p, h.cost, now)), true, rs, code
}

// mint is lib.lua T_FIELDS.mint as a pass's save computes it (its digest
// just computed): the fast-finish tokens of a tenant whose finishes can
// change nothing but running, ready and rs, F + D·K + S·K²; fx with S.
func mint(t *Tenant, p *Policy, rs string, code Block, contended bool) (f0, fx float64, hasFX bool) {
	if t.Running <= 0 || t.DZ != 1 || t.QUnit > 0 || (p.Adaptive && t.RF != 0) || t.UQ > 0 ||
		t.Running+t.Released >= p.Concurrency || (t.Live == 0 && t.Running == 1) || rs == RSHeld {
		return 0, 0, false
	}
	k := float64(FFK)
	w := 0.0
	if t.Released == 0 {
		w = t.FW
	}
	if !(contended && code == Fair) {
		if t.Live > 0 {
			return t.Running + float64(w*k), 0, false
		}
		return t.Running - 1, 0, false
	}
	if t.Running != 1 || t.C1 != 1 || t.Qtok <= 0 || (t.Rtok > 0 && t.Rtok+1 > ReleaseCap(t, p, t.Lead)) {
		return 0, 0, false
	}
	fx = lmax(Earliest(t, p, 1, 0), Gate(t))
	return 1 + float64(w*k) + float64(k*k), fx, true
}
