package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// sharedRequests are enqueue requests of three tenants of one shard, two of
// them twice: t1's second request runs past its admission burst (3), t3's
// second replays its first under the same idempotency key, and t3's third
// reuses the key with another body.
func sharedRequests(e *env) (tenants []string, reqs [][]Item) {
	tenants = tenantsOfShard(e, 0, 3)
	t1, t2, t3 := tenants[0], tenants[1], tenants[2]
	return []string{t1, t2, t1, t3, t3, t3}, [][]Item{
		{item(`{"a":1}`), item(`{"a":2}`)},
		{item(`{"b":1}`)},
		{item(`{"a":3}`), item(`{"a":4}`)},
		{idemItem("k", `{"c":1}`)},
		{idemItem("k", `{"c":1}`)},
		{idemItem("k", `{"c":2}`)},
	}
}

// tenantsOfShard is n tenant names of shard.
func tenantsOfShard(e *env, shard, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if tn := fmt.Sprintf("s%d-%d", shard, i); e.store.keys.shardOf(tn) == shard {
			out = append(out, tn)
		}
	}
	return out
}

// One script call carrying several requests decides each as consecutive
// calls would: the same outcomes, states, refusals, replays and tenant
// states as the requests sent one by one.
func TestEnqueueSharedCallDecidesAsConsecutiveCalls(t *testing.T) {
	t.Parallel()
	seed := params(func(p *Params) { p.AdmitUS, p.AdmitBurst = 1_000_000, 3 })
	alone, shared := newEnvShards(t, 2), newEnvShards(t, 2)
	alone.seed(seed)
	shared.seed(seed)
	tenants, items := sharedRequests(alone)
	var want [][]Result
	for i, tn := range tenants {
		want = append(want, alone.enqueue(tn, items[i]...))
	}
	reqs := make([]*enqueueReq, len(tenants))
	for i, tn := range tenants {
		args, err := shared.store.enqueueArgs(tn, 0, items[i])
		if err != nil {
			t.Fatal(err)
		}
		reqs[i] = &enqueueReq{args: args, n: len(items[i])}
	}
	if err := shared.store.enqueueCall(shared.ctx, 0, reqs); err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		for k, got := range r.res {
			w := want[i][k]
			if got.Outcome != w.Outcome || got.State != w.State || got.Code != w.Code || !got.ETA.Equal(w.ETA) || got.Admit != w.Admit {
				t.Errorf("request %d (%s) item %d: %+v; alone %+v", i, tenants[i], k, got, w)
			}
		}
	}
	if got := reqs[4].res[0]; got.Outcome != Duplicate || got.ID != reqs[3].res[0].ID {
		t.Errorf("t3's replay: %+v; want a duplicate of %s", got, reqs[3].res[0].ID)
	}
	if got := reqs[2].res[1]; got.Outcome != Refused || got.Code != CodeRateLimited {
		t.Errorf("t1's fourth item: %+v; want rate_limited (admit burst 3)", got)
	}
	for _, tn := range slices.Compact(slices.Sorted(slices.Values(tenants))) {
		a, s := alone.state(tn), shared.state(tn)
		if a.Backlog != s.Backlog || a.Queued != s.Queued || a.AdmitTokens != s.AdmitTokens || !a.TAT.Equal(s.TAT) || !a.NextAt.Equal(s.NextAt) || a.Bytes != s.Bytes {
			t.Errorf("tenant %s: shared %+v; alone %+v", tn, s, a)
		}
	}
}

