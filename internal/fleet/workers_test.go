package fleet

import (
	"strconv"
	"testing"
	"time"
)

// The rolling-upgrade gate: pre-claims only while at least one worker is
// live and every live one heartbeats as a process that runs them; a worker
// of an earlier version (its plain id, as it writes it) closes the gate
// until its entry expires, and is still counted as capacity.
func TestPreclaimableGate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	preclaimable := func() bool {
		t.Helper()
		ok, err := e.roster.Preclaimable(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if preclaimable() {
		t.Fatal("no worker live: pre-claimable")
	}
	if err := e.roster.Heartbeat(e.ctx, "new", 10, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if !preclaimable() {
		t.Fatal("one worker of this version: not pre-claimable")
	}
	// An earlier version's heartbeat: the plain id.
	old := e.clock.Now().Add(time.Second).UnixMicro()
	if err := e.rdb.HSet(e.ctx, e.roster.WorkersKey(), "old", "4 "+strconv.FormatInt(old, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if preclaimable() {
		t.Fatal("a worker of an earlier version live: pre-claimable")
	}
	if n, err := e.roster.Capacity(e.ctx); err != nil || n != 14 {
		t.Fatalf("capacity %d, %v: want 14, both workers", n, err)
	}
	e.clock.Advance(time.Second) // the old worker's entry expires
	if !preclaimable() {
		t.Fatal("the earlier version's worker gone: not pre-claimable")
	}
}
