package dispatch

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// BenchmarkShardContention measures what shard leases save, on the real
// pass script: 1 dispatcher, 3 with leases, 3 without (all passing every
// shard). "busy": 100 tenants × 4 jobs at 5/s each (500 jobs/s for
// 0.6 s) on 16 shards, a load a 2-core machine carries; it reports passes and Redis script time (INFO
// commandstats, EVALSHA: passes, claims and finishes) per released job, and
// re-releases per job (a new generation after a sweep; never the same
// generation twice: the scripts are atomic and fenced); a stand-in worker
// claims and finishes each job at its slot. "idle": one second with
// nothing to do; it reports passes and Redis script time per second.
//
//	go test -run '^$' -bench ShardContention -benchtime 1x ./internal/dispatch/
//
// Run it alone: the Redis counters are server-wide.
func BenchmarkShardContention(b *testing.B) {
	for _, sc := range []struct {
		name   string
		n      int
		leases bool
	}{{"1-dispatcher", 1, true}, {"3-with-leases", 3, true}, {"3-without-leases", 3, false}} {
		b.Run("busy/"+sc.name, func(b *testing.B) {
			for range b.N {
				benchBusy(b, sc.n, sc.leases)
			}
		})
		b.Run("idle/"+sc.name, func(b *testing.B) {
			for range b.N {
				benchIdle(b, sc.n, sc.leases)
			}
		})
	}
}

type benchEnv struct {
	b      *testing.B
	ctx    context.Context
	rdb    redis.UniversalClient
	prefix string
	st     *store.Store
	sinks  []*claimingSink
	ds     []*Dispatcher
}

// sinkTolerance is the stand-in worker's claim tolerance: wide, so that a
// loaded machine's late wake-ups do not turn into early-claim rounds; this
// benchmark measures passes, not claim precision.
const sinkTolerance = 50 * time.Millisecond

// claimingSink stands in for asynq and the workers: it records each task
// and claims and finishes each of its jobs at its slot, so tenants stay under their
// release caps.
type claimingSink struct {
	fakeAsynq
	st   *store.Store
	wg   sync.WaitGroup
	done chan struct{} // closed by benchEnv.stop: pending claims give up
}

func (s *claimingSink) EnqueueContext(ctx context.Context, t *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	b, err := wire.DecodeBatch(t.Payload())
	if err != nil {
		return nil, err
	}
	for _, p := range b.Jobs {
		s.wg.Go(func() { s.claim(p) })
	}
	return s.fakeAsynq.EnqueueContext(ctx, t, opts...)
}

// claim claims and finishes p's job at its slot.
func (s *claimingSink) claim(p wire.Payload) {
	ctx, slot := context.Background(), p.Slot()
	for range 3 { // early replies: wait and claim again
		timer := time.NewTimer(time.Until(slot))
		select {
		case <-s.done:
			timer.Stop()
			return
		case <-timer.C:
		}
		c, err := s.st.Claim(ctx, p.ID, p.Gen, sinkTolerance)
		switch {
		case err != nil:
			return
		case c.Outcome == store.ClaimOK:
			_, _ = s.st.Finish(ctx, p.ID, c.Job.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 204}, store.FinishConfig{})
			return
		case c.Outcome == store.ClaimEarly:
			slot = time.Now().Add(c.Wait)
		default:
			return
		}
	}
}

func newBenchEnv(b *testing.B, n int, leases bool) *benchEnv {
	rdb, prefix := redistest.New(b)
	st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: 16})
	if err != nil {
		b.Fatal(err)
	}
	e := &benchEnv{b: b, ctx: context.Background(), rdb: rdb, prefix: prefix, st: st}
	// A worker with room for everything: the pass is bounded by rates only.
	if err := st.Heartbeat(e.ctx, "bench", 100_000, time.Hour); err != nil {
		b.Fatal(err)
	}
	for range n {
		sink := &claimingSink{st: st, done: make(chan struct{})}
		d, err := New(Config{Store: st, Asynq: sink, Redis: rdb, Prefix: prefix, DisableLeases: !leases,
			Pass: store.PassConfig{Grace: time.Minute}, Registerer: prometheus.NewRegistry()})
		if err != nil {
			b.Fatal(err)
		}
		e.sinks, e.ds = append(e.sinks, sink), append(e.ds, d)
	}
	return e
}

