package plan

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Tenant is a tenant's packed state: field s of its hash <p>:{sN}:t:<tenant>,
// the doubles lib.lua's T_FIELDS names, in that order. Times are µs since
// the Unix epoch (Redis TIME), intervals µs, counts whole numbers, flags 0
// or 1. docs/design.md §3 and lib.lua say what each field means.
type Tenant struct {
	TAT, TATT, TATB   float64 // GCRA: theoretical arrival time, and the T_eff and burst it was computed with
	Atok, Ats         float64 // admission bucket: tokens, time of the last whole token
	Live, Bytes, Qtok float64 // jobs not finished, their body bytes, queued tokens
	Running, Released float64 // jobs claimed and running; released and not yet claimed
	Rtok              float64 // released tokens not yet claimed
	Hseq, Hlen        float64 // head lane: next sequence, length
	PausedUntil       float64 // upstream pause end
	AdminPaused       float64 // 1: paused by an operator, indefinitely
	AdminUntil        float64 // operator's timed pause end
	Disabled          float64 // 1: disabled
	VT                float64 // weighted virtual time (fair order of a pass)
	Lead              float64 // D of the last pass that released one of its jobs
	RF, CutUntil      float64 // adaptive rate factor (ppm; 0 = full) and the cut's end
	Stat              float64 // the send schedule's TAT (claim.lua)
	Sslot, Slast      float64 // send schedule: the last claimed job's planned slot, its send
	C1                float64 // 1: every queued job costs 1
	DZ                float64 // 1: the dead set is empty
	InM, InC, InP     float64 // inflow: minute, tokens this minute, tokens the minute before
	UQ, Useq          float64 // lane jobs held, lane sequence
	QUnit, QRem, QLim float64 // pacing by quota headers: unit, remaining, limit
	QReset, QFly      float64 // the quota's reset, units sent since the report
	QNext             float64 // the paced slot of the next job
	FW                float64 // weight it adds to the shard's held weight (FAIR)
}

// FieldNames are the packed fields' names, lib.lua's T_FIELDS, in order.
var FieldNames = [...]string{"tat", "tat_t", "tat_b", "atok", "ats", "live", "bytes", "qtok",
	"running", "released", "rtok", "hseq", "hlen", "paused_until", "admin_paused", "admin_until",
	"disabled", "vt", "lead", "rf", "cut_until", "stat", "sslot", "slast", "c1", "dz",
	"in_m", "in_c", "in_p", "uq", "useq", "q_unit", "q_rem", "q_lim", "q_reset", "q_fly", "q_next", "fw"}

// Fields returns pointers to t's fields in FieldNames' order.
func (t *Tenant) Fields() [len(FieldNames)]*float64 {
	return [...]*float64{&t.TAT, &t.TATT, &t.TATB, &t.Atok, &t.Ats, &t.Live, &t.Bytes, &t.Qtok,
		&t.Running, &t.Released, &t.Rtok, &t.Hseq, &t.Hlen, &t.PausedUntil, &t.AdminPaused, &t.AdminUntil,
		&t.Disabled, &t.VT, &t.Lead, &t.RF, &t.CutUntil, &t.Stat, &t.Sslot, &t.Slast, &t.C1, &t.DZ,
		&t.InM, &t.InC, &t.InP, &t.UQ, &t.Useq, &t.QUnit, &t.QRem, &t.QLim, &t.QReset, &t.QFly, &t.QNext, &t.FW}
}

// Decode reads a packed state: little-endian doubles in FieldNames' order.
// A shorter state (Encode's, or one packed before the last fields existed)
// reads its missing fields as 0. The empty state is the zero Tenant.
func Decode(s []byte) (Tenant, error) {
	var t Tenant
	if len(s)%8 != 0 || len(s) > 8*len(FieldNames) {
		return t, fmt.Errorf("decode tenant state: %d bytes, want a multiple of 8 up to %d", len(s), 8*len(FieldNames))
	}
	for i, f := range t.Fields() {
		if 8*i >= len(s) {
			break
		}
		*f = math.Float64frombits(binary.LittleEndian.Uint64(s[8*i:]))
	}
	return t, nil
}

// Encode packs t as lib.lua's pack_tenant does: the fields up to the last
// that is not 0, little-endian doubles.
func (t *Tenant) Encode() []byte {
	fs := t.Fields()
	n := len(fs)
	for n > 0 && *fs[n-1] == 0 {
		n--
	}
	out := make([]byte, 8*n)
	for i := range n {
		binary.LittleEndian.PutUint64(out[8*i:], math.Float64bits(*fs[i]))
	}
	return out
}
