package worker

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/procstat"
)

// spinEach is the wait every delivery did before the scheduler, kept as
// the benchmark's reference: a timer per waiter until spin before at, then
// the waiter spins itself.
func spinEach(ctx context.Context, at time.Time, spin time.Duration) error {
	if d := time.Until(at) - spin; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	for time.Now().Before(at) {
		if err := ctx.Err(); err != nil {
			return err
		}
		runtime.Gosched()
	}
	return ctx.Err()
}

// BenchmarkWaits compares the scheduler with a timer and spin per waiter
// on delivery-like loads: waits at 1 000/s (one slot per ms) and at
// 4 000/s (one per 250 µs, the dispatcher's ClaimSpacing), 3 s of each,
// each wait started 100 ms (D) before its instant. It reports the release
// error (time.Now() on return − the instant) p50/p99/max and the process
// CPU per wait (getrusage, user + system). Run it alone:
//
//	go test -run '^$' -bench Waits -benchtime 1x ./internal/worker/
func BenchmarkWaits(b *testing.B) {
	s := newScheduler(SpinDefault)
	for _, gap := range []time.Duration{time.Millisecond, 250 * time.Microsecond} {
		for _, tc := range []struct {
			name string
			wait func(ctx context.Context, at time.Time) error
		}{
			{"spin-each", func(ctx context.Context, at time.Time) error { return spinEach(ctx, at, SpinDefault) }},
			{"scheduler", s.Wait},
		} {
			b.Run(fmt.Sprintf("%s/gap-%s", tc.name, gap), func(b *testing.B) {
				for range b.N {
					errs, cpu := waitLoad(tc.wait, int(3*time.Second/gap), gap, 100*time.Millisecond)
					slices.Sort(errs)
					b.ReportMetric(float64(errs[len(errs)/2].Microseconds()), "p50-µs")
					b.ReportMetric(float64(errs[len(errs)*99/100].Microseconds()), "p99-µs")
					b.ReportMetric(float64(errs[len(errs)-1].Microseconds()), "max-µs")
					b.ReportMetric(float64(cpu.Microseconds())/float64(len(errs)), "cpu-µs/wait")
				}
			})
		}
	}
}

// waitLoad runs n waits at instants gap apart, each started lead before its
// instant, and returns their release errors and the process CPU used.
func waitLoad(wait func(context.Context, time.Time) error, n int, gap, lead time.Duration) ([]time.Duration, time.Duration) {
	errs := make([]time.Duration, n)
	base := time.Now().Add(lead)
	cpu0 := procstat.SelfCPU()
	var wg sync.WaitGroup
	// The dispatcher's releases, each lead before its instant: at every
	// tick, every wait whose release time has come starts.
	tick := time.NewTicker(min(gap, time.Millisecond))
	defer tick.Stop()
	for i := 0; i < n; <-tick.C {
		for ; i < n && !time.Now().Before(base.Add(time.Duration(i)*gap-lead)); i++ {
			k, at := i, base.Add(time.Duration(i)*gap)
			wg.Go(func() {
				_ = wait(context.Background(), at)
				errs[k] = time.Since(at)
			})
		}
	}
	wg.Wait()
	return errs, procstat.SelfCPU() - cpu0
}
