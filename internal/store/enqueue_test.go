package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/policy"
)

// admissionStep is one step of an admission table: advance the fake clock,
// enqueue one item of cost, expect the outcome (and retry-after if refused).
type admissionStep struct {
	advance time.Duration
	cost    int64
	want    Outcome
	code    Code
	retry   time.Duration
}

func runAdmissionSteps(t *testing.T, e *env, tenant string, steps []admissionStep) {
	t.Helper()
	for i, s := range steps {
		e.clock.Advance(s.advance)
		it := item(fmt.Sprintf(`{"step":%d}`, i))
		it.Cost = s.cost
		r := e.enqueue(tenant, it)[0]
		if r.Outcome != s.want || r.Code != s.code || r.RetryAfter != s.retry {
			t.Fatalf("step %d (+%s, cost %d): got %+v, want outcome %d code %q retry %s",
				i, s.advance, s.cost, r, s.want, s.code, s.retry)
		}
	}
}

func TestAdmissionExactAtBoundary(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.AdmitBurst, p.AdmitUS = 5, 10_000 })) // 100/s, burst 5

	rs := e.enqueue("acme", item(`1`), item(`2`), item(`3`), item(`4`), item(`5`), item(`6`))
	if got := outcomes(rs); got != "AAAAAR" {
		t.Fatalf("burst of 5 at once: got %s, want AAAAAR", got)
	}
	if rs[5].Code != CodeRateLimited || rs[5].RetryAfter != 10*time.Millisecond {
		t.Fatalf("6th item: got %+v, want rate_limited after 10ms", rs[5])
	}
	ms := time.Millisecond
	runAdmissionSteps(t, e, "acme", []admissionStep{
		{0, 1, Refused, CodeRateLimited, 10 * ms},
		{10*ms - time.Microsecond, 1, Refused, CodeRateLimited, time.Microsecond},
		{time.Microsecond, 1, Accepted, "", 0}, // exactly 1/r later
		{0, 1, Refused, CodeRateLimited, 10 * ms},
		{25 * ms, 1, Accepted, "", 0}, // 2.5 tokens accrued
		{0, 1, Accepted, "", 0},
		{0, 1, Refused, CodeRateLimited, 5 * ms}, // the half token carries over
		{time.Hour, 1, Accepted, "", 0},          // refill stops at the burst
	})
	if got := e.state("acme").AdmitTokens; got != 4 {
		t.Fatalf("after an hour and one job: %d tokens, want 4 (burst 5)", got)
	}
	e.requireConsistent()
}

func TestAdmissionChargesCost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.Burst, p.AdmitBurst, p.AdmitUS = 3, 3, 10_000 }))
	ms := time.Millisecond
	runAdmissionSteps(t, e, "acme", []admissionStep{
		{0, 3, Accepted, "", 0},
		{0, 1, Refused, CodeRateLimited, 10 * ms},
		{20 * ms, 3, Refused, CodeRateLimited, 10 * ms}, // 2 of 3 tokens
		{0, 4, Refused, CodeInvalid, 0},                 // > min(burst, admit_burst): never
		{0, 2, Accepted, "", 0},
	})
	st := e.state("acme")
	if st.QueuedCost != 5 || st.Queued != 2 || st.AdmitTokens != 0 {
		t.Fatalf("state %+v: want 2 jobs of 5 tokens queued, 0 admission tokens", st)
	}

	for _, cost := range []int64{-1, policy.MaxBurst + 1} {
		it := item(`{}`)
		it.Cost = cost
		if _, err := e.store.Enqueue(e.ctx, "acme", []Item{it}); !errors.Is(err, ErrInvalid) {
			t.Errorf("cost %d: got %v, want ErrInvalid", cost, err)
		}
	}
	e.requireConsistent()
}

func TestCostAboveDispatchBurstIsInvalid(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.Burst, p.AdmitBurst = 2, 100 }))
	it := item(`{}`)
	it.Cost = 3
	r := e.enqueue("acme", it)[0]
	if r.Outcome != Refused || r.Code != CodeInvalid || !strings.Contains(r.Detail, "min(burst, admit.burst) = 2") {
		t.Fatalf("cost 3 with burst 2: got %+v, want invalid naming the limit", r)
	}
	if st := e.state("acme"); st.Exists || st.AdmitTokens != 100 {
		t.Fatalf("a refusal must change nothing: %+v", st)
	}
}

