package store

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/upstream"
)

// An upstream's concurrency leases: at most concurrency holders at once; a
// holder renews its own; a release frees one; a killed holder's lease ends
// at its life (fake clock); an upstream without concurrency holds nothing.
func TestUpstreamRunLeases(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putUpstream("llm", time.Millisecond, 10, func(c *upstream.Config) { c.Concurrency = 2 })
	e.putUpstream("free", time.Millisecond, 10)
	const life = 30 * time.Second
	acquire := func(name, holder string) (bool, error) {
		t.Helper()
		return e.store.AcquireUpstreamRun(e.ctx, name, holder, life)
	}
	running := func() int64 {
		t.Helper()
		n, err := e.store.UpstreamRunning(e.ctx, "llm")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, h := range []string{"a:1", "b:1", "a:1"} { // a:1 twice: renewed, one lease
		if held, err := acquire("llm", h); !held || err != nil {
			t.Fatalf("acquire %s: %v, %v; want held", h, held, err)
		}
	}
	e.clock.Advance(time.Second)
	var full *quota.UpstreamRunFullError
	if held, err := acquire("llm", "c:1"); held || !errors.As(err, &full) || full.Running != 2 || full.Retry != life-time.Second {
		t.Fatalf("third holder: %v, %v; want full, 2 running, retry %s", held, err, life-time.Second)
	}
	if n := running(); n != 2 {
		t.Fatalf("running %d, want 2", n)
	}
	if err := e.store.ReleaseUpstreamRun(e.ctx, "llm", "a:1"); err != nil {
		t.Fatal(err)
	}
	if held, err := acquire("llm", "c:1"); !held || err != nil {
		t.Fatalf("after a release: %v, %v; want held", held, err)
	}
	// b:1 and c:1's workers are killed: nothing releases them; their
	// leases end at their life.
	e.clock.Advance(life - time.Second)
	if n := running(); n != 1 {
		t.Fatalf("at b's expiry: running %d, want 1 (c's)", n)
	}
	e.clock.Advance(time.Second)
	if n := running(); n != 0 {
		t.Fatalf("after both expired: running %d, want 0", n)
	}
	if held, err := acquire("llm", "d:1"); !held || err != nil {
		t.Fatalf("after the expiries: %v, %v; want held", held, err)
	}
	if ttl := e.rdb.PTTL(e.ctx, e.store.UpstreamKeys("llm")[3]).Val(); ttl <= 0 || ttl > life+time.Second {
		t.Fatalf("run set TTL %s, want about the lease's life %s", ttl, life)
	}
	// No concurrency: nothing held, nothing written.
	if held, err := acquire("free", "a:1"); held || err != nil {
		t.Fatalf("no concurrency: %v, %v; want not held, no error", held, err)
	}
	if n := e.rdb.Exists(e.ctx, e.store.UpstreamKeys("free")[3]).Val(); n != 0 {
		t.Fatal("an upstream without concurrency got a run set")
	}
	// A PUT lowering the concurrency revokes nothing; new holders wait.
	if held, _ := acquire("llm", "e:1"); !held {
		t.Fatal("second lease refused")
	}
	e.putUpstream("llm", time.Millisecond, 10, func(c *upstream.Config) { c.Concurrency = 1 })
	if held, err := acquire("llm", "f:1"); held || !errors.As(err, &full) || full.Running != 2 {
		t.Fatalf("after lowering to 1: %v, %v; want full with 2 running", held, err)
	}
	for _, bad := range []struct{ name, holder string }{{"a:b", "x:1"}, {"llm", ""}} {
		if _, err := acquire(bad.name, bad.holder); !errors.Is(err, ErrInvalid) {
			t.Fatalf("acquire(%q, %q): %v, want ErrInvalid", bad.name, bad.holder, err)
		}
	}
	if rt, err := e.store.UpstreamRuntime(e.ctx, "llm"); err != nil || rt.Running != 2 {
		t.Fatalf("runtime running %d, %v; want 2", rt.Running, err)
	}
	problems, err := auditKeyspace(e.ctx, e.rdb, e.prefix, 4)
	if err != nil || len(problems) != 0 {
		t.Fatalf("keyspace audit: %v, %q", err, problems)
	}
}

// DeleteUpstream: 404 for an unknown one, in use while jobs wait on it or
// hold its leases, guarded by If-Match; afterwards every key of its slot
// and its listing entry are gone, and only a seed that still lists it
// creates it again.
func TestDeleteUpstream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putUpstream("sms", time.Millisecond, 1, func(c *upstream.Config) { c.Concurrency = 1 })
	if err := e.store.DeleteUpstream(e.ctx, "nope", ""); !errors.Is(err, quota.ErrUpstreamNotFound) {
		t.Fatalf("unknown: %v, want quota.ErrUpstreamNotFound", err)
	}
	r := e.enqueueOne("acme", upItem(`{}`, "sms"))
	var inUse *quota.UpstreamInUseError
	if err := e.store.DeleteUpstream(e.ctx, "sms", ""); !errors.As(err, &inUse) || inUse.Waiting["acme"] != 1 {
		t.Fatalf("a job waiting: %v, want in use with acme's 1", err)
	}
	if _, _, err := e.store.Cancel(e.ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.AcquireUpstreamRun(e.ctx, "sms", "j:1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := e.store.DeleteUpstream(e.ctx, "sms", ""); !errors.As(err, &inUse) || inUse.Running != 1 {
		t.Fatalf("a job running: %v, want in use with 1 running", err)
	}
	if err := e.store.ReleaseUpstreamRun(e.ctx, "sms", "j:1"); err != nil {
		t.Fatal(err)
	}
	var stale *quota.VersionMismatchError
	if err := e.store.DeleteUpstream(e.ctx, "sms", `"u7"`); !errors.As(err, &stale) || stale.Current != 1 {
		t.Fatalf("stale If-Match: %v, want a version error at 1", err)
	}
	if err := e.store.DeleteUpstream(e.ctx, "sms", `"u1"`); err != nil {
		t.Fatal(err)
	}
	for _, k := range e.store.UpstreamKeys("sms") {
		if e.rdb.Exists(e.ctx, k).Val() != 0 {
			t.Errorf("key %s left after the delete", k)
		}
	}
	if names, _ := e.store.UpstreamNames(e.ctx, "", 10); len(names) != 0 {
		t.Errorf("listing %v after the delete", names)
	}
	if _, err := e.store.Upstream(e.ctx, "sms"); !errors.Is(err, quota.ErrUpstreamNotFound) {
		t.Fatalf("after the delete: %v", err)
	}
	log := slog.New(slog.DiscardHandler)
	if err := e.store.SeedUpstreams(e.ctx, map[string]upstream.Config{"other": {Rate: bucket.Rate{Tokens: 1, Per: time.Second}}}, log); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Upstream(e.ctx, "sms"); !errors.Is(err, quota.ErrUpstreamNotFound) {
		t.Fatalf("a seed without it resurrected it: %v", err)
	}
	if err := e.store.SeedUpstreams(e.ctx, map[string]upstream.Config{"sms": {Rate: bucket.Rate{Tokens: 1, Per: time.Second}}}, log); err != nil {
		t.Fatal(err)
	}
	if rec, err := e.store.Upstream(e.ctx, "sms"); err != nil || rec.Version != 1 || rec.Source != quota.SourceConfig {
		t.Fatalf("a seed listing it: %+v, %v; want it created again at version 1 from the file", rec, err)
	}
}

// A PUT lowering an upstream's burst below the cost of a job already queued
// does not wedge it: the job leaves whole, (cost − burst)·T later than a
// job within the burst would (see README "Shared upstream quotas").
func TestQueuedJobOverALoweredBurstLeaves(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst = 1000, 10 }))
	const T = 10 * time.Millisecond
	e.putUpstream("sms", T, 4)
	shard := e.store.keys.shardOf("acme")
	r := e.enqueueOne("acme", Item{Type: "webhook", Body: []byte(`{}`), Cost: 4, Upstreams: []string{"sms"}})
	e.putUpstream("sms", T, 1)
	start := e.clock.Now()
	var grants []quota.UpstreamGrant
	for step := 0; ; step++ {
		var res PassResult
		res, grants = e.upPass(shard, grants)
		if len(res.Released) == 1 {
			rel := res.Released[0]
			if rel.ID != r.ID {
				t.Fatalf("released %s, want %s", rel.ID, r.ID)
			}
			t.Logf("released at start + %s after %d passes", rel.Slot.Sub(start), step)
			// The calendar needs (cost − burst)·T = 3T beyond the job's
			// first possible slot; within the lead D of the grants.
			if d := rel.Slot.Sub(start); d < 3*T || d > 3*T+2*grantLead {
				t.Fatalf("slot start + %s, want start + 3T (%s) … + 2D", d, 3*T)
			}
			return
		}
		if step > 200 {
			t.Fatalf("the job of cost 4 over burst 1 never left (%d passes)", step)
		}
		e.clock.Advance(5 * time.Millisecond)
	}
}
