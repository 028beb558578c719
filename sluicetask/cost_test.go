package sluicetask_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/sluicetask"
)

// TestSetCostReachesFinish: a task job reserving 5 whose handler calls
// SetCost(ctx, 9) in a real asynq server is recorded with actual cost 9,
// its tenant charged 4 more (TAT = slot + 9T) and the upstream it names 4·T_U
// more; a bad SetCost is refused and changes nothing.
func TestSetCostReachesFinish(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const tenant, T = "llm-user", int64(60_000_000) // 1/m: TAT stays ahead while the test reads it
	e.policy(tenant, store.Overrides{RateUS: p64(T), Burst: p64(10), Adaptive: p64(0)})
	spec := job.Spec{Type: wire.TypeTask, TaskType: "email:send", Queue: e.queue, Payload: json.RawMessage(`{}`)}
	rs, err := e.st.Enqueue(e.ctx, tenant, []store.Item{{Type: wire.TypeTask, Body: spec.Canonical(), Cost: 5}})
	if err != nil || rs[0].Outcome != store.Accepted {
		t.Fatalf("enqueue: %v %+v", err, rs)
	}
	id := rs[0].ID
	key, err := e.st.JobKey(id)
	if err != nil {
		t.Fatal(err)
	}
	const iv = 1000
	upTAT := time.Now().Add(time.Hour).UnixMicro()
	if err := e.rdb.HSet(e.ctx, e.st.UpstreamKey("llm"), "cfg", `{"rate":"1000/s","burst":1}`,
		"p", `{"iv":`+strconv.Itoa(iv)+`,"b":1,"c":0,"a":0,"s":0}`, "v", 1, "tat", upTAT).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.HSet(e.ctx, key, "ups", "llm").Err(); err != nil { // enqueue writes it from "upstreams"
		t.Fatal(err)
	}
	refused := make(chan error, 1)
	rec := newRecorder(func(ctx context.Context, _ call, _ int) error {
		refused <- sluicetask.SetCost(ctx, -1)
		return sluicetask.SetCost(ctx, 9)
	})
	e.startServer(2, rec.ProcessTask)
	e.startDispatcher()
	j := e.waitState(id, store.StateSucceeded, 30*time.Second)
	if err := <-refused; err == nil {
		t.Errorf("SetCost(ctx, -1) = nil, want an error")
	}
	if j.ActualCost != 9 || j.Cost != 5 {
		t.Fatalf("record: cost %d, actual %d; want 5, 9", j.Cost, j.ActualCost)
	}
	st, err := e.st.TenantState(e.ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	if want := j.Slot.Add(time.Duration(9*T) * time.Microsecond); !st.TAT.Equal(want) {
		t.Fatalf("tenant TAT slot + %s, want slot + 9T (reserved 5, charged 4 more)", st.TAT.Sub(j.Slot))
	}
	var tat int64
	redistest.Poll(t, 5*time.Second, "the upstream's charge", func() bool {
		tat, err = e.rdb.HGet(e.ctx, e.st.UpstreamKey("llm"), "tat").Int64()
		return err == nil && tat != upTAT
	})
	if tat != upTAT+4*iv {
		t.Fatalf("upstream TAT moved %d µs, want 4·T_U = %d", tat-upTAT, 4*iv)
	}
}
