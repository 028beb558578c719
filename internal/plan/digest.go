package plan

import (
	"encoding/binary"
	"math"
)

// SchedSig is the tenant's schedule digest (field rs; lib.lua sched_sig):
// what its ready score was decided on besides now, its head job and its
// released tokens — its Block under λ, TAT, Gate, Hlen, Qtok, Lead, T_eff,
// the burst and, when not 0, the pacing slot of a job of cost 1 — packed
// as little-endian doubles (8, or 9 with the pacing slot). A script whose
// changes leave the digest equal to rs may skip the reschedule.
func SchedSig(t *Tenant, p *Policy, lambda, now float64) ([]byte, Block) {
	ps := PaceSlot(t, p, 1, now)
	code := Blocked(t, p, lambda)
	vals := []float64{float64(code), t.TAT, Gate(t), t.Hlen, t.Qtok, t.Lead, Interval(t, p), p.Burst, ps}
	if ps == 0 {
		vals = vals[:8]
	}
	out := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(out[8*i:], math.Float64bits(v))
	}
	return out, code
}

// RSHeld is field rs of a tenant its reschedule removed from ready for its
// release cap (lib.lua RS_HELD): no digest's bytes.
const RSHeld = "held"

// FFK is the base of the fast finishes' fields f0 and ff, F + D·K + S·K²
// (lib.lua T_FIELDS.FF_K, 2²¹).
const FFK = 2097152

// FFSplit splits a fast-finish field into F, the tokens left, D, the held
// weight the last of them drops, and S, 1 when a token also puts the
// tenant back in ready (lib.lua T_FIELDS.ff_split).
func FFSplit(f float64) (left, d, s float64) {
	k, k2 := float64(FFK), float64(FFK)*FFK
	s = math.Floor(f / k2)
	rest := f - float64(s*k2)
	left = rest - float64(math.Floor(rest/k)*k) // Lua 5.1's %: a − ⌊a/b⌋·b
	return left, (rest - left) / k, s
}

// Fold applies the fast finishes taken since the last save, f0 as minted
// and ff as left: running less the tokens taken, and no held weight once
// the last token dropped it (lib.lua T_FIELDS.fold).
func Fold(t *Tenant, f0, ff float64) {
	if f0 > ff {
		t.Running = lmax(0, t.Running-(f0-ff))
	}
	_, d, _ := FFSplit(f0)
	left, _, _ := FFSplit(ff)
	if d > 0 && left == 0 && ff >= 0 {
		t.FW = 0
	}
}
