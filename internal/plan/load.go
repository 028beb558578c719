package plan

import "strconv"

// Loaded is a tenant as a script loads it (lib.lua load_tenant and the
// tenant cache's load, lifecycle.lua tenant): its state with the fast
// finishes since its last save folded in and the policy's rate change
// applied, and what the save compares against.
type Loaded struct {
	State  Tenant
	Stored bool    // its hash has a packed state (else a new tenant's admission bucket is full)
	Packed string  // field s as stored
	RS     string  // field rs: the digest its last reschedule recorded
	F0, FF float64 // fast-finish fields as stored (0 when absent)
	CU     float64 // field cu: the latest due of a job its open destinations deferred (0 none)
}

// Load reads a tenant hash as HGETALL returns it (field → value) for a
// call at now under policy p. ok is false for a hash the plan does not
// read and leaves to the scripts: one with fields stored by name (an older
// layout) or the ring of attempts (ra).
func Load(h map[string]string, p *Policy, now float64) (l Loaded, ok bool, err error) {
	for f := range h {
		switch f {
		case "s", "rs", "qh", "cu", "ff", "f0", "fx":
		default:
			if f == "ra" || isField(f) {
				return l, false, nil
			}
		}
	}
	s, stored := h["s"]
	if l.State, err = Decode([]byte(s)); err != nil {
		return l, false, err
	}
	l.Stored, l.Packed, l.RS = stored, s, h["rs"]
	num := func(f string) float64 {
		v, err := strconv.ParseFloat(h[f], 64)
		if err != nil {
			return 0
		}
		return v
	}
	l.F0, l.FF, l.CU = num("f0"), num("ff"), num("cu")
	_, f0 := h["f0"]
	if _, ff := h["ff"]; f0 || ff {
		Fold(&l.State, l.F0, l.FF)
	}
	if !stored {
		l.State.Atok, l.State.Ats = p.AdmitBurst, now
	}
	RescaleTAT(&l.State, p, now)
	return l, true, nil
}

func isField(f string) bool {
	for _, n := range FieldNames {
		if n == f {
			return true
		}
	}
	return false
}
