package store

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/wire"
)

// waitingEnv is e with a second Store on the same prefix and clock that
// asks for one replica more than the test Redis has: every WAIT of it
// comes back short, whatever the setup (single node, or a Cluster master
// with its replica).
func waitingEnv(t *testing.T) (*env, *Store, int) {
	e := newEnv(t)
	replicas := redistest.ConnectedReplicas(t, e.rdb, e.store.keys.ready(e.store.keys.shardOf("acme")))
	st, err := NewStore(e.rdb, Config{Prefix: e.prefix, Shards: 4, Clock: e.clock.Now,
		WaitReplicas: replicas + 1, WaitTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return e, st, replicas
}

// notReplicated requires err to be a *NotReplicatedError of want replicas
// with got confirmations.
func notReplicated(t *testing.T, err error, want, got int) {
	t.Helper()
	var nr *NotReplicatedError
	if !errors.As(err, &nr) || !errors.Is(err, ErrNotReplicated) || nr.Want != want || nr.Got != got || nr.Timeout != 20*time.Millisecond {
		t.Fatalf("err = %v, want a NotReplicatedError %d of %d in 20ms", err, got, want)
	}
}

// A short WAIT reports the job stored on the master with its id; the
// retry with the same key finds the job (no second one) and is still not
// answered as confirmed; a call that stores nothing waits for nothing.
func TestEnqueueWaitShortOfReplicas(t *testing.T) {
	t.Parallel()
	e, st, replicas := waitingEnv(t)
	rs, err := st.Enqueue(e.ctx, "acme", []Item{idemItem("order-1", `{"a":1}`)})
	notReplicated(t, err, replicas+1, replicas)
	if len(rs) != 1 || rs[0].Outcome != Accepted || rs[0].ID == "" {
		t.Fatalf("results %+v, want the accepted job beside the error", rs)
	}
	if j := e.job(rs[0].ID); j.State != StateQueued || j.Tenant != "acme" {
		t.Fatalf("the job on the master: %+v", j)
	}

	again, err := st.Enqueue(e.ctx, "acme", []Item{idemItem("order-1", `{"a":1}`)})
	notReplicated(t, err, replicas+1, replicas)
	if again[0].Outcome != Duplicate || again[0].ID != rs[0].ID {
		t.Fatalf("retry: %+v, want the original %s", again[0], rs[0].ID)
	}
	shard := e.store.keys.shardOf("acme")
	if ttl := e.rdb.PTTL(e.ctx, e.store.keys.waitMark(shard)).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("the replay's confirmation marker: TTL %s, want ≤ 1m", ttl)
	}

	refused, err := st.Enqueue(e.ctx, "acme", []Item{idemItem("order-1", `{"a":2}`)})
	if err != nil || refused[0].Code != CodeIdempotencyMismatch {
		t.Fatalf("a refusal: %+v, %v; want idempotency_mismatch and no error (nothing written)", refused, err)
	}
	if st := e.state("acme"); st.Backlog != 1 {
		t.Fatalf("backlog %d, want the one job", st.Backlog)
	}
	e.requireConsistent()
}

// A replay of a dead job the replicas do not confirm returns the job,
// requeued on the master, with the error.
func TestReplayWaitShortOfReplicas(t *testing.T) {
	t.Parallel()
	e, st, replicas := waitingEnv(t)
	e.seed(params(func(p *Params) { p.Burst = 1 }))
	r := e.enqueueOne("acme", item(`{}`))
	rel := e.passTenant("acme", time.Second, -1)
	c := e.claimAt(rel[0])
	e.finish(c.ID, c.Gen, outcome(wire.FinishPermanent), FinishConfig{})

	j, err := st.Replay(e.ctx, r.ID)
	notReplicated(t, err, replicas+1, replicas)
	if j.ID != r.ID || j.State != StateQueued {
		t.Fatalf("replayed job %+v, want %s queued", j, r.ID)
	}
	if got := e.job(r.ID).State; got != StateQueued {
		t.Fatalf("stored state %s, want queued", got)
	}
	e.requireConsistent()
}

func TestWaitConfigBounds(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{
		{WaitReplicas: -1}, {WaitReplicas: MaxWaitReplicas + 1},
		{WaitReplicas: 1, WaitTimeout: MaxWaitTimeout + time.Millisecond},
		{WaitReplicas: 1, WaitTimeout: time.Microsecond},
	} {
		if _, err := NewStore(nil, c); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: err %v, want ErrInvalid", c, err)
		}
	}
	if c := (Config{WaitReplicas: 1}).WithDefaults(); c.WaitTimeout != WaitTimeoutDefault {
		t.Errorf("default WaitTimeout %s, want %s", c.WaitTimeout, WaitTimeoutDefault)
	}
}
