package plan

import (
	"bytes"
	"testing"
)

// The packed state's own rules; the rules' agreement with the Lua is
// internal/store's differential tests'.
func TestDecodeRefusesWhatIsNotWholeDoubles(t *testing.T) {
	for _, n := range []int{1, 7, 9, 8*len(FieldNames) + 8} {
		if _, err := Decode(make([]byte, n)); err == nil {
			t.Errorf("Decode of %d bytes: no error", n)
		}
	}
}

func TestEncodeLeavesOutTrailingZerosAndDecodeReadsThemBack(t *testing.T) {
	in := Tenant{TAT: 1.7723664e15, Live: 3, Qtok: 3, C1: 1}
	s := in.Encode()
	if want := 8 * 25; len(s) != want { // up to c1, the 25th field
		t.Fatalf("Encode: %d bytes, want %d", len(s), want)
	}
	out, err := Decode(s)
	if err != nil || out != in {
		t.Fatalf("Decode(Encode) = %+v, %v; want %+v", out, err, in)
	}
	if z := (&Tenant{}).Encode(); len(z) != 0 {
		t.Errorf("the zero tenant encodes to %d bytes, want none", len(z))
	}
	if out, err := Decode(nil); err != nil || out != (Tenant{}) {
		t.Errorf("Decode(nil) = %+v, %v; want the zero tenant", out, err)
	}
	if !bytes.Equal(out.Encode(), s) {
		t.Error("Encode(Decode(s)) is not s")
	}
}

// A release that needs a backlog entry past those read (Cut) leaves the
// plan Incomplete; one that reads the whole backlog does not.
func TestReleasePastWhatWasReadIsIncomplete(t *testing.T) {
	const now = 1.7723664e15
	p := Policy{RateUS: 1000, Burst: 1, Concurrency: 10, Weight: 1}
	for _, cut := range []bool{false, true} {
		c := &Candidate{Name: "a", Policy: p, Score: now, Cut: cut,
			Loaded: Loaded{State: Tenant{Live: 2, Qtok: 2}},
			Jobs:   []Job{{ID: "t1", Queued: false, Cost: 1}}} // a tombstone, then nothing read
		r := Release(Pass{Now: now, Lead: 100000, Capacity: -1, Preclaim: -1}, []*Candidate{c})
		if len(r.Released) != 0 || r.Incomplete != cut {
			t.Errorf("cut %v: released %d, incomplete %v; want none, incomplete %v", cut, len(r.Released), r.Incomplete, cut)
		}
		if got, _ := c.Taken(); got != 0 {
			t.Errorf("cut %v: %d taken from the head lane, want 0", cut, got)
		}
		if _, list := c.Taken(); list != 1 {
			t.Errorf("cut %v: %d taken from the list, want the tombstone", cut, list)
		}
	}
}
