package store

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// A pass whose reply was lost is run again with the same grants (the
// dispatcher keeps a failed pass's grants; go-redis re-sends a script on a
// read timeout): the second install of a plain segment or of an aligned
// reservation hands out nothing, so the upstream's bound holds over every
// release of the repeated passes.
func TestGrantsInstalledTwiceHandOutNothingTwice(t *testing.T) {
	t.Parallel()
	for _, multi := range []bool{false, true} {
		e := newEnvShards(t, 1)
		e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = 1000, 10, 1000 }))
		e.putUpstream("u1", 20*ms, 1)
		e.putUpstream("u2", 20*ms, 1)
		names := []string{"u1"}
		if multi {
			names = []string{"u1", "u2"}
		}
		for range 20 {
			e.enqueue("ta", upItem(`{"a":1}`, names...))
		}
		_, grants := e.upPass(0, nil)
		if len(grants) == 0 {
			t.Fatalf("multi=%v: the first pass got no grants", multi)
		}
		var all []wire.Release
		cfg := PassConfig{Lead: grantLead, MinLead: -1, Grace: time.Hour, Capacity: -1}
		for range 4 { // the same grants, four times
			res, err := e.store.PassGranted(e.ctx, 0, cfg, grants)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, res.Released...)
		}
		if len(all) == 0 {
			t.Fatalf("multi=%v: the grants released nothing", multi)
		}
		t.Logf("multi=%v: %d grants, %d released; grants %+v", multi, len(grants), len(all), grants)
		for _, r := range all {
			t.Logf("  %s slot %v", r.ID, r.Slot.Sub(e.clock.Now()))
		}
		for _, n := range names {
			checkBound(t, n, all, 20*ms, 1)
		}
	}
}
