package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// TestFinishLogEntryText pins the attempt log's stored text byte for byte
// (lifecycle.lua log_attempt builds it by concatenation): the fields in
// their order, integers as integers, the error and the body excerpt as
// JSON strings, and a stale finish's marker.
func TestFinishLogEntryText(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.enqueueOne("acme", item(`{"x":1}`)).ID
	c := e.attempt(id)
	o := wire.AttemptOutcome{Kind: wire.FinishRetry, Status: 503, Latency: 120 * ms, Error: `refused "x"`,
		Excerpt: []byte(`busy`)}
	if st := e.finish(id, c.Gen, o, FinishConfig{}); st != StateRetrying {
		t.Fatalf("state %s, want retrying", st)
	}
	at := e.clock.Now().UnixMicro()
	e.clock.Advance(time.Second)
	if _, err := e.store.Finish(e.ctx, id, c.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200}, FinishConfig{}); err == nil {
		t.Fatal("second finish of the claim: want it stale")
	}
	want := fmt.Sprintf(`{"at":%d,"gen":1,"attempt":1,"outcome":"retry","status":503,"latency_us":120000,"error":"refused \"x\"","body":"busy"}`+"\n"+
		`{"at":%d,"gen":1,"attempt":1,"outcome":"success","status":200,"latency_us":0,"error":"","stale":true}`,
		at, at+1_000_000)
	jobKey, _ := e.store.keys.job(id)
	if got := e.rdb.HGet(e.ctx, jobKey, "log").Val(); got != want {
		t.Fatalf("log\n%s\nwant\n%s", got, want)
	}
}
