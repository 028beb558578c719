package store

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// attempt runs job id's next attempt: to its due time if it is retrying,
// past its tenant's pause, a pass releasing one job (D = 1s, L = 0) — which
// must be id, the tenant's next — and the claim at its slot.
func (e *env) attempt(id string) ClaimedJob {
	e.t.Helper()
	j := e.job(id)
	if j.State == StateRetrying {
		e.clock.Set(j.Due)
	}
	if gate := e.state(j.Tenant).PausedUntil; gate.After(e.clock.Now()) {
		e.clock.Set(gate)
	}
	res := e.pass(e.store.keys.shardOf(j.Tenant), PassConfig{Lead: time.Second, MinLead: -1, Capacity: 1})
	if len(res.Released) != 1 || res.Released[0].ID != id {
		e.t.Fatalf("job %s was not released (%+v): %+v", id, e.job(id), res)
	}
	return e.claimAt(res.Released[0])
}

func outcome(kind wire.FinishKind) wire.AttemptOutcome {
	return wire.AttemptOutcome{Kind: kind, Status: 500, Latency: 120 * ms, Error: "boom"}
}

func TestFinishSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.enqueueOne("acme", idemItem("k", `{"x":1}`)).ID
	c := e.attempt(id)
	cfg := FinishConfig{SucceededRetention: 2 * time.Hour}
	o := wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 204, Latency: 123 * ms}
	if st := e.finish(id, c.Gen, o, cfg); st != StateSucceeded {
		t.Fatalf("state %s", st)
	}
	j := e.job(id)
	want := Attempt{At: e.clock.Now(), Gen: 1, Number: 1, Outcome: "success", Status: 204, Latency: 123 * ms}
	if j.State != StateSucceeded || j.Body != nil || !j.Ended.Equal(e.clock.Now()) || len(j.Attempts) != 1 ||
		!sameAttempt(j.Attempts[0], want) {
		t.Fatalf("record %+v, want succeeded, no body, log %+v", j, want)
	}
	jobKey, _ := e.store.keys.job(id)
	if body := e.rdb.HGet(e.ctx, jobKey, "body").Val(); body != "" {
		t.Errorf("the succeeded record keeps the body %q, want it dropped", body)
	}
	for _, key := range []string{jobKey, e.store.keys.idem("acme", "k")} {
		if ttl := e.rdb.PTTL(e.ctx, key).Val(); ttl <= 2*time.Hour-time.Minute || ttl > 2*time.Hour {
			t.Errorf("%s TTL %s, want the 2h retention", key, ttl)
		}
	}
	if st := e.state("acme"); st.Running != 0 || st.Backlog != 0 {
		t.Fatalf("state %+v", st)
	}
	e.requireConsistent()

	// A second finish of the same claim is stale: logged, nothing else.
	st, err := e.store.Finish(e.ctx, id, c.Gen, o, cfg)
	if !errors.Is(err, ErrStale) || st != StateSucceeded {
		t.Fatalf("second finish: %s, %v; want succeeded and ErrStale", st, err)
	}
	if j := e.job(id); len(j.Attempts) != 2 || !j.Attempts[1].Stale || j.Logged != 2 {
		t.Fatalf("log after a stale finish: %+v", j.Attempts)
	}
	if _, err := e.store.Finish(e.ctx, "j0_01KJMMA2G0WAAKMBBJK9MDDZKB", 1, o, cfg); !errors.Is(err, ErrNotFound) {
		t.Fatalf("finish of no job: %v", err)
	}
	if _, err := e.store.Finish(e.ctx, id, c.Gen, wire.AttemptOutcome{Kind: 9}, cfg); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad kind: %v", err)
	}
	e.requireConsistent()
}

func sameAttempt(a, b Attempt) bool {
	return a.At.Equal(b.At) && a.Gen == b.Gen && a.Number == b.Number && a.Outcome == b.Outcome &&
		a.Status == b.Status && a.Latency == b.Latency && a.Error == b.Error && a.Stale == b.Stale
}