func TestBatchPartiallyAdmitted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.AdmitBurst = 3 }))

	batch := []Item{item(`{"n":1}`), item(`{"n":2}`), item(`{"n":3}`), item(`{"n":4}`), item(`{"n":5}`)}
	rs := e.enqueue("acme", batch...)
	if got := outcomes(rs); got != "AAARR" {
		t.Fatalf("got %s, want AAARR", got)
	}
	backlog, err := e.rdb.LRange(e.ctx, e.store.keys.tenantQueue("acme"), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(backlog, ids(rs)) {
		t.Fatalf("backlog %v, want the accepted ids in order %v", backlog, ids(rs))
	}
	for i, r := range rs[:3] {
		j := e.job(r.ID)
		if string(j.Body) != string(batch[i].Body) || j.State != StateQueued || j.Tenant != "acme" ||
			j.Cost != 1 || j.Gen != 0 || j.Attempt != 0 || !j.Created.Equal(epoch) {
			t.Errorf("job %d: %+v", i, j)
		}
	}
	for _, r := range rs[3:] {
		if r.ID != "" || r.Code != CodeRateLimited {
			t.Errorf("refused item: %+v", r)
		}
	}
	if st := e.state("acme"); st.Backlog != 3 || st.Bytes != 21 || st.AdmitTokens != 0 {
		t.Fatalf("state %+v: want backlog 3, 21 bytes, 0 tokens", st)
	}
	e.requireConsistent()
}

func TestBacklogFullByCount(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.MaxBacklog = 3 }))
	rs := e.enqueue("acme", item(`1`), item(`2`), item(`3`), item(`4`))
	if got := outcomes(rs); got != "AAAR" {
		t.Fatalf("got %s, want AAAR", got)
	}
	// The estimate: one job must leave at rate 1/T (T = 100ms), and the first
	// slot is now.
	if rs[3].Code != CodeBacklogFull || rs[3].RetryAfter != 100*time.Millisecond {
		t.Fatalf("4th: %+v, want backlog_full after 100ms", rs[3])
	}
	if _, ok := e.pop("acme", 0); !ok {
		t.Fatal("pop: nothing due")
	}
	if r := e.enqueue("acme", item(`5`))[0]; r.Code != CodeBacklogFull {
		t.Fatalf("released jobs count toward the backlog: %+v", r)
	}
	if _, _, err := e.store.Cancel(e.ctx, rs[1].ID); err != nil {
		t.Fatal(err)
	}
	e.enqueueOne("acme", item(`6`))
	e.requireConsistent()
}

func TestBacklogFullByBytes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.MaxBacklogBytes = 100 }))
	body := strings.Repeat("x", 40)
	rs := e.enqueue("acme", item(body), item(body), item(body), item(strings.Repeat("y", 101)))
	if got := outcomes(rs); got != "AARR" {
		t.Fatalf("got %s, want AARR", got)
	}
	if rs[2].Code != CodeBacklogFull || rs[2].RetryAfter <= 0 {
		t.Fatalf("3rd: %+v, want backlog_full with a retry-after", rs[2])
	}
	if rs[3].Code != CodeInvalid {
		t.Fatalf("a body larger than the cap can never fit: %+v", rs[3])
	}
	if st := e.state("acme"); st.Bytes != 80 || st.AdmitTokens != 998 {
		t.Fatalf("refusals must charge nothing: %+v", st)
	}
	e.requireConsistent()
}

func TestScheduledJobsGoToTheDelayedSet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	runAt := epoch.Add(time.Hour)
	at := item(`{"at":1}`)
	at.RunAt = runAt
	in := item(`{"in":1}`)
	in.Delay = 30 * time.Second
	past := item(`{"past":1}`)
	past.RunAt = epoch.Add(-time.Minute)
	rs := e.enqueue("acme", at, in, past)

	shard := e.store.keys.shardOf("acme")
	for i, want := range []struct {
		state State
		due   time.Time
	}{{StateScheduled, runAt}, {StateScheduled, epoch.Add(30 * time.Second)}, {StateQueued, epoch}} {
		r := rs[i]
		if r.Outcome != Accepted || r.State != want.state || !r.ETA.Equal(want.due) {
			t.Errorf("item %d: %+v, want %s with eta %s", i, r, want.state, want.due)
		}
		score, err := e.rdb.ZScore(e.ctx, e.store.keys.delayed(shard), r.ID).Result()
		if want.state == StateScheduled && (err != nil || int64(score) != want.due.UnixMicro()) {
			t.Errorf("item %d: delayed score %v (%v), want %d", i, score, err, want.due.UnixMicro())
		}
	}
	if j := e.job(rs[0].ID); !j.RunAt.Equal(runAt) || j.State != StateScheduled {
		t.Errorf("record: %+v", j)
	}
	st := e.state("acme")
	if st.Backlog != 3 || st.Queued != 1 || !st.NextAt.Equal(epoch) {
		t.Fatalf("state %+v: want backlog 3, 1 queued, ready now", st)
	}
	e.requireConsistent()
}

