package dispatch

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

func TestTaskTimeoutIsWholeSecondsCoveringTwoLeadsTimeoutAndGrace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		lead, attempt, grace, want time.Duration
	}{
		{100 * time.Millisecond, 15 * time.Second, time.Second, 17 * time.Second}, // 16.2s → 17s
		{100 * time.Millisecond, 0, 100 * time.Millisecond, time.Second},          // 0.3s → at least 1s
		{0, 0, 0, time.Second}, // never 0 (asynq: 30 min)
		{500 * time.Millisecond, 2 * time.Second, time.Second, 4 * time.Second},         // exactly 4s
		{100 * time.Millisecond, 1500 * time.Millisecond, time.Second, 3 * time.Second}, // 2.7s → 3s
		{100 * time.Millisecond, -time.Second, time.Second, 2 * time.Second},            // a negative timeout counts as 0
	} {
		if got := wire.TaskTimeout(tc.lead, tc.attempt, tc.grace); got != tc.want {
			t.Errorf("wire.TaskTimeout(%s, %s, %s) = %s, want %s", tc.lead, tc.attempt, tc.grace, got, tc.want)
		}
	}
}

func TestPayloadRoundTripsAndRejectsGarbage(t *testing.T) {
	t.Parallel()
	p, err := wire.DecodePayload([]byte(`{"id":"j3_01J0000000000000000000000","gen":7,"slot_us":1772366400000000}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.ID != "j3_01J0000000000000000000000" || p.Gen != 7 || !p.Slot().Equal(time.UnixMicro(1772366400000000)) {
		t.Fatalf("decoded %+v", p)
	}
	for _, bad := range []string{``, `{}`, `{"id":"x","gen":0,"slot_us":1}`, `{"id":"","gen":1,"slot_us":1}`, `{"id":"x","gen":1,"slot_us":0}`, `[1]`} {
		if _, err := wire.DecodePayload([]byte(bad)); !errors.Is(err, wire.ErrBadPayload) {
			t.Errorf("wire.DecodePayload(%q) = %v, want wire.ErrBadPayload", bad, err)
		}
	}
}

func TestQueuesDeriveFromThePrefix(t *testing.T) {
	t.Parallel()
	if got := wire.WebhookQueue(store.PrefixDefault); got != "sluice:webhook" {
		t.Errorf("wire.WebhookQueue = %q", got)
	}
	if got := wire.HTTPQueue(store.PrefixDefault); got != "sluice:http" {
		t.Errorf("wire.HTTPQueue = %q", got)
	}
}

func TestTaskForTaskJobs(t *testing.T) {
	t.Parallel()
	d := &Dispatcher{cfg: Config{Prefix: "p"}.withDefaults()}
	slot := time.UnixMicro(1772366400123456)
	tj := wire.Release{ID: "j1_01J0000000000000000000000", Tenant: "acme", Type: "task", Gen: 3, Slot: slot, SendAt: slot,
		Timeout: 15 * time.Second, Queue: "emails", TaskType: "email:send"}
	task, opts, err := d.taskFor(tj)
	if err != nil {
		t.Fatal(err)
	}
	if task.Type() != "email:send" || len(task.Payload()) != 0 {
		t.Errorf("task job: type %q payload %q", task.Type(), task.Payload())
	}
	hp, err := wire.PayloadFromHeaders(task.Headers())
	if err != nil || hp != (wire.Payload{ID: tj.ID, Gen: 3, SlotUS: 1772366400123456}) {
		t.Errorf("task headers %v → %+v, %v", task.Headers(), hp, err)
	}
	checkOpts(t, "task", opts, map[string]bool{`TaskID("j1_01J0000000000000000000000:3")`: true,
		"MaxRetry(0)": true, "Timeout(17s)": true, `Queue("emails")`: true}) // ⌈0.2 + 15 + 1⌉

	// A tenant whose send schedule runs 3.5s late: the task's timeout
	// covers the wait for SendAt too.
	late := tj
	late.SendAt = slot.Add(3500 * time.Millisecond)
	_, opts, err = d.taskFor(late)
	if err != nil {
		t.Fatal(err)
	}
	checkOpts(t, "late task", opts, map[string]bool{"Timeout(20s)": true}) // ⌈0.2 + 15 + 1 + 3.5⌉

	for _, bad := range []wire.Release{
		{ID: "j1_x", Type: "task", Gen: 1, Slot: slot, Queue: "{q}", TaskType: "t"},
		{ID: "j1_x", Type: "task", Gen: 1, Slot: slot, Queue: "q"},
		{ID: "j1_x", Type: "task", Gen: 1, Slot: slot, TaskType: "t"},
	} {
		if _, _, err := d.taskFor(bad); err == nil {
			t.Errorf("taskFor(%+v) succeeded", bad)
		}
	}
}

func checkOpts(t *testing.T, what string, opts []asynq.Option, want map[string]bool) {
	t.Helper()
	got := map[string]bool{}
	for _, o := range opts {
		got[o.String()] = true
	}
	for s, w := range want {
		if w && !got[s] {
			t.Errorf("%s: option %s missing from %v", what, s, got)
		}
		if !w && got[s] {
			t.Errorf("%s: unexpected option %s", what, s)
		}
	}
}

// TestHandoffSkipsTaskJobsNoMiddlewareServes: a released task job whose
// queue has no live middleware is not handed to asynq (the sweep returns
// it; nothing piles up in the queue) and is counted; a served queue's task
// and a webhook job are handed off as usual.
func TestHandoffSkipsTaskJobsNoMiddlewareServes(t *testing.T) {
	t.Parallel()
	st := newFakeStore(1)
	st.unserved = map[string]bool{"gone": true}
	slot := time.Now()
	rel := func(id, typ, queue string) wire.Release {
		return wire.Release{ID: id, Tenant: "acme", Type: typ, Gen: 1, Slot: slot, SendAt: slot,
			Timeout: time.Second, Queue: queue, TaskType: "t:" + id}
	}
	st.result = func(_, n int) store.PassResult {
		if n > 0 {
			return store.PassResult{Now: time.Now()}
		}
		return store.PassResult{Now: time.Now(), Released: []wire.Release{
			rel("j1", "task", "gone"), rel("j2", "task", "default"), rel("j3", "webhook", "")}}
	}
	cfg := loopConfig(t, st)
	asy := &fakeAsynq{}
	cfg.Asynq = asy
	d := start(t, cfg)
	eventually(t, time.Second, "two tasks handed off", func() bool { return len(asy.enqueued()) == 2 })
	d.Stop()
	got := asy.enqueued()
	if len(got) != 2 || slices.Contains(got, "t:j1") || !slices.Contains(got, "t:j2") || !slices.Contains(got, wire.TaskTypeBatch) {
		t.Fatalf("handed off %v, want t:j2 and %s, not t:j1", got, wire.TaskTypeBatch)
	}
	if n := testutil.ToFloat64(d.metrics.unserved); n != 1 {
		t.Fatalf("unserved releases %v, want 1", n)
	}
}

// TestHandoffIsBoundedByHalfTheGraceNotByTheLead: a pass's hand-off may
// take up to max(D, grace/2) — a release's lease runs until its send time
// + grace, so an enqueue that takes longer than D (a busy Redis) still
// reaches a worker in time — and no longer.
func TestHandoffIsBoundedByHalfTheGraceNotByTheLead(t *testing.T) {
	t.Parallel()
	st := newFakeStore(1)
	slot := time.Now()
	st.result = func(_, n int) store.PassResult {
		if n > 0 {
			return store.PassResult{Now: time.Now()}
		}
		return store.PassResult{Now: time.Now(), Released: []wire.Release{{ID: "j1", Tenant: "acme",
			Type: "webhook", Gen: 1, Slot: slot, SendAt: slot, Timeout: time.Second}}}
	}
	cfg := loopConfig(t, st)
	cfg.Pass = store.PassConfig{Lead: 100 * time.Millisecond, MinLead: 50 * time.Millisecond, Grace: 2 * time.Second}
	asy := &fakeAsynq{}
	cfg.Asynq = asy
	d := start(t, cfg)
	eventually(t, 5*time.Second, "the release handed off", func() bool { return len(asy.enqueued()) == 1 })
	d.Stop()
	asy.mu.Lock()
	left := asy.left[0]
	asy.mu.Unlock()
	// The bound is grace/2 = 1s; the pass and the call took a moment of it.
	if left <= cfg.Pass.Lead || left > cfg.Pass.Grace/2 {
		t.Fatalf("the enqueue had %s left; want more than D = %s and at most grace/2 = %s", left, cfg.Pass.Lead, cfg.Pass.Grace/2)
	}
}