// The Cloud Tasks curve: min 1s, doubled twice, then linear by 4s, capped
// at 10s, each ±10 %; after max_attempts the job is dead.
func TestFinishRetryCurve(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.store.seed = func() uint64 { return 7 }
	e.seed(params(func(p *Params) {
		p.MinBackoffUS, p.MaxBackoffUS, p.MaxDoublings, p.MaxAttempts, p.MaxRetryDurationUS = 1e6, 10e6, 2, 7, 0
	}))
	id := e.enqueueOne("acme", item(`{}`)).ID
	curve := []time.Duration{1, 2, 4, 8, 10, 10} // seconds
	exact := 0
	for k := 1; k <= 7; k++ {
		c := e.attempt(id)
		if c.Attempt != int64(k) {
			t.Fatalf("attempt %d claimed as %d", k, c.Attempt)
		}
		st := e.finish(id, c.Gen, outcome(wire.FinishRetry), FinishConfig{})
		if k == 7 {
			if st != StateDead {
				t.Fatalf("after attempt 7 of 7: %s, want dead", st)
			}
			break
		}
		j := e.job(id)
		b := curve[k-1] * time.Second
		wait := j.Due.Sub(e.clock.Now())
		score := e.rdb.ZScore(e.ctx, e.store.keys.delayed(e.store.keys.shardOf("acme")), id).Val()
		if int64(score) != j.Due.UnixMicro() {
			t.Fatalf("retry %d: delayed score %d, due %d", k, int64(score), j.Due.UnixMicro())
		}
		if st != StateRetrying || wait < b-b/10 || wait > b+b/10 {
			t.Fatalf("retry %d: %s, due in %s, want %s ± 10%%", k, st, wait, b)
		}
		if wait == b {
			exact++
		}
		e.requireConsistent()
	}
	if exact > 1 {
		t.Errorf("%d of 6 delays without jitter", exact)
	}
	j := e.job(id)
	dead := e.rdb.ZRange(e.ctx, e.store.keys.tenantDead("acme"), 0, -1).Val()
	if j.Attempt != 7 || j.Body == nil || len(dead) != 1 || dead[0] != id || len(j.Attempts) != 7 {
		t.Fatalf("dead letter %+v, dead set %v", j, dead)
	}
	e.requireConsistent()
}

// max_retry_duration, counted from the first attempt, ends retries and
// throttle loops.
func TestFinishMaxRetryDuration(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) {
		p.MinBackoffUS, p.MaxAttempts, p.MaxRetryDurationUS = 1e6, 100, 2_500_000
	}))
	rs := e.enqueue("acme", item(`1`), item(`2`))
	var states []State
	for range 3 { // at 0s, ≈1s, ≈3s
		c := e.attempt(rs[0].ID)
		states = append(states, e.finish(rs[0].ID, c.Gen, outcome(wire.FinishRetry), FinishConfig{}))
	}
	if states[0] != StateRetrying || states[1] != StateRetrying || states[2] != StateDead {
		t.Fatalf("states %v, want retrying, retrying, dead", states)
	}
	c := e.attempt(rs[1].ID)
	e.clock.Advance(3 * time.Second)
	throttled := wire.AttemptOutcome{Kind: wire.FinishThrottled, Status: 429, Pause: time.Second}
	if st := e.finish(rs[1].ID, c.Gen, throttled, FinishConfig{}); st != StateDead {
		t.Fatalf("throttled after max_retry_duration: %s, want dead", st)
	}
	e.requireConsistent()
}

// An upstream 429: the tenant pauses, the job goes back to the head lane,
// no attempt used; pauses are defaulted, capped and never shortened.
func TestFinishThrottled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rs := e.enqueue("acme", item(`1`), item(`2`))
	id := rs[0].ID
	cfg := FinishConfig{DefaultPause: 7 * time.Second, MaxPause: time.Minute, AttemptLog: 3}
	for i, c := range []struct {
		pause, want time.Duration
	}{{5 * time.Second, 5 * time.Second}, {0, 7 * time.Second}, {time.Hour, time.Minute}, {time.Second, time.Second}} {
		job := e.attempt(id)
		if job.Attempt != 1 {
			t.Fatalf("round %d: attempt %d, want 1 (throttles use none)", i, job.Attempt)
		}
		if i == 3 { // a longer pause is in force already (set by the other job)
			e.rdb.HSet(e.ctx, e.store.keys.tenant("acme"), "paused_until", e.clock.Now().Add(time.Hour).UnixMicro())
			c.want = time.Hour
		}
		o := wire.AttemptOutcome{Kind: wire.FinishThrottled, Status: 429, Pause: c.pause}
		if st := e.finish(id, job.Gen, o, cfg); st != StateQueued {
			t.Fatalf("round %d: %s, want queued", i, st)
		}
		st := e.state("acme")
		if got := st.PausedUntil.Sub(e.clock.Now()); got != c.want || !st.NextAt.Equal(st.PausedUntil) {
			t.Fatalf("round %d: paused for %s (ready at %s), want %s", i, got, st.NextAt.Sub(e.clock.Now()), c.want)
		}
		head := e.rdb.ZRange(e.ctx, e.store.keys.tenantHead("acme"), 0, -1).Val()
		if j := e.job(id); j.Attempt != 0 || j.State != StateQueued || len(head) != 1 || head[0] != id {
			t.Fatalf("round %d: record %+v, head lane %v", i, j, head)
		}
		e.requireConsistent()
	}
	// The attempt log keeps the last 3 of 4.
	j := e.job(id)
	if len(j.Attempts) != 3 || j.Logged != 4 || !j.Attempts[2].At.Equal(e.clock.Now()) || j.Attempts[0].Outcome != "throttled" {
		t.Fatalf("log %+v (%d logged), want the newest 3 of 4", j.Attempts, j.Logged)
	}
	// A success may pause pre-emptively (the upstream's quota is used up).
	e.clock.Set(e.state("acme").PausedUntil)
	c := e.attempt(id)
	quota := wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200, Pause: 20 * time.Second}
	if st := e.finish(c.ID, c.Gen, quota, cfg); st != StateSucceeded {
		t.Fatalf("success with a pause: %s", st)
	}
	if got := e.state("acme").PausedUntil.Sub(e.clock.Now()); got != 20*time.Second {
		t.Fatalf("pre-emptive pause %s, want 20s", got)
	}
}

