package store

import (
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// TestFinishKeepsResultAndExcerpts: an attempt's result replaces the
// record's (the last attempt's wins), the attempt log keeps each
// attempt's 4 KiB excerpt, as text or base64.
func TestFinishKeepsResultAndExcerpts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.enqueueOne("acme", Item{Type: wire.TypeHTTP, Body: []byte(`{"type":"http"}`)}).ID
	cfg := FinishConfig{}
	c := e.attempt(id)
	binary := []byte{0xff, 0xfe, 0x00, 0x01}
	o := outcome(wire.FinishRetry)
	o.Excerpt = binary
	o.Result = &wire.AttemptResult{Status: 500, Header: map[string][]string{"content-type": {"application/octet-stream"}},
		Body: binary, Truncated: true}
	if st := e.finish(id, c.Gen, o, cfg); st != StateRetrying {
		t.Fatalf("state %s, want retrying", st)
	}
	j := e.job(id)
	if r := j.Result; r == nil || r.Status != 500 || r.Body != nil || r.BodyBase64 == nil ||
		*r.BodyBase64 != base64.StdEncoding.EncodeToString(binary) || !r.Truncated ||
		r.Headers["Content-Type"] != "application/octet-stream" {
		t.Fatalf("result after the first attempt: %+v", r)
	}
	c = e.attempt(id)
	long := strings.Repeat("é", 3000) // 6000 bytes of UTF-8
	o = wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200, Excerpt: []byte(long),
		Result: &wire.AttemptResult{Status: 200, Header: map[string][]string{"X-Ratelimit-Remaining": {"4"}}, Body: []byte("ok")}}
	if st := e.finish(id, c.Gen, o, cfg); st != StateSucceeded {
		t.Fatalf("state %s, want succeeded", st)
	}
	j = e.job(id)
	if r := j.Result; r == nil || r.Status != 200 || r.Body == nil || *r.Body != "ok" || r.Truncated ||
		r.Headers["X-Ratelimit-Remaining"] != "4" || len(r.Headers) != 1 {
		t.Fatalf("result after the last attempt: %+v", r)
	}
	if len(j.Attempts) != 2 {
		t.Fatalf("attempt log %+v", j.Attempts)
	}
	first, last := j.Attempts[0], j.Attempts[1]
	if first.BodyBase64 != base64.StdEncoding.EncodeToString(binary) || first.Body != "" {
		t.Errorf("first excerpt: body %q, base64 %q", first.Body, first.BodyBase64)
	}
	if want := truncate(long, wire.MaxExcerptBytes); last.Body != want || len(last.Body) > wire.MaxExcerptBytes || last.BodyBase64 != "" {
		t.Errorf("last excerpt %d bytes, want the first %d (cut on a rune boundary)", len(last.Body), len(want))
	}
}

// TestFinishRefusesOversizeResult: a result body over the policy cap is
// invalid, and nothing is recorded.
func TestFinishRefusesOversizeResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.enqueueOne("acme", Item{Type: wire.TypeHTTP, Body: []byte(`{}`)}).ID
	c := e.attempt(id)
	o := wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200,
		Result: &wire.AttemptResult{Status: 200, Body: make([]byte, maxResultBody+1)}}
	if _, err := e.store.Finish(e.ctx, id, c.Gen, o, FinishConfig{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("oversize result: %v, want ErrInvalid", err)
	}
	if j := e.job(id); j.State != StateRunning || j.Result != nil || len(j.Attempts) != 0 {
		t.Fatalf("refused finish changed the job: %+v", j)
	}
}

// callbackItem is a webhook job with a callback URL.
func callbackItem() Item {
	it := item(`{"type":"webhook"}`)
	it.Callback = "https://hooks.example.com/done"
	return it
}

// TestCallbackQueuedAtEveryTerminalState: succeeded, dead and canceled jobs
// with a callback are queued on their shard's callback set, once; jobs
// without one are not.
func TestCallbackQueuedAtEveryTerminalState(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	succ := e.enqueueOne("acme", callbackItem()).ID
	dead := e.enqueueOne("acme", callbackItem()).ID
	plain := e.enqueueOne("acme", item(`{}`)).ID
	canceled := e.enqueueOne("acme", callbackItem()).ID
	if j := e.job(succ); j.Callback != "https://hooks.example.com/done" {
		t.Fatalf("record callback %q", j.Callback)
	}
	if _, _, err := e.store.Cancel(e.ctx, canceled); err != nil {
		t.Fatal(err)
	}
	c := e.attempt(succ)
	e.finish(succ, c.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}, FinishConfig{})
	c = e.attempt(dead)
	e.finish(dead, c.Gen, outcome(wire.FinishPermanent), FinishConfig{})
	c = e.attempt(plain)
	e.finish(plain, c.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}, FinishConfig{})

	got, next, err := e.store.TakeCallbacks(e.ctx, 0, 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if next != time.Minute {
		t.Fatalf("next due after the take: %s, want the leases' end, 1m", next)
	}
	slices.Sort(got)
	want := []string{succ, dead, canceled}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("callbacks taken %v, want %v", got, want)
	}
	if again, next, _ := e.store.TakeCallbacks(e.ctx, 0, 10, time.Minute); len(again) != 0 || next != time.Minute {
		t.Fatalf("leased callbacks taken again: %v (next due in %s, want 1m)", again, next)
	}
}

