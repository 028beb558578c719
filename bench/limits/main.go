// Command benchlimits measures rate-limit decisions per second of every
// Sluice algorithm side by side with github.com/go-redis/redis_rate/v10
// (AllowN) and a plain go-redis INCR, on the same Redis, in one run, at
// several numbers of concurrent callers. It prints one table with ratios to
// redis_rate. Run it through scripts/bench-limits, which starts a private
// redis-server and adds redis-benchmark's INCR ceiling.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/bucket"
)

func main() {
	url := flag.String("redis", "redis://127.0.0.1:6390/0", "Redis URL (use a private instance)")
	dur := flag.Duration("duration", 2*time.Second, "measuring time per cell")
	conc := flag.String("callers", "1,16,64", "concurrent callers, comma-separated")
	ceiling := flag.String("ceiling", "", "redis-benchmark INCR results per caller count, e.g. 1=40000,16=90000")
	flag.Parse()
	if err := run(*url, *dur, *conc, *ceiling); err != nil {
		fmt.Fprintln(os.Stderr, "benchlimits:", err)
		os.Exit(1)
	}
}

// subject is one thing measured: decide(ctx, key) makes one decision.
type subject struct {
	name   string
	decide func(ctx context.Context, key string) error
}

func run(url string, dur time.Duration, concList, ceilingList string) error {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	opt.PoolSize = 128
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ping %s: %w", url, err)
	}
	subjects, closeAll, err := buildSubjects(rdb)
	if err != nil {
		return err
	}
	defer closeAll()
	ceilings := parseCeilings(ceilingList)
	var callers []int
	for _, s := range strings.Split(concList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("bad caller count %q", s)
		}
		callers = append(callers, n)
	}

	results := map[string]map[int]float64{}
	for _, s := range subjects {
		results[s.name] = map[int]float64{}
		for _, n := range callers {
			rate, err := measure(ctx, s, n, dur)
			if err != nil {
				return fmt.Errorf("%s at %d callers: %w", s.name, n, err)
			}
			results[s.name][n] = rate
		}
	}
	printTable(subjects, callers, results, ceilings)
	return nil
}

func buildSubjects(rdb *redis.Client) ([]subject, func(), error) {
	prefix := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	rr := redis_rate.NewLimiter(rdb)
	rrLimit := redis_rate.Limit{Rate: 1_000_000, Burst: 1_000_000, Period: time.Second}
	subjects := []subject{{
		name: "redis_rate AllowN",
		decide: func(ctx context.Context, key string) error {
			_, err := rr.AllowN(ctx, prefix+":rr:"+key, rrLimit, 1)
			return err
		},
	}, {
		name: "go-redis INCR",
		decide: func(ctx context.Context, key string) error {
			return rdb.Incr(ctx, prefix+":incr:"+key).Err()
		},
	}}
	var limiters []*bucket.Limiter
	for _, alg := range bucket.Algorithms {
		l := bucket.Limit{Algorithm: alg, Rate: bucket.Rate{Tokens: 1_000_000, Per: time.Second}, Burst: 1_000_000}
		if alg.Windowed() {
			l = bucket.Limit{Algorithm: alg, Limit: 1_000_000, Window: time.Second}
		}
		if alg == bucket.SlidingLog { // memory grows with the limit: keep it modest
			l.Limit = 100_000
		}
		lim, err := bucket.NewLimiter(rdb, prefix, string(alg), l)
		if err != nil {
			return nil, nil, err
		}
		limiters = append(limiters, lim)
		subjects = append(subjects, subject{
			name: "sluice " + string(alg),
			decide: func(ctx context.Context, key string) error {
				_, err := lim.Allow(ctx, key, 1)
				return err
			},
		})
	}
	return subjects, func() {
		for _, l := range limiters {
			_ = l.Close()
		}
	}, nil
}

// measure runs n callers deciding on 1000 keys for dur and returns decisions/s.
func measure(ctx context.Context, s subject, n int, dur time.Duration) (float64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var done atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	stop := time.Now().Add(dur)
	start := time.Now()
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				if err := s.decide(ctx, strconv.Itoa((g*7919+i)%1000)); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	return float64(done.Load()) / time.Since(start).Seconds(), nil
}

func parseCeilings(s string) map[int]float64 {
	out := map[int]float64{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			continue
		}
		n, err1 := strconv.Atoi(k)
		f, err2 := strconv.ParseFloat(v, 64)
		if err1 == nil && err2 == nil {
			out[n] = f
		}
	}
	return out
}

func printTable(subjects []subject, callers []int, results map[string]map[int]float64, ceilings map[int]float64) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "decisions/s\t")
	for _, n := range callers {
		fmt.Fprintf(tw, "%d callers\t× redis_rate\t", n)
	}
	fmt.Fprintln(tw)
	base := results[subjects[0].name]
	row := func(name string, get func(n int) (float64, bool)) {
		fmt.Fprintf(tw, "%s\t", name)
		for _, n := range callers {
			v, ok := get(n)
			if !ok {
				fmt.Fprint(tw, "-\t-\t")
				continue
			}
			fmt.Fprintf(tw, "%.0f\t%.2f\t", v, v/base[n])
		}
		fmt.Fprintln(tw)
	}
	for _, s := range subjects {
		row(s.name, func(n int) (float64, bool) { v, ok := results[s.name][n]; return v, ok })
	}
	if len(ceilings) > 0 {
		row("redis-benchmark INCR (ceiling)", func(n int) (float64, bool) { v, ok := ceilings[n]; return v, ok })
	}
	tw.Flush()
}