// 410 to a webhook job: the job is dead at once (reason gone, its attempt
// counted), the tenant disabled with its backlog kept; Resume clears the
// disable (and the upstream pause) and the rest of the backlog goes out.
func TestFinishGoneAndResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rs := e.enqueue("acme", item(`1`), item(`2`), item(`3`))
	c := e.attempt(rs[0].ID)
	if st := e.finish(rs[0].ID, c.Gen, wire.AttemptOutcome{Kind: wire.FinishGone, Status: 410}, FinishConfig{}); st != StateDead {
		t.Fatalf("state %s, want dead", st)
	}
	st := e.state("acme")
	j := e.job(rs[0].ID)
	if !st.Disabled || st.Queued != 2 || !st.NextAt.IsZero() || st.DeadLetters != 1 || j.Attempt != 1 || j.DeadReason != DeadReasonGone {
		t.Fatalf("after a 410: tenant %+v, job attempt %d reason %q", st, j.Attempt, j.DeadReason)
	}
	e.clock.Advance(time.Hour)
	if got := e.passTenant("acme", time.Second, -1); len(got) != 0 {
		t.Fatalf("a disabled tenant released %d", len(got))
	}
	e.enqueueOne("acme", item(`4`)) // enqueue still accepted
	e.requireConsistent()

	e.rdb.HSet(e.ctx, e.store.keys.tenant("acme"), "paused_until", e.clock.Now().Add(time.Hour).UnixMicro())
	if err := e.store.Resume(e.ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	st = e.state("acme")
	if st.Disabled || !st.PausedUntil.IsZero() || !st.NextAt.Equal(e.clock.Now()) {
		t.Fatalf("after resume: %+v", st)
	}
	if got := e.passTenant("acme", time.Second, -1); len(got) == 0 || got[0].ID != rs[1].ID {
		t.Fatalf("after resume released %+v, want the second job first (the first is dead)", got)
	}
	e.requireConsistent()
}

// 410 to an http job: only that job is dead (reason gone), the tenant keeps
// sending; with disable_on_gone the tenant is disabled as for a webhook.
func TestFinishGoneHTTPKillsOnlyItsJob(t *testing.T) {
	t.Parallel()
	for _, disable := range []bool{false, true} {
		e := newEnv(t)
		if disable {
			e.seed(params(func(p *Params) { p.DisableOnGone = 1 }))
		}
		h := func(n string) Item { return Item{Type: "http", Body: []byte(n)} }
		rs := e.enqueue("acme", h(`1`), h(`2`))
		c := e.attempt(rs[0].ID)
		if st := e.finish(rs[0].ID, c.Gen, wire.AttemptOutcome{Kind: wire.FinishGone, Status: 410}, FinishConfig{}); st != StateDead {
			t.Fatalf("disable_on_gone %v: state %s, want dead", disable, st)
		}
		st := e.state("acme")
		if st.Disabled != disable || st.Queued != 1 || e.job(rs[0].ID).DeadReason != DeadReasonGone {
			t.Fatalf("disable_on_gone %v: after a 410 %+v", disable, st)
		}
		e.clock.Advance(time.Second)
		got := e.passTenant("acme", time.Second, -1)
		if sent := len(got) == 1 && got[0].ID == rs[1].ID; sent == disable {
			t.Fatalf("disable_on_gone %v: released %+v", disable, got)
		}
		e.requireConsistent()
	}
}

