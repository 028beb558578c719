package main

import (
	"testing"
	"time"
)

// The span ends at the arrival after which fewer tenants than needed have
// jobs left, whatever order the arrivals come in; a duplicate delivery
// counts once.
func TestBoundSpan(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_800_000_000, 0)
	// Tenants 0, 1 and 2 with 3, 2 and 1 jobs; need 2 tenants with jobs left.
	owner := map[string]int{"a1": 0, "a2": 0, "a3": 0, "b1": 1, "b2": 1, "c1": 2}
	at := func(id string, ms int) arrival {
		return arrival{at: t0.Add(time.Duration(ms) * time.Millisecond), id: id}
	}
	arr := []arrival{ // shuffled: boundSpan sorts by time
		at("b2", 50), at("a1", 0), at("c1", 20), at("b1", 10), at("a2", 30), at("c1", 25), at("a3", 60),
	}
	got := boundSpan(arr, owner, 3, 2)
	// c1 at 20 ms leaves two tenants (0, 1) with jobs; its duplicate at 25
	// changes nothing; b2 at 50 ms leaves only tenant 0: the span ends there.
	want := []string{"a1", "b1", "c1", "c1", "a2", "b2"}
	if len(got) != len(want) {
		t.Fatalf("span %v, want ids %v", got, want)
	}
	for i, a := range got {
		if a.id != want[i] {
			t.Fatalf("span[%d] = %s, want %s (span %v)", i, a.id, want[i], got)
		}
	}
	// One tenant that needs itself alone: the whole stream.
	one := map[string]int{"x1": 0, "x2": 0}
	if got := boundSpan([]arrival{at("x2", 10), at("x1", 0)}, one, 1, 1); len(got) != 2 || got[0].id != "x1" {
		t.Fatalf("one tenant: span %v, want x1, x2", got)
	}
}
