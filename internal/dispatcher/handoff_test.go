package dispatcher

import (
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/internal/dispatch"
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
		if got := TaskTimeout(tc.lead, tc.attempt, tc.grace); got != tc.want {
			t.Errorf("TaskTimeout(%s, %s, %s) = %s, want %s", tc.lead, tc.attempt, tc.grace, got, tc.want)
		}
	}
}

func TestPayloadRoundTripsAndRejectsGarbage(t *testing.T) {
	t.Parallel()
	p, err := DecodePayload([]byte(`{"id":"j3_01J0000000000000000000000","gen":7,"slot_us":1772366400000000}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.ID != "j3_01J0000000000000000000000" || p.Gen != 7 || !p.Slot().Equal(time.UnixMicro(1772366400000000)) {
		t.Fatalf("decoded %+v", p)
	}
	for _, bad := range []string{``, `{}`, `{"id":"x","gen":0,"slot_us":1}`, `{"id":"","gen":1,"slot_us":1}`, `{"id":"x","gen":1,"slot_us":0}`, `[1]`} {
		if _, err := DecodePayload([]byte(bad)); !errors.Is(err, ErrBadPayload) {
			t.Errorf("DecodePayload(%q) = %v, want ErrBadPayload", bad, err)
		}
	}
}

func TestQueuesDeriveFromThePrefix(t *testing.T) {
	t.Parallel()
	if got := WebhookQueue(dispatch.PrefixDefault); got != "sluice:webhook" {
		t.Errorf("WebhookQueue = %q", got)
	}
	if got := HTTPQueue(dispatch.PrefixDefault); got != "sluice:http" {
		t.Errorf("HTTPQueue = %q", got)
	}
}

func TestTaskForEachJobType(t *testing.T) {
	t.Parallel()
	d := &Dispatcher{cfg: Config{Prefix: "p"}.withDefaults()}
	slot := time.UnixMicro(1772366400123456)
	base := dispatch.Release{ID: "j1_01J0000000000000000000000", Tenant: "acme", Gen: 3, Slot: slot, SendAt: slot, Timeout: 15 * time.Second}

	web := base
	web.Type = "webhook"
	task, opts, err := d.taskFor(web)
	if err != nil {
		t.Fatal(err)
	}
	if task.Type() != TaskTypeWebhook {
		t.Errorf("webhook task type %q", task.Type())
	}
	p, err := DecodePayload(task.Payload())
	if err != nil || p.ID != web.ID || p.Gen != 3 || p.SlotUS != 1772366400123456 {
		t.Errorf("webhook payload %+v, %v", p, err)
	}
	wantOpts := map[string]bool{`TaskID("j1_01J0000000000000000000000:3")`: true, "MaxRetry(0)": true, "Timeout(17s)": true, `Queue("p:webhook")`: true}
	checkOpts(t, "webhook", opts, wantOpts)

	h := base
	h.Type = "http"
	task, opts, err = d.taskFor(h)
	if err != nil || task.Type() != TaskTypeHTTP {
		t.Fatalf("http: %v, %v", task, err)
	}
	wantOpts[`Queue("p:webhook")`], wantOpts[`Queue("p:http")`] = false, true
	checkOpts(t, "http", opts, wantOpts)

	tj := base
	tj.Type, tj.Queue, tj.TaskType = "task", "emails", "email:send"
	task, opts, err = d.taskFor(tj)
	if err != nil {
		t.Fatal(err)
	}
	if task.Type() != "email:send" || len(task.Payload()) != 0 {
		t.Errorf("task job: type %q payload %q", task.Type(), task.Payload())
	}
	hp, err := PayloadFromHeaders(task.Headers())
	if err != nil || hp != (Payload{ID: tj.ID, Gen: 3, SlotUS: 1772366400123456}) {
		t.Errorf("task headers %v → %+v, %v", task.Headers(), hp, err)
	}
	wantOpts[`Queue("p:http")`], wantOpts[`Queue("emails")`] = false, true
	checkOpts(t, "task", opts, wantOpts)

	for _, bad := range []dispatch.Release{
		{ID: "j1_x", Type: "carrier-pigeon", Gen: 1, Slot: slot},
		{ID: "j1_x", Type: "task", Gen: 1, Slot: slot, Queue: "{q}", TaskType: "t"},
		{ID: "j1_x", Type: "task", Gen: 1, Slot: slot, Queue: "q"},
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
