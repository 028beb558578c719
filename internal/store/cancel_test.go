package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

func (e *env) cancel(id string) (Job, State) {
	e.t.Helper()
	j, from, err := e.store.Cancel(e.ctx, id)
	if err != nil {
		e.t.Fatalf("cancel %s: %v", id, err)
	}
	return j, from
}

// toHeadLane moves a queued job from the backlog to the head lane at
// sequence seq (test helper: the scripts put returned and retried jobs there).
func (e *env) toHeadLane(tenant, id string, seq float64) {
	e.t.Helper()
	if err := e.rdb.LRem(e.ctx, e.store.keys.tenantQueue(tenant), 1, id).Err(); err != nil {
		e.t.Fatal(err)
	}
	if err := e.rdb.ZAdd(e.ctx, e.store.keys.tenantHead(tenant), redisZ(seq, id)).Err(); err != nil {
		e.t.Fatal(err)
	}
	e.addTenantField(tenant, "hlen", 1)
}

func TestCancelEachCancelableState(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.Burst = 5 }))
	later := item(`{"later":1}`)
	later.Delay = time.Hour
	rs := e.enqueue("acme", item(`{"released":1}`), item(`{"head":1}`), item(`{"backlog":1}`), later)
	released, head, backlog, scheduled := rs[0].ID, rs[1].ID, rs[2].ID, rs[3].ID
	if rel, ok := e.pop("acme", 0); !ok || rel.ID != released {
		t.Fatalf("pop: %+v %v", rel, ok)
	}
	e.toHeadLane("acme", head, 1)
	e.requireConsistent()

	for _, c := range []struct {
		id   string
		from State
	}{{head, StateQueued}, {backlog, StateQueued}, {scheduled, StateScheduled}, {released, StateReleased}} {
		j, from := e.cancel(c.id)
		if from != c.from || j.State != StateCanceled || j.Body != nil || !j.Ended.Equal(epoch) {
			t.Errorf("cancel %s: from %s, record %+v", c.id, from, j)
		}
		key, _ := e.store.keys.job(c.id)
		if ttl := e.rdb.PTTL(e.ctx, key).Val(); ttl <= 0 || ttl > CanceledRetentionDefault {
			t.Errorf("tombstone %s TTL %s, want the retention", c.id, ttl)
		}
		e.requireConsistent()
	}
	if _, ok := e.pop("acme", time.Hour); ok {
		t.Fatal("pop released a canceled job")
	}
	st := e.state("acme")
	if st.Backlog != 0 || st.Bytes != 0 || st.Released != 0 || st.QueuedCost != 0 || !st.NextAt.IsZero() {
		t.Fatalf("state after cancels: %+v", st)
	}
	// Idle again: the tenant hash expires, not before its TAT has passed.
	if ttl := e.rdb.PTTL(e.ctx, e.store.keys.tenant("acme")).Val(); ttl < 100*time.Millisecond {
		t.Fatalf("idle tenant hash TTL %s, want ≥ TAT − now = 100ms", ttl)
	}
}

func TestCancelConflictsAndMisses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rs := e.enqueue("acme", item(`1`), item(`2`))
	rel, ok := e.pop("acme", 0)
	if !ok || rel.ID != rs[0].ID {
		t.Fatalf("pop: %+v %v", rel, ok)
	}
	e.claimAt(rel)
	e.cancel(rs[1].ID)
	e.requireConsistent()

	for id, want := range map[string]State{rs[0].ID: StateRunning, rs[1].ID: StateCanceled} {
		_, _, err := e.store.Cancel(e.ctx, id)
		var conflict *ConflictError
		if !errors.Is(err, ErrConflict) || !errors.As(err, &conflict) || conflict.State != want {
			t.Errorf("cancel %s job: %v, want a conflict naming %s", want, err, want)
		}
	}
	missing, _ := NewJobID(0, epoch)
	for _, id := range []string{missing, "nope", "j99999_01KJMMA2G0WAAKMBBJK9MDDZKB"} {
		if _, _, err := e.store.Cancel(e.ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("cancel %q: %v, want ErrNotFound", id, err)
		}
		if _, err := e.store.GetJob(e.ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("get %q: %v, want ErrNotFound", id, err)
		}
	}
	e.requireConsistent()
}

// Cancel and Pass race on the same jobs: every job ends canceled or released,
// never both, never released after its cancel, and the counters agree.
func TestCancelRacesPass(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 300
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = 1, 1, 10*n }))
	batch := make([]Item, n)
	for i := range batch {
		batch[i] = item(fmt.Sprintf(`{"i":%d}`, i))
	}
	all := ids(e.enqueue("acme", batch...))
	toCancel := rand.Perm(n)[:n/2]

	var mu sync.Mutex
	popped := map[string]int{}
	canceledFrom := map[string]State{}
	var wg sync.WaitGroup
	shard := e.store.keys.shardOf("acme")
	for range 4 {
		wg.Go(func() {
			for {
				res, err := e.store.Pass(e.ctx, shard, PassConfig{Lead: time.Hour, Grace: time.Minute, Capacity: 7})
				if err != nil || len(res.Released) == 0 {
					return
				}
				mu.Lock()
				for _, rel := range res.Released {
					popped[rel.ID]++
				}
				mu.Unlock()
			}
		})
	}
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < len(toCancel); i += 4 {
				id := all[toCancel[i]]
				_, from, err := e.store.Cancel(e.ctx, id)
				if err != nil {
					t.Errorf("cancel %s: %v", id, err)
					return
				}
				mu.Lock()
				canceledFrom[id] = from
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	released, fromQueued := 0, 0
	for _, f := range canceledFrom {
		if f == StateQueued {
			fromQueued++
		}
	}
	t.Logf("canceled %d while queued, %d after their release", fromQueued, len(canceledFrom)-fromQueued)
	for _, id := range all {
		state := e.job(id).State
		from, canceled := canceledFrom[id]
		switch {
		case popped[id] > 1:
			t.Errorf("%s popped %d times", id, popped[id])
		case canceled && state != StateCanceled:
			t.Errorf("%s: cancel succeeded but the job is %s", id, state)
		case canceled && from == StateQueued && popped[id] != 0:
			t.Errorf("%s: canceled while queued, then popped", id)
		case canceled && from == StateReleased && popped[id] != 1:
			t.Errorf("%s: canceled after its release, but popped %d times", id, popped[id])
		case !canceled && (state != StateReleased || popped[id] != 1):
			t.Errorf("%s: not canceled, state %s, popped %d times", id, state, popped[id])
		}
		if state == StateReleased {
			released++
		}
	}
	if released != n-len(toCancel) {
		t.Fatalf("%d released, want %d", released, n-len(toCancel))
	}
	if st := e.state("acme"); st.Released != int64(released) || st.Backlog != int64(released) || st.Queued != 0 {
		t.Fatalf("counters %+v, want %d released, nothing queued", st, released)
	}
	e.requireConsistent()
}
