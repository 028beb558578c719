package bucket

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// benchLimits admit nearly every call (the costlier, writing path).
var benchLimits = map[Algorithm]Limit{
	FixedWindow:   {Algorithm: FixedWindow, Limit: 1_000_000, Window: time.Second},
	SlidingLog:    {Algorithm: SlidingLog, Limit: 1_000_000, Window: time.Second},
	SlidingWindow: {Algorithm: SlidingWindow, Limit: 1_000_000, Window: time.Second},
	TokenBucket:   {Algorithm: TokenBucket, Rate: Rate{1_000_000, time.Second}, Burst: 1000},
	GCRA:          {Algorithm: GCRA, Rate: Rate{1_000_000, time.Second}, Burst: 1000},
}

// benchKeys spread the calls over 1000 keys.
var benchKeys = func() []string {
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	return keys
}()

// BenchmarkAllow measures Limiter.Allow (Redis' clock, coalesced) per
// algorithm at 1, 16 and 64 concurrent callers, in decisions/s.
func BenchmarkAllow(b *testing.B) {
	for _, a := range Algorithms {
		for _, g := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/callers=%d", a, g), func(b *testing.B) {
				rdb, prefix := redistest.New(b)
				lim, err := NewLimiter(rdb, prefix, "bench", benchLimits[a])
				if err != nil {
					b.Fatal(err)
				}
				defer lim.Close()
				ctx := context.Background()
				if _, err := lim.Allow(ctx, "warm-up", 1); err != nil { // loads the script
					b.Fatal(err)
				}
				p0 := lim.batcher.pipelines.Load()
				concurrently(b, g, func(i int) error {
					_, err := lim.Allow(ctx, benchKeys[i%len(benchKeys)], 1)
					return err
				})
				b.ReportMetric(float64(b.N)/float64(lim.batcher.pipelines.Load()-p0), "calls/pipeline")
			})
		}
	}
}

// BenchmarkAllowDirectEvalSha is the baseline: the GCRA script as one plain
// EVALSHA per call, no coalescing.
func BenchmarkAllowDirectEvalSha(b *testing.B) {
	s := scripts[GCRA]
	for _, g := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("callers=%d", g), func(b *testing.B) {
			rdb, prefix := redistest.New(b)
			ctx := context.Background()
			if err := rdb.ScriptLoad(ctx, s.Source()).Err(); err != nil {
				b.Fatal(err)
			}
			concurrently(b, g, func(i int) error {
				key := redisKey(prefix, "bench", benchKeys[i%len(benchKeys)])
				return rdb.EvalSha(ctx, s.Hash(), []string{key}, 0, 1, 1, 1000).Err()
			})
		})
	}
}

// concurrently runs op b.N times from g goroutines and reports decisions/s.
func concurrently(b *testing.B, g int, op func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	began := time.Now()
	for range g {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if err := op(int(i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(began).Seconds(), "decisions/s")
}