// Permanent → dead; replay → queued at the tail, same id, attempts and log
// kept, admission not charged.
func TestFinishPermanentAndReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.AdmitBurst = 2 }))
	rs := e.enqueue("acme", idemItem("k", `{"a":1}`), item(`{"b":1}`))
	id := rs[0].ID
	c := e.attempt(id)
	if st := e.finish(id, c.Gen, outcome(wire.FinishPermanent), FinishConfig{}); st != StateDead {
		t.Fatalf("state %s", st)
	}
	idemKey := e.store.keys.idem("acme", "k")
	if ttl := e.rdb.PTTL(e.ctx, idemKey).Val(); ttl <= 0 {
		t.Fatalf("dead job's idempotency key TTL %s, want the dead retention", ttl)
	}
	e.requireConsistent()
	if e.state("acme").AdmitTokens != 0 {
		t.Fatal("admission bucket should be empty")
	}

	j, err := e.store.Replay(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	backlog := e.rdb.LRange(e.ctx, e.store.keys.tenantQueue("acme"), 0, -1).Val()
	if j.State != StateQueued || j.Attempt != 1 || j.Gen != c.Gen+1 || len(j.Attempts) != 1 ||
		!j.Ended.IsZero() || len(backlog) != 2 || backlog[1] != id {
		t.Fatalf("replayed %+v, backlog %v; want queued at the tail with its attempt and log", j, backlog)
	}
	if ttl := e.rdb.PTTL(e.ctx, idemKey).Val(); ttl != -1 {
		t.Fatalf("idempotency key TTL %s after replay, want none", ttl)
	}
	if st := e.state("acme"); st.DeadLetters != 0 || st.Backlog != 2 || st.AdmitTokens != 0 {
		t.Fatalf("state %+v", st)
	}
	e.requireConsistent()
	var conflict *ConflictError
	if _, err := e.store.Replay(e.ctx, id); !errors.As(err, &conflict) || conflict.State != StateQueued {
		t.Fatalf("replay of a queued job: %v, want a conflict", err)
	}
	if _, err := e.store.Replay(e.ctx, "j0_01KJMMA2G0WAAKMBBJK9MDDZKB"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("replay of no job: %v", err)
	}
	c1 := e.attempt(rs[1].ID) // ahead of the replayed job
	e.finish(rs[1].ID, c1.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}, FinishConfig{})
	if c := e.attempt(id); c.Attempt != 2 {
		t.Fatalf("after replay: attempt %d, want 2", c.Attempt)
	}
	e.requireConsistent()
}

// The dead set is trimmed to its cap and its retention at each finish; a
// trimmed letter's record and idempotency key are deleted.
func TestDeadLetterTrim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.Burst = 10 }))
	rs := e.enqueue("acme", idemItem("k0", `{"i":0}`), item(`{"i":1}`), item(`{"i":2}`), item(`{"i":3}`))
	cfg := FinishConfig{DeadMaxPerTenant: 2, DeadRetention: time.Hour}
	kill := func(id string) {
		t.Helper()
		c := e.attempt(id)
		e.finish(id, c.Gen, outcome(wire.FinishPermanent), cfg)
		e.clock.Advance(time.Second)
	}
	for _, r := range rs[:3] {
		kill(r.ID)
	}
	dead := e.rdb.ZRange(e.ctx, e.store.keys.tenantDead("acme"), 0, -1).Val()
	if len(dead) != 2 || dead[0] != rs[1].ID || dead[1] != rs[2].ID {
		t.Fatalf("dead set %v, want the newest 2", dead)
	}
	if _, err := e.store.GetJob(e.ctx, rs[0].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("trimmed record: %v, want deleted", err)
	}
	if n := e.rdb.Exists(e.ctx, e.store.keys.idem("acme", "k0")).Val(); n != 0 {
		t.Fatal("trimmed letter's idempotency key kept")
	}
	e.requireConsistent()
	e.clock.Advance(2 * time.Hour)
	kill(rs[3].ID)
	dead = e.rdb.ZRange(e.ctx, e.store.keys.tenantDead("acme"), 0, -1).Val()
	if len(dead) != 1 || dead[0] != rs[3].ID {
		t.Fatalf("dead set %v, want only the letter younger than the retention", dead)
	}
	e.requireConsistent()
}
