package plan

import "math"

// Policy is what the rules read of a tenant's merged policy (lib.lua
// load_policy; store.Params names each).
type Policy struct {
	RateUS      float64 // T: the configured emission interval, µs a token
	Burst       float64 // b: GCRA burst, tokens
	Concurrency float64 // most jobs released + running at once
	Weight      float64 // fair-share weight (≥ 1 in a stored policy)
	Adaptive    bool    // the rate factor RF applies
	Pacing      bool    // pacing by the upstream's quota headers applies
	AdmitBurst  float64 // the admission bucket's capacity: a new tenant's tokens
	TimeoutUS   float64 // an attempt's timeout: a pre-claimed job's lease runs past it
}

// RFFull is a full rate factor in ppm (lib.lua RF_FULL); a tenant's RF of
// 0 also means full.
const RFFull = 1000000

// Block is what keeps a tenant from releasing any job whatever its slot
// (lib.lua blocked, and its code in the schedule digest, SIG.BLOCKED).
type Block int

// The blocks, in the order Blocked checks them.
const (
	NotBlocked  Block = iota
	Disabled          // disabled by an operator
	Paused            // paused by an operator, indefinitely
	Concurrency       // released + running reached the policy's concurrency
	Fair              // released + running reached its fair share of a contended pool
)

// Interval is the effective emission interval T_eff = ⌈T·10⁶ / f⌉ µs of an
// adaptive tenant with rate factor f, T otherwise (lib.lua interval),
// computed in parts so that every product stays exact in doubles.
func Interval(t *Tenant, p *Policy) float64 {
	f := t.RF
	if !p.Adaptive || f <= 0 || f >= RFFull {
		return p.RateUS
	}
	a := math.Floor(p.RateUS / f)
	rm := (p.RateUS - float64(a*f)) * RFFull
	q := math.Floor(rm / f)
	if float64(q*f) < rm {
		q++
	}
	return float64(a*RFFull) + q
}

// Earliest is GCRA's earliest slot for a job of cost c: max(now, TAT −
// (b − c)·T_eff) (lib.lua earliest).
func Earliest(t *Tenant, p *Policy, c, now float64) float64 {
	e := t.TAT - float64((p.Burst-c)*Interval(t, p))
	if e > now {
		return e
	}
	return now
}

// Gate is the end of the tenant's timed pauses, upstream and operator's:
// no slot may be earlier (lib.lua gate).
func Gate(t *Tenant) float64 {
	if t.PausedUntil > t.AdminUntil {
		return t.PausedUntil
	}
	return t.AdminUntil
}

// ReleaseCap is the most tokens the tenant may hold released and unclaimed:
// ⌈lead / T_eff⌉ + b, lead the pass's D (or the tenant's Lead, that of the
// last pass that released one of its jobs) (lib.lua release_cap).
func ReleaseCap(t *Tenant, p *Policy, lead float64) float64 {
	return math.Ceil(lead/Interval(t, p)) + p.Burst
}

// FairCap is a tenant's fair share of a contended pool, max(1, ⌊weight·λ⌋),
// λ in thousandths of a slot per unit of weight (lib.lua FAIR.cap).
func FairCap(p *Policy, lambda float64) float64 {
	return lmax(1, math.Floor(p.Weight*lambda/1000))
}

// Blocked says what keeps the tenant from releasing, in order: disabled,
// paused indefinitely, at its concurrency, at its fair share (only while
// the pool is contended: λ > 0) (lib.lua blocked).
func Blocked(t *Tenant, p *Policy, lambda float64) Block {
	switch {
	case t.Disabled == 1:
		return Disabled
	case t.AdminPaused == 1:
		return Paused
	case t.Running+t.Released >= p.Concurrency:
		return Concurrency
	case lambda > 0 && t.Running+t.Released >= FairCap(p, lambda):
		return Fair
	}
	return NotBlocked
}

// SendTarget is when a job planned at slot goes out under the tenant's
// send schedule: max(slot, Slast + (slot − Sslot)); false for a job planned
// before Sslot, which the claim's GCRA decides (lib.lua send_target).
func SendTarget(t *Tenant, slot float64) (float64, bool) {
	if slot < t.Sslot {
		return 0, false
	}
	return lmax(slot, t.Slast+(slot-t.Sslot)), true
}

