// Command benchenqueue measures Sluice's enqueue path (docs/design.md §2.1) side by
// side in one run: enqueue requests/s and jobs/s through the HTTP API for
// single jobs and for batches, the same enqueue script called directly with
// go-redis (no HTTP), and one EVALSHA of a trivial script per request as the
// Redis ceiling, all at the same number of concurrent keep-alive producers,
// spread over many tenants. Then it measures Redis memory per queued job with
// a ~1 KiB payload. It prints one table.
//
// Run it through scripts/bench-enqueue, which starts a private redis-server
// and a throttler configured so that neither admission nor the API's own
// limiter refuses, and adds redis-benchmark's EVALSHA ceiling.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// options are the command-line flags.
type options struct {
	api       string        // throttler base URL
	key       string        // bearer token
	redisURL  string        // the throttler's Redis
	prefix    string        // the throttler's key prefix (redis.prefix)
	shards    int           // the throttler's shards (redis.shards)
	duration  time.Duration // measuring time per throughput cell
	producers int           // concurrent producers (keep-alive clients)
	tenants   int           // tenants the load is spread over
	batch     int           // jobs per batch request
	maxJobs   int64         // bound on the jobs one cell may enqueue
	memJobs   int           // jobs enqueued for the memory cell
	pad       int           // characters of payload padding (~1 KiB)
	ceiling   string        // redis-benchmark's EVALSHA result: "rps p50ms p99ms"
	pids      string        // "redis=PID,throttler=PID" for CPU accounting
	only      string        // run only the rows whose name contains this
	skipMem   bool          // skip the memory measurement
}

func main() {
	var o options
	flag.StringVar(&o.api, "api", "http://127.0.0.1:8080", "throttler base URL")
	flag.StringVar(&o.key, "key", "bench-key", "API key (bearer token); needs every tenant")
	flag.StringVar(&o.redisURL, "redis", "redis://127.0.0.1:6379/0", "the throttler's Redis (use a private instance)")
	flag.StringVar(&o.prefix, "prefix", "sluice", "the throttler's key prefix")
	flag.IntVar(&o.shards, "shards", 16, "the throttler's number of shards")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "measuring time per throughput cell")
	flag.IntVar(&o.producers, "producers", 64, "concurrent producers")
	flag.IntVar(&o.tenants, "tenants", 100, "tenants the load is spread over")
	flag.IntVar(&o.batch, "batch", 100, "jobs per batch request")
	flag.Int64Var(&o.maxJobs, "max-jobs", 1_000_000, "most jobs one throughput cell enqueues (bounds Redis memory)")
	flag.IntVar(&o.memJobs, "mem-jobs", 20_000, "jobs enqueued for the memory measurement")
	flag.IntVar(&o.pad, "pad", 1000, "payload padding in characters")
	flag.StringVar(&o.ceiling, "ceiling", "", `redis-benchmark EVALSHA result, "rps p50ms p99ms"`)
	flag.StringVar(&o.pids, "pids", "", "processes to account CPU to, e.g. redis=123,throttler=456")
	flag.StringVar(&o.only, "only", "", "run only the throughput rows whose name contains this")
	flag.BoolVar(&o.skipMem, "skip-memory", false, "skip the memory measurement")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "benchenqueue:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.producers < 1 || o.tenants < 1 || o.batch < 1 || o.batch > 1000 || o.duration <= 0 ||
		o.memJobs < o.batch*memTenants || o.memJobs%o.batch != 0 {
		return fmt.Errorf("bad flags: want producers, tenants ≥ 1, batch 1…1000, duration > 0, " +
			"mem-jobs a multiple of batch and at least 10 batches")
	}
	env, err := newEnv(ctx, o)
	if err != nil {
		return err
	}
	defer env.close()

	// Memory first, on a quiet Redis, with tenants of its own. A failure is
	// reported in the table; the throughput rows still run.
	mem := memResult{err: errors.New("skipped")}
	if !o.skipMem {
		if mem, err = measureMemory(ctx, env); err != nil {
			mem.err = err
		}
	}
	var rows []row
	for _, c := range env.cells() {
		if !strings.Contains(c.name, o.only) {
			continue
		}
		st, err := measure(ctx, env, c)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		rows = append(rows, row{cell: c, stats: st})
	}
	printTable(os.Stdout, o, rows, parseCeiling(o.ceiling), mem)
	return nil
}
