package store

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

func TestPauseResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue("acme", item(`1`), item(`2`))
	if err := e.store.Pause(e.ctx, "acme", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if st := e.state("acme"); !st.AdminPaused || !st.NextAt.IsZero() {
		t.Fatalf("paused indefinitely: %+v", st)
	}
	e.clock.Advance(time.Hour)
	if got := e.passTenant("acme", 100*ms, 50*ms); len(got) != 0 {
		t.Fatalf("a paused tenant released %d", len(got))
	}
	e.enqueueOne("acme", item(`3`))
	e.requireConsistent()

	until := e.clock.Now().Add(10 * time.Second)
	if err := e.store.Pause(e.ctx, "acme", until); err != nil {
		t.Fatal(err)
	}
	if st := e.state("acme"); st.AdminPaused || !st.AdminUntil.Equal(until) || !st.NextAt.Equal(until) {
		t.Fatalf("paused until +10s: %+v", st)
	}
	e.clock.Set(until.Add(-101 * ms))
	if got := e.passTenant("acme", 100*ms, 50*ms); len(got) != 0 {
		t.Fatalf("released %d before the pause ends", len(got))
	}
	e.clock.Set(until.Add(-100 * ms))
	got := e.passTenant("acme", 100*ms, 50*ms)
	if len(got) != 1 || !got[0].Slot.Equal(until) {
		t.Fatalf("released %+v, want one job at the end of the pause (not at now + L)", got)
	}
	e.requireConsistent()

	if err := e.store.Pause(e.ctx, "acme", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Resume(e.ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if st := e.state("acme"); st.AdminPaused || !st.AdminUntil.IsZero() || st.NextAt.IsZero() {
		t.Fatalf("resumed: %+v", st)
	}
	// A tenant never seen is created paused, and kept.
	if err := e.store.Pause(e.ctx, "newcomer", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if st := e.state("newcomer"); !st.Exists || !st.AdminPaused {
		t.Fatalf("newcomer: %+v", st)
	}
	if err := e.store.Pause(e.ctx, "a/b", time.Time{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad tenant: %v", err)
	}
	e.requireConsistent()
}

// Paging follows (death time, id) and survives replays between pages.
func TestDeadLettersPaging(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.Burst = 5 }))
	e.enqueue("acme", batchOf(5, "d")...)
	rel := e.passTenant("acme", time.Second, -1) // five slots at now
	var claimed []ClaimedJob
	for _, r := range rel {
		claimed = append(claimed, e.claimAt(r))
	}
	for i, c := range claimed { // the first two die at the same instant
		e.finish(c.ID, c.Gen, outcome(wire.FinishPermanent), FinishConfig{})
		if i != 0 {
			e.clock.Advance(time.Second)
		}
	}
	var all []string
	for _, r := range rel {
		all = append(all, r.ID)
	}
	page := func(cursor string) ([]string, string) {
		t.Helper()
		jobs, next, err := e.store.DeadLetters(e.ctx, "acme", cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, j := range jobs {
			if j.State != StateDead || j.Tenant != "acme" {
				t.Fatalf("letter %+v", j)
			}
			out = append(out, j.ID)
		}
		return out, next
	}
	p1, next := page("")
	if len(p1) != 2 || next == "" {
		t.Fatalf("page 1: %v, next %q", p1, next)
	}
	p2, next2 := page(next)
	if _, err := e.store.Replay(e.ctx, p2[1]); err != nil { // replayed between pages
		t.Fatal(err)
	}
	p3, next3 := page(next2)
	if got := slices.Concat(p1, p2, p3); !slices.Equal(got, all) || next3 != "" {
		t.Fatalf("pages %v %v %v (next %q), want %v once each", p1, p2, p3, next3, all)
	}
	for _, bad := range []string{"x", "-1:a", "5:"} {
		if _, _, err := e.store.DeadLetters(e.ctx, "acme", bad, 2); !errors.Is(err, ErrInvalid) {
			t.Errorf("cursor %q: %v", bad, err)
		}
	}
	if _, _, err := e.store.DeadLetters(e.ctx, "acme", "", 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("limit 0: %v", err)
	}
	e.requireConsistent()
}
