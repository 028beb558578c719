package store

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/wire"
)

// TestFunctionsLibraryIsLoadedAgainWhenMissing: the Store calls the scripts
// as functions of a versioned library; a Redis that lost it (deleted here,
// as after a restart without persistence) gets it loaded again by the next
// call, which then succeeds.
func TestFunctionsLibraryIsLoadedAgainWhenMissing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	version, source := library()
	if !strings.HasPrefix(source, "#!lua name=sluice_"+version+"\n") || len(version) != 12 {
		t.Fatalf("library header %q, version %q", strings.SplitN(source, "\n", 2)[0], version)
	}
	e.enqueueOne("acme", item(`1`))
	if !e.libraryLoaded(version) {
		t.Fatal("library not in FUNCTION LIST after an enqueue")
	}
	if err := e.rdb.FunctionDelete(e.ctx, "sluice_"+version).Err(); err != nil && !strings.Contains(err.Error(), "not exist") {
		t.Fatal(err)
	}
	rel := e.passTenant("acme", time.Second, -1)
	if len(rel) != 1 {
		t.Fatalf("pass after the library was deleted released %d jobs, want 1", len(rel))
	}
	if !e.libraryLoaded(version) {
		t.Fatal("library not loaded again")
	}
	if !e.store.runner.UsesFunctions() {
		t.Fatal("store fell back to EVAL on a Redis with Functions")
	}
}

func (e *env) libraryLoaded(version string) bool {
	e.t.Helper()
	libs, err := e.rdb.FunctionList(e.ctx, redis.FunctionListQuery{LibraryNamePattern: "sluice_" + version}).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return len(libs) == 1
}

// TestEvalAndFunctionsAgree runs one job's life — enqueue, pass, claim,
// a failed attempt and its retry, success — on two prefixes, one Store on
// EVAL scripts (as on a Redis without Functions) and one on the library,
// and requires the same outcomes, tenant state and job records. A policy
// change between the steps must be seen at once by both (the library
// caches merged policies across calls).
func TestEvalAndFunctionsAgree(t *testing.T) {
	t.Parallel()
	type step struct {
		outcomes []string
		state    TenantState
		job      Job
	}
	run := func(functions bool) []step {
		e := newEnv(t)
		if !functions {
			e.store.runner.DisableFunctions()
		}
		e.store.seed = func() uint64 { return 7 } // the same retry jitter
		e.seed(params(func(p *Params) { p.Burst = 2; p.MinBackoffUS = 1000 }))
		var steps []step
		record := func(id string, what ...string) {
			j := e.job(id)
			j.ID, j.Due = "", time.Time{} // ids differ between the runs, and the retry jitter with them
			steps = append(steps, step{outcomes: what, state: e.state("acme"), job: j})
		}
		id := e.enqueueOne("acme", item(`{"n":1}`)).ID
		record(id, "enqueued")
		rel := e.passTenant("acme", time.Second, -1)
		record(id, "released", strconv.Itoa(len(rel)))
		c := e.claimAt(rel[0])
		record(id, "claimed", strconv.Itoa(int(c.Attempt)))
		st := e.finish(c.ID, c.Gen, wire.AttemptOutcome{Kind: wire.FinishRetry, Status: 500}, FinishConfig{})
		record(id, "failed", string(st))
		e.seed(params(func(p *Params) { p.Burst = 1; p.MinBackoffUS = 2000 })) // a policy write between calls
		e.clock.Advance(time.Second)
		rel = e.passTenant("acme", time.Second, -1)
		record(id, "retry released", strconv.Itoa(len(rel)))
		c = e.claimAt(rel[0])
		st = e.finish(c.ID, c.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}, FinishConfig{})
		record(id, "succeeded", string(st))
		e.requireConsistent()
		return steps
	}
	eval, fn := run(false), run(true)
	if p := fn[len(fn)-1].state.Policy; p.Burst != 1 || p.MinBackoffUS != 2000 {
		t.Fatalf("policy after the write: burst %d, min backoff %d µs; want 1, 2000", p.Burst, p.MinBackoffUS)
	}
	if len(eval) != len(fn) {
		t.Fatalf("%d steps with EVAL, %d with Functions", len(eval), len(fn))
	}
	for i := range eval {
		if !slices.Equal(eval[i].outcomes, fn[i].outcomes) || !reflect.DeepEqual(eval[i].state, fn[i].state) ||
			!reflect.DeepEqual(eval[i].job, fn[i].job) {
			t.Errorf("step %d differs:\nEVAL      %+v\nFunctions %+v", i, eval[i], fn[i])
		}
	}
}

// TestStoreFallsBackToEvalWithoutFunctionPermissions: an ACL user that may
// run scripts but not the function commands (NOPERM) gets the EVAL scripts:
// a job's whole life works, and the Store stays on EVAL.
func TestStoreFallsBackToEvalWithoutFunctionPermissions(t *testing.T) {
	t.Parallel()
	e := newEvalEnv(t)
	store := e.store
	id := e.enqueueOne("acme", item(`{"n":1}`)).ID
	rel := e.passTenant("acme", time.Second, -1)
	c := e.claimAt(rel[0])
	if st := e.finish(c.ID, c.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}, FinishConfig{}); st != StateSucceeded {
		t.Fatalf("finish: %s", st)
	}
	if j := e.job(id); j.State != StateSucceeded || j.Attempt != 1 {
		t.Fatalf("job %+v, want succeeded after one attempt", j)
	}
	if store.runner.UsesFunctions() {
		t.Fatal("store did not fall back to EVAL")
	}
}

// newEvalEnv is an env whose store runs every script by EVAL (its client
// may not call FUNCTION or FCALL), on 2 shards and a fake clock.
func newEvalEnv(t *testing.T) *env {
	t.Helper()
	admin, prefix := redistest.New(t)
	rdb := redistest.EvalOnlyClient(t, admin, prefix)
	clock := &fakeClock{t: epoch}
	store, err := NewStore(rdb, Config{Prefix: prefix, Shards: 2, Clock: clock.Now, Planner: testPlanner})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: t.Context(), rdb: rdb, prefix: prefix, store: store, clock: clock}
}