func TestETAFollowsTheRate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const T = 20 * time.Millisecond // 50/s
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = T.Microseconds(), 3, 100 }))

	batch := make([]Item, 10)
	for i := range batch {
		batch[i] = item(fmt.Sprintf(`{"k":%d}`, i))
	}
	rs := e.enqueue("acme", batch...)
	rs = append(rs, e.enqueueOne("acme", item(`{"k":10}`)), e.enqueueOne("acme", item(`{"k":11}`)))
	// Burst 3: the first three go at once, then one per T.
	for k, r := range rs {
		want := epoch.Add(time.Duration(max(0, k-2)) * T)
		if !r.ETA.Equal(want) {
			t.Errorf("job %d: eta %s, want %s", k, r.ETA.Sub(epoch), want.Sub(epoch))
		}
	}
	// eta is a lower bound that the pop meets exactly here (no lead).
	for k := range rs {
		rel, ok := e.pop("acme", time.Hour)
		if !ok || rel.ID != rs[k].ID || !rel.Slot.Equal(rs[k].ETA) {
			t.Fatalf("pop %d: %+v %v, want %s at its eta %s", k, rel, ok, rs[k].ID, rs[k].ETA.Sub(epoch))
		}
	}
	e.requireConsistent()
}

func TestEnqueueRejectsBadCalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	runAndDelay := item(`{}`)
	runAndDelay.RunAt, runAndDelay.Delay = epoch, time.Second
	negative := item(`{}`)
	negative.Delay = -time.Second
	cases := map[string]struct {
		tenant string
		items  []Item
	}{
		"bad tenant":     {"a:b", []Item{item(`{}`)}},
		"dot tenant":     {"..", []Item{item(`{}`)}},
		"no items":       {"acme", nil},
		"too many":       {"acme", make([]Item, MaxBatch+1)},
		"no type":        {"acme", []Item{{Body: []byte(`{}`)}}},
		"run_at + delay": {"acme", []Item{runAndDelay}},
		"negative delay": {"acme", []Item{negative}},
		"long idem key":  {"acme", []Item{idemItem(strings.Repeat("k", job.MaxIdemKeyLen+1), `{}`)}},
	}
	for name, c := range cases {
		if _, err := e.store.Enqueue(e.ctx, c.tenant, c.items); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
	if n, err := e.rdb.Keys(e.ctx, e.prefix+":*").Result(); err != nil || len(n) != 0 {
		t.Fatalf("invalid calls stored keys: %v %v", n, err)
	}
}

func TestWakeOnlyWhenTheShardsEarliestTimeMovesEarlier(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sub := e.rdb.Subscribe(e.ctx, e.store.keys.wake(e.store.keys.shardOf("acme")))
	defer sub.Close()
	if _, err := sub.Receive(e.ctx); err != nil { // the subscription confirmation
		t.Fatal(err)
	}
	scheduled := func(d time.Duration) Item {
		it := item(fmt.Sprintf(`{"in":%q}`, d))
		it.Delay = d
		return it
	}
	e.enqueueOne("acme", scheduled(time.Hour))   // empty shard: wake at +1h
	e.enqueueOne("acme", scheduled(2*time.Hour)) // later: no wake
	e.enqueueOne("acme", item(`{"now":1}`))      // ready now: wake at now
	e.enqueueOne("acme", item(`{"now":2}`))      // same head: no wake
	if err := e.rdb.Publish(e.ctx, e.store.keys.wake(e.store.keys.shardOf("acme")), "marker").Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		fmt.Sprint(epoch.Add(time.Hour).UnixMicro()),
		fmt.Sprint(epoch.UnixMicro()),
		"marker",
	}
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	for i, w := range want {
		msg, err := sub.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if msg.Payload != w {
			t.Fatalf("message %d: %q, want %q", i, msg.Payload, w)
		}
	}
}

// Without Config.Clock the scripts use Redis TIME.
func TestRedisTimeByDefault(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	store, err := NewStore(e.rdb, Config{Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	redisNow, err := e.rdb.Time(e.ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := store.Enqueue(e.ctx, "acme", []Item{item(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if d := rs[0].ETA.Sub(redisNow); rs[0].Outcome != Accepted || d < 0 || d > time.Minute {
		t.Fatalf("eta %s is %s after Redis TIME before the call", rs[0].ETA, d)
	}
}