// TestCallbackLeaseRetryAndDrop: a taken callback whose sender vanished
// is due again after its lease; a failure is due again on the tenant's
// retry curve; max_attempts failures drop it; delivery removes it.
func TestCallbackLeaseRetryAndDrop(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(func(p *Params) { p.MaxAttempts, p.MinBackoffUS, p.MaxDoublings = 3, 2_000_000, 5 }))
	id := e.enqueueOne("acme", callbackItem()).ID
	c := e.attempt(id)
	e.finish(id, c.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}, FinishConfig{})
	ended := e.job(id).Ended
	take := func() []string {
		t.Helper()
		ids, _, err := e.store.TakeCallbacks(e.ctx, 0, 10, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	done := func(o CallbackOutcome) CallbackReport {
		t.Helper()
		r, err := e.store.CallbackDone(e.ctx, id, ended, o)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if got := take(); !slices.Equal(got, []string{id}) {
		t.Fatalf("take %v", got)
	}
	e.clock.Advance(30 * time.Second) // the sender died: the lease ends
	if got := take(); !slices.Equal(got, []string{id}) {
		t.Fatalf("after the lease: take %v", got)
	}
	r := done(CallbackRetry)
	now := e.clock.Now()
	if r.Status != CallbackRetried || r.Failures != 1 || r.Due.Before(now.Add(1800*time.Millisecond)) || r.Due.After(now.Add(2200*time.Millisecond)) {
		t.Fatalf("first failure: %+v, want due 2s ± 10 %% after %v", r, now)
	}
	if got, next, _ := e.store.TakeCallbacks(e.ctx, 0, 10, 30*time.Second); len(got) != 0 || next != r.Due.Sub(now) {
		t.Fatalf("before its backoff: taken %v, next due in %s; want none, due in %s", got, next, r.Due.Sub(now))
	}
	e.clock.Set(r.Due)
	if got := take(); !slices.Equal(got, []string{id}) {
		t.Fatalf("after the backoff: %v", got)
	}
	if r = done(CallbackRetry); r.Status != CallbackRetried || r.Failures != 2 || r.Due.Sub(e.clock.Now()) < 3600*time.Millisecond {
		t.Fatalf("second failure: %+v (want about 4s)", r)
	}
	e.clock.Set(r.Due)
	take()
	if r = done(CallbackRetry); r.Status != CallbackDropped || r.Failures != 3 {
		t.Fatalf("third failure with max_attempts 3: %+v, want dropped", r)
	}
	if n, _ := e.store.PendingCallbacks(e.ctx, 0); n != 0 {
		t.Fatalf("%d callbacks pending after the drop", n)
	}
	if _, next, _ := e.store.TakeCallbacks(e.ctx, 0, 10, 30*time.Second); next != -1 {
		t.Fatalf("the empty set's next due: %s, want -1", next)
	}
	if r = done(CallbackDelivered); r.Status != CallbackDone {
		t.Fatalf("a late delivery: %+v", r)
	}
}

// TestCallbackDoneBadInput: a bad outcome or id is an error and changes
// nothing.
func TestCallbackDoneBadInput(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	id := e.enqueueOne("acme", callbackItem()).ID
	if _, err := e.store.CallbackDone(e.ctx, id, time.Now(), "maybe"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad outcome: %v", err)
	}
	if _, _, err := e.store.TakeCallbacks(e.ctx, 1, 1, time.Second); !errors.Is(err, ErrInvalid) {
		t.Fatalf("shard out of range: %v", err)
	}
	bad := callbackItem()
	bad.Callback = "ftp://x"
	if _, err := e.store.Enqueue(e.ctx, "acme", []Item{bad}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad callback URL: %v", err)
	}
	if j := e.job(id); j.State != StateQueued || j.CallbackFailures != 0 {
		t.Fatalf("job changed: %+v", j)
	}
}

// TestResultHeadersStoredAndRead: result_headers survive the policy hash
// (an empty list too, which Lua's cjson writes back as {}), in the stored
// record and in the scripts' merged view of the tenant.
func TestResultHeadersStoredAndRead(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(DefaultParams())
	for _, h := range []HeaderList{{"ETag", "X-Usage-*"}, {}} {
		if _, err := e.store.PutTenantPolicy(e.ctx, "acme", Overrides{ResultHeaders: h, MaxResultBytes: ptr(int64(1024))}, AnyVersion); err != nil {
			t.Fatal(err)
		}
		rec, err := e.store.TenantPolicy(e.ctx, "acme")
		if err != nil || !slices.Equal(rec.Effective.ResultHeaders, h) || rec.Effective.ResultHeaders == nil || rec.Effective.MaxResultBytes != 1024 {
			t.Fatalf("stored %v: read %+v %v", h, rec.Effective, err)
		}
		if st := e.state("acme"); !slices.Equal(st.Policy.ResultHeaders, h) || st.Policy.MaxResultBytes != 1024 {
			t.Fatalf("stored %v: the scripts' view %v", h, st.Policy.ResultHeaders)
		}
	}
	if _, err := e.store.PutTenantPolicy(e.ctx, "acme", Overrides{ResultHeaders: HeaderList{"bad name"}}, AnyVersion); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad header name: %v", err)
	}
}