// A corrupt policy entry of one request's tenant fails the whole call
// before its first write: the other requests' jobs are not stored either.
func TestEnqueueSharedCallCorruptPolicyWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 2)
	tenants := tenantsOfShard(e, 0, 2)
	if err := e.rdb.HSet(e.ctx, e.store.keys.policy(0), tenants[1], "{not json").Err(); err != nil {
		t.Fatal(err)
	}
	var reqs []*enqueueReq
	for _, tn := range tenants {
		args, err := e.store.enqueueArgs(tn, 0, []Item{item(`{"x":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, &enqueueReq{args: args, n: 1})
	}
	if err := e.store.enqueueCall(e.ctx, 0, reqs); err == nil || !errors.Is(err, ErrProtocol) && !isRedisError(err) {
		t.Fatalf("a call with a corrupt policy: %v; want its error", err)
	}
	if st := e.state(tenants[0]); st.Backlog != 0 {
		t.Fatalf("the valid request's tenant holds %d jobs; want none stored", st.Backlog)
	}
	if n, err := e.rdb.LLen(e.ctx, e.store.keys.tenant(tenants[0])+":q").Result(); err != nil || n != 0 {
		t.Fatalf("its backlog list: %d ids (%v); want none", n, err)
	}
}

func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// heldFCalls holds the enqueue script calls on e's client until release is
// closed, and counts them.
func heldFCalls(e *env) (calls func() int, release chan struct{}) {
	var mu sync.Mutex
	n := 0
	release = make(chan struct{})
	e.rdb.AddHook(holdHook{before: func(cmd redis.Cmder) {
		if cmd.Name() == "fcall" || cmd.Name() == "evalsha" {
			mu.Lock()
			n++
			mu.Unlock()
			<-release
		}
	}})
	return func() int { mu.Lock(); defer mu.Unlock(); return n }, release
}

// Concurrent Enqueues of a shard share the script calls: the first goes at
// once, the ones that arrive while it runs go together in the next; each
// gets its own results. One whose context ends while it waits is not sent;
// one of EnqueueShareItems items does not wait.
func TestEnqueuesShareCalls(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	tenants := tenantsOfShard(e, 0, 4)
	e.enqueue(tenants[0], item(`{"warm":1}`)) // the library loaded, before the hook
	calls, release := heldFCalls(e)
	first := make(chan []Result, 1)
	go func() { first <- e.enqueue(tenants[0], item(`{"n":0}`)) }()
	redistest.Poll(t, 10*time.Second, "the first call sent", func() bool { return calls() == 1 })
	gone, cancel := context.WithCancel(e.ctx)
	results := make(chan error, 4)
	go func() { _, err := e.store.Enqueue(gone, tenants[3], []Item{item(`{"gone":1}`)}); results <- err }()
	var wg sync.WaitGroup
	got := make([][]Result, 3)
	for i := 1; i <= 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i-1] = e.enqueue(tenants[i-1], item(fmt.Sprintf(`{"n":%d}`, i)), item(`{"also":1}`))
		}()
	}
	redistest.Poll(t, 10*time.Second, "four enqueues waiting", func() bool { return e.store.enqueuesWaiting(0) == 4 })
	// An enqueue of EnqueueShareItems items does not wait: its own call, at once.
	big := make([]Item, EnqueueShareItems)
	for i := range big {
		big[i] = item(fmt.Sprintf(`{"big":%d}`, i))
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if rs := e.enqueue(tenants[2], big...); rs[len(rs)-1].Outcome != Accepted {
			t.Errorf("the large enqueue: %+v", rs[len(rs)-1])
		}
	}()
	redistest.Poll(t, 10*time.Second, "the large enqueue sent", func() bool { return calls() == 2 })
	if n := e.store.enqueuesWaiting(0); n != 4 {
		t.Fatalf("%d requests wait; want the large enqueue sent, not queued", n)
	}
	cancel()
	if err := <-results; !errors.Is(err, ErrNotSent) || !errors.Is(err, context.Canceled) {
		t.Fatalf("the canceled caller: %v; want ErrNotSent and context.Canceled", err)
	}
	if n := e.store.enqueuesWaiting(0); n != 3 {
		t.Fatalf("%d requests wait after the cancel; want 3", n)
	}
	close(release)
	wg.Wait()
	if r := <-first; r[0].Outcome != Accepted {
		t.Fatalf("the first call: %+v", r)
	}
	if n := calls(); n != 3 {
		t.Fatalf("%d script calls; want 3 (the first, the large one, then the three that waited together)", n)
	}
	for i, rs := range got {
		if len(rs) != 2 || rs[0].Outcome != Accepted || rs[1].Outcome != Accepted {
			t.Fatalf("request %d: %+v; want its two items accepted", i, rs)
		}
		want := int64(2)
		switch i {
		case 0:
			want += 2 // the warm-up's and the first call's
		case 2:
			want += EnqueueShareItems
		}
		if st := e.state(tenants[i]); st.Queued != want {
			t.Fatalf("tenant %s: %d queued, want %d", tenants[i], st.Queued, want)
		}
	}
	if st := e.state(tenants[3]); st.Backlog != 0 {
		t.Fatalf("the canceled request's tenant holds %d jobs; want it not sent", st.Backlog)
	}
}

// holdHook runs before ahead of every command a client sends (not
// pipelines).
type holdHook struct{ before func(redis.Cmder) }

func (h holdHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h holdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.before(cmd)
		return next(ctx, cmd)
	}
}
func (h holdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// enqueuesWaiting is the number of Enqueues of shard waiting for a call.
func (s *Store) enqueuesWaiting(shard int) int {
	s.enqueues.mu.Lock()
	defer s.enqueues.mu.Unlock()
	if q := s.enqueues.streams[shard]; q != nil {
		return len(q.waiting)
	}
	return 0
}