func (e *benchEnv) start() {
	for _, d := range e.ds {
		if err := d.Start(e.ctx); err != nil {
			e.b.Fatal(err)
		}
	}
}

func (e *benchEnv) stop() {
	for _, d := range e.ds {
		d.Stop()
	}
	for _, s := range e.sinks {
		close(s.done)
		s.wg.Wait()
	}
}

func (e *benchEnv) passes() float64 {
	var n float64
	for _, d := range e.ds {
		n += testutil.ToFloat64(d.metrics.passes)
	}
	return n
}

func (e *benchEnv) released() (total, distinct int) {
	seen := map[string]bool{}
	for _, s := range e.sinks {
		s.mu.Lock()
		for _, t := range s.tasks {
			b, err := wire.DecodeBatch(t.Payload())
			if err != nil {
				e.b.Fatal(err)
			}
			for _, p := range b.Jobs {
				total++
				seen[p.ID] = true
			}
		}
		s.mu.Unlock()
	}
	return total, len(seen)
}

// evalshaUS is the server's total EVALSHA time so far, µs.
func (e *benchEnv) evalshaUS() float64 {
	info, err := e.rdb.Info(e.ctx, "commandstats").Result()
	if err != nil {
		e.b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
			for _, kv := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "usec="); ok {
					us, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
					return us
				}
			}
		}
	}
	return 0
}

func benchBusy(b *testing.B, n int, leases bool) {
	e := newBenchEnv(b, n, leases)
	const tenants, perTenant = 100, 4
	for i := range tenants {
		tn := fmt.Sprintf("tenant-%03d", i)
		if _, err := e.st.PutTenantPolicy(e.ctx, tn, store.Overrides{RateUS: ptrInt(200_000), Burst: ptrInt(1)}, 0); err != nil {
			b.Fatal(err)
		}
		items := make([]store.Item, perTenant)
		for j := range items {
			items[j] = store.Item{Type: "webhook", Body: []byte(`{}`)}
		}
		if _, err := e.st.Enqueue(e.ctx, tn, items); err != nil {
			b.Fatal(err)
		}
	}
	us0 := e.evalshaUS()
	began := time.Now()
	e.start()
	redistest.PollMsg(b, 10*time.Second, func() (bool, string) {
		total, distinct := e.released()
		return distinct == tenants*perTenant, fmt.Sprintf("every job released: %d releases of %d jobs", total, distinct)
	})
	took := time.Since(began)
	e.stop()
	total, distinct := e.released()
	jobs := float64(distinct)
	b.ReportMetric(e.passes()/jobs, "passes/job")
	b.ReportMetric((e.evalshaUS()-us0)/jobs, "redis-µs/job")
	b.ReportMetric(float64(total-distinct)/jobs, "re-releases/job")
	b.ReportMetric(took.Seconds(), "s-to-release-all")
}

func benchIdle(b *testing.B, n int, leases bool) {
	e := newBenchEnv(b, n, leases)
	e.start()
	redistest.Poll(b, 5*time.Second, "every shard owned", func() bool {
		owned := int32(0)
		for _, d := range e.ds {
			owned += d.owned.Load()
		}
		return owned >= 16
	})
	p0, us0, t0 := e.passes(), e.evalshaUS(), time.Now()
	redistest.Hold(b, time.Second, "nothing released while idle", func() bool {
		total, _ := e.released()
		return total == 0
	})
	secs := time.Since(t0).Seconds()
	b.ReportMetric((e.passes()-p0)/secs, "passes/s")
	b.ReportMetric((e.evalshaUS()-us0)/secs, "redis-µs/s")
	e.stop()
}

func ptrInt(v int64) *int64 { return &v }