// PaceMargin is the share of a reported quota left unspent (lib.lua
// PACE.MARGIN, store.PaceMargin). A variable: Lua computes 1 − MARGIN at
// run time, and so must this package to round alike.
var PaceMargin = 0.05

// pacing says whether the tenant's reported quota paces it at now.
func pacing(t *Tenant, p *Policy, now float64) bool {
	return p.Pacing && t.QUnit > 0 && now < t.QReset
}

// paceUnits is what a job of cost c takes of the quota: 1 request, or c
// tokens for a tokens quota (QUnit 2).
func paceUnits(t *Tenant, c float64) float64 {
	if t.QUnit == 2 {
		return c
	}
	return 1
}

// PaceSlot is the earliest slot pacing leaves the next job, of cost c:
// QReset when less is left than its units, else QNext; 0 when not pacing
// (lib.lua PACE.slot).
func PaceSlot(t *Tenant, p *Policy, c, now float64) float64 {
	if !pacing(t, p, now) {
		return 0
	}
	if t.QRem-t.QFly < paceUnits(t, c) {
		return t.QReset
	}
	return t.QNext
}

// PaceTake charges a job of cost c released at slot to the quota: QFly
// grows by its units and QNext spreads what is left over the time to the
// reset (lib.lua PACE.take).
func PaceTake(t *Tenant, p *Policy, slot, c, now float64) {
	if !pacing(t, p, now) {
		return
	}
	u := paceUnits(t, c)
	left := t.QRem - t.QFly
	t.QFly += u
	if left <= 0 || slot >= t.QReset {
		t.QNext = t.QReset
		return
	}
	t.QNext = lmin(t.QReset, slot+math.Ceil(float64(u*(t.QReset-slot))/float64(left*(1-PaceMargin))))
}

// scale is ⌊d·to/from⌋, split so that it stays exact in doubles (lib.lua
// scale).
func scale(d, from, to float64) float64 {
	q := math.Floor(d / from)
	return float64(q*to) + math.Floor(float64((d-float64(q*from))*to)/from)
}

// rescaleStat moves the send schedule's TAT to a shorter interval (lib.lua
// rescale_stat).
func rescaleStat(t *Tenant, now, old, iv float64) {
	if old > iv && t.Stat > now {
		t.Stat = now + scale(t.Stat-now, old, iv)
	}
}

// RescaleTAT applies a change of the policy's rate or burst to the GCRA
// state, TAT′ = now + min(max(0, TAT − now)·T′/T, b′·T′), and gives a tenant
// no longer adaptive its full rate back (lib.lua rescale_tat).
func RescaleTAT(t *Tenant, p *Policy, now float64) {
	if !p.Adaptive && (t.RF != 0 || t.CutUntil != 0) {
		t.RF, t.CutUntil = 0, 0
	}
	iv := Interval(t, p)
	if t.TATT == iv && t.TATB == p.Burst {
		return
	}
	if t.TATT > 0 && t.TAT > now {
		t.TAT = now + lmin(scale(t.TAT-now, t.TATT, iv), p.Burst*iv)
	}
	rescaleStat(t, now, t.TATT, iv)
	t.TATT, t.TATB = iv, p.Burst
}

// Refactor applies a change of the rate factor alone: as RescaleTAT, but
// never below TAT − T + T′, so slots already handed out keep their spacing
// (lib.lua refactor).
func Refactor(t *Tenant, p *Policy, now float64) {
	iv, old := Interval(t, p), t.TATT
	if old > 0 && old != iv && t.TAT > now {
		t.TAT = lmax(now+lmin(scale(t.TAT-now, old, iv), p.Burst*iv), t.TAT-old+iv)
	} else if old > 0 && old != iv && t.TAT > 0 {
		t.TAT = lmax(t.TAT, t.TAT-old+iv)
	}
	rescaleStat(t, now, old, iv)
	t.TATT = iv
}

// lmax and lmin are Lua 5.1's math.max and math.min of two numbers: the
// first unless the second is strictly greater (less), which differs from
// Go's for −0 and NaN.
func lmax(a, b float64) float64 {
	if b > a {
		return b
	}
	return a
}

func lmin(a, b float64) float64 {
	if b < a {
		return b
	}
	return a
}
