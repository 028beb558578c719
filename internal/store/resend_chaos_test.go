package store_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/chaos"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
)

// TestEnqueueReSentByTheClientStoresOnce: the binaries' Redis client
// (config.RedisConfig.Client) re-sends a command whose connection broke
// before its reply: here the reply of an enqueue is dropped on its way back
// (the script ran, the job is stored), then the connection is cut. The
// client sends the enqueue again on a new connection, and the caller gets
// the first run's job: accepted, one job stored, under the id Redis holds.
func TestEnqueueReSentByTheClientStoresOnce(t *testing.T) {
	t.Parallel()
	r := redistest.NewPrivate(t)
	direct := r.Client(t)
	proxy, err := chaos.Listen(r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	client, err := config.RedisConfig{URL: "redis://" + proxy.Addr() + "/0"}.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	cfg := store.Config{Prefix: "resend", Shards: 1, Planner: os.Getenv("SLUICE_TEST_PLANNER")}
	st, err := store.NewStore(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	observer, err := store.NewStore(direct, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := st.LoadFunctions(ctx); err != nil { // the first call must not be the library's load
		t.Fatal(err)
	}

	proxy.DropReplies()
	type outcome struct {
		rs  []store.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		rs, err := st.Enqueue(ctx, "t", []store.Item{{Type: "webhook", Body: []byte(`{"n":1}`)}})
		done <- outcome{rs, err}
	}()
	redistest.Poll(t, 10*time.Second, "the enqueue's job stored while its reply is lost", func() bool {
		s, err := observer.TenantState(ctx, "t")
		return err == nil && s.Backlog == 1
	})
	if len(done) != 0 {
		t.Fatal("the enqueue returned while its reply was being dropped")
	}
	proxy.Resume()
	if n := proxy.Cut(); n == 0 {
		t.Fatal("no connection to cut")
	}
	var got outcome
	select {
	case got = <-done:
	case <-ctx.Done():
		t.Fatal("the enqueue did not return after the cut")
	}
	if got.err != nil || len(got.rs) != 1 || got.rs[0].Outcome != store.Accepted {
		t.Fatalf("enqueue after the cut: %+v, %v; want accepted (the client re-sent it)", got.rs, got.err)
	}
	s, err := observer.TenantState(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if s.Backlog != 1 || s.Queued != 1 {
		t.Fatalf("backlog %d, queued %d after the re-send; want the one job stored once", s.Backlog, s.Queued)
	}
	if j, err := observer.GetJob(ctx, got.rs[0].ID); err != nil || j.State != store.StateQueued {
		t.Fatalf("job %s: %+v, %v; want the stored job, queued", got.rs[0].ID, j.State, err)
	}
}
