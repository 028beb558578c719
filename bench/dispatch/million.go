// The million part (issue #33): T tenants × J webhook jobs of 1 KiB bodies
// beside 1 000 tenants in the same run — Redis memory per queued job, Redis
// commands and CPU per delivered job, and what an idle tenant leaves once
// its retention has passed.

package main

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench/internal/stats"
	"github.com/sluicehq/sluice/internal/store"
)

// millionRun is one tenant count's figures.
type millionRun struct {
	tenants, jobs int
	enqueue       time.Duration // the whole backlog stored, Store.Enqueue
	listpack      int           // Redis's hash-max-listpack-value during the run
	memPerJob     float64       // used_memory growth over the enqueue of T × J ÷ T × J
	memMarginal   float64       // … of J more jobs on each of the first tenants (their state there already)
	extra         int           // those more jobs
	extraTenants  int           // on this many tenants
	record        int64         // MEMORY USAGE of one queued job record
	backlog       int64         // MEMORY USAGE of one tenant's backlog list
	tenantHash    int64         // MEMORY USAGE of one tenant hash
	calls, cpuUS  float64       // Redis commands and CPU µs per delivery, deliveries 10 %…90 %
	rate          float64       // deliveries/s inside that window
	drain         time.Duration // worker start → the last delivery
	retention     time.Duration // the run's retentions (-million-retention, -million-large-retention)
	windowEnd     time.Duration // worker start → the window's end (90 % of the deliveries)
	cmds          string        // the window's busiest commands
	residue       residue
}

// residue is what the run left in Redis after its retention.
type residue struct {
	after      time.Duration // last delivery → this reading
	keys       int           // keys naming a tenant or a job (t:, j:, idem:, sec:)
	entries    int64         // members of the shards' tenant index, name set, ready, delayed, leases, callbacks; policy overrides
	bytes      int64         // used_memory now − before the enqueue
	dataset    int64         // used_memory_dataset now − before the enqueue (without clients' buffers, scripts, …)
	shapes     string        // what the keys left are
	tenantKeys int           // tenants still holding a key
	// Redis commands and CPU µs a tenant of its removal: from the last
	// delivery until nothing is left, less the idle rate before the first
	// removal and the bench's own reads (SCAN)
	calls, cpuUS float64
	idle         string // the idle rate subtracted: commands/s, % of a core
}

// million is the million part: for each -million-listpack value (Redis's
// hash-max-listpack-value, set by CONFIG SET) the base count (the
// comparison's denominator), then -million-tenants at the last value. At
// the last value the base runs -million-base-runs times: its window is
// a few thousand deliveries, under a second, and its Redis CPU a job moved
// 79–112 µs between two runs of one build, so the ratios take the median
// of its windows' commands and CPU a job.
func million(ctx context.Context, e *env, t *table) error {
	const part = "10 million"
	o := e.o
	t.row(part, fmt.Sprintf("T tenants × %d webhook jobs (payload %d B), enqueued through Store.Enqueue "+
		"(the API's script; no HTTP), drained at rate 1000/s each, worker concurrency %d, retention %s (the large run: %s)",
		o.millionJobs, o.millionPayload, o.millionConc, o.millionRetention, o.millionLargeRetention), "Sluice", "", "÷ base row", "", "")
	for i, v := range o.millionListpack {
		last := i == len(o.millionListpack)-1
		runs := 1
		if last {
			runs = o.millionBaseRuns
		}
		var bases []millionRun
		for range runs {
			r, ok, err := millionAt(ctx, e, t, o.millionBase, v, o.millionRetention)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			if len(bases) == 0 {
				millionRows(e, t, part, r, r, false)
			}
			bases = append(bases, r)
		}
		if !last || len(bases) == 0 {
			continue
		}
		base := millionMedian(e, t, part, bases)
		if r, ok, err := millionAt(ctx, e, t, o.millionTenants, v, o.millionLargeRetention); err != nil {
			return err
		} else if ok {
			millionRows(e, t, part, r, base, true)
		}
	}
	t.gap()
	return nil
}

// millionAt is one run of n tenants at hash-max-listpack-value v with
// retentions ret; ok is false for a run that failed (noted in the table).
func millionAt(ctx context.Context, e *env, t *table, n, v int, ret time.Duration) (r millionRun, ok bool, err error) {
	if err := e.rdb.ConfigSet(ctx, "hash-max-listpack-value", strconv.Itoa(v)).Err(); err != nil {
		return r, false, fmt.Errorf("config set hash-max-listpack-value %d: %w", v, err)
	}
	if r, err = millionOne(ctx, e, n, ret); err != nil {
		t.note("million: %d tenants, hash-max-listpack-value %d: %v", n, v, err)
		return r, false, nil
	}
	r.listpack = v
	return r, true, nil
}

// millionMedian is the first of the base runs with the median of their
// commands and CPU a job and of their removals' a tenant, and adds a row
// listing each run's when there are several.
func millionMedian(e *env, t *table, part string, bases []millionRun) millionRun {
	base := bases[0]
	if len(bases) == 1 {
		return base
	}
	calls, cpu := make([]float64, len(bases)), make([]float64, len(bases))
	rmCalls, rmCPU := make([]float64, len(bases)), make([]float64, len(bases))
	for i, b := range bases {
		calls[i], cpu[i] = b.calls, b.cpuUS
		rmCalls[i], rmCPU[i] = b.residue.calls, b.residue.cpuUS
	}
	list := func(xs []float64) string {
		s := make([]string, len(xs))
		for i, x := range xs {
			s[i] = fmt.Sprintf("%.1f", x)
		}
		return strings.Join(s, ", ")
	}
	base.cpuUS, base.calls = stats.Median(cpu), stats.Median(calls)
	base.residue.cpuUS, base.residue.calls = stats.Median(rmCPU), stats.Median(rmCalls)
	row := fmt.Sprintf("Redis CPU µs %s (median %.1f); commands %s (median %.1f); the removals' a tenant: CPU µs %s (median %.1f), commands %s (median %.1f)",
		list(cpu), base.cpuUS, list(calls), base.calls, list(rmCPU), base.residue.cpuUS, list(rmCalls), base.residue.calls)
	t.row(part, fmt.Sprintf("%d tenants × %d (hash-max-listpack-value %d): a job in each of %d base windows and its removals, the ratios' denominator",
		base.tenants, base.jobs/max(1, base.tenants), base.listpack, len(bases)), row, "", "", "", "")
	e.logf("million: %d base windows: %s", len(bases), row)
	return base
}

// millionRows adds one run's rows; against says whether base is there to
// compare with.
func millionRows(e *env, t *table, part string, r, base millionRun, against bool) {
	name := fmt.Sprintf("%d tenants × %d (hash-max-listpack-value %d)", r.tenants, r.jobs/max(1, r.tenants), r.listpack)
	target, metCalls, metCPU := "", "", ""
	if against {
		target = fmt.Sprintf("≤ 1.2 × %d tenants", base.tenants)
		metCalls, metCPU = yes(r.calls <= 1.2*base.calls), yes(r.cpuUS <= 1.2*base.cpuUS)
	}
	t.row(part, name+": enqueued in", r.enqueue.Round(time.Millisecond).String(),
		"", "", "", "")
	t.row(part, name+": Redis used_memory / queued job, its tenant's state included", fmt.Sprintf("%.0f B", r.memPerJob), "",
		div(r.memPerJob, base.memPerJob), "", "")
	t.row(part, fmt.Sprintf("%s: … / job of %d more on %d tenants already holding %d each (after the drain)", name, r.extra, r.extraTenants, e.o.millionJobs),
		fmt.Sprintf("%.0f B", r.memMarginal), "", div(r.memMarginal, base.memMarginal), "≤ 1536 B", yes(r.memMarginal <= 1536))
	t.row(part, name+": MEMORY USAGE job record, backlog list, tenant hash",
		fmt.Sprintf("%d, %d, %d B", r.record, r.backlog, r.tenantHash), "", "", "", "")
	t.row(part, name+": Redis commands / job", fmt.Sprintf("%.1f", r.calls), "", div(r.calls, base.calls), target, metCalls)
	t.row(part, name+": Redis CPU µs / job", fmt.Sprintf("%.1f", r.cpuUS), "", div(r.cpuUS, base.cpuUS), target, metCPU)
	t.row(part, name+": deliveries/s in the window; drained in", fmt.Sprintf("%.0f; %s", r.rate, r.drain.Round(time.Second)),
		"", div(r.rate, base.rate), "", "")
	t.row(part, name+": busiest commands / job in the window", r.cmds, "", "", "", "")
	// A tenant is removed at the earliest its retention after the worker
	// started: a window that ends before holds none of the removals.
	held := "none (the window ended before the retention passed)"
	if r.windowEnd >= r.retention {
		held = "some: the window reached the retention (raise -million-large-retention)"
		e.logf("million: %d tenants: the window ended %s after the worker started, past the retention %s: it holds removals",
			r.tenants, r.windowEnd.Round(time.Second), r.retention)
	}
	t.row(part, fmt.Sprintf("%s: tenants' removals in the window (retention %s, window's end %s after the worker started)",
		name, r.retention, r.windowEnd.Round(time.Second)), held, "", "", "", "")
	s := r.residue
	t.row(part, fmt.Sprintf("%s: the removals after the retention: Redis commands, CPU µs / tenant (idle rate before them subtracted: %s)",
		name, s.idle), fmt.Sprintf("%.1f, %.1f", s.calls, s.cpuUS), "", div(s.cpuUS, base.residue.cpuUS), "", "")
	if against {
		all := func(x millionRun) float64 {
			return x.cpuUS + x.residue.cpuUS*float64(x.tenants)/float64(max(1, x.jobs))
		}
		t.row(part, name+": Redis CPU µs / job, the drain's and its share of the removals", fmt.Sprintf("%.1f", all(r)), "",
			div(all(r), all(base)), "", "")
	}
	t.row(part, fmt.Sprintf("%s: left %s after the last delivery: keys of tenants, jobs or hand-off tasks; members of the shards' sets (index, names, ready, delayed, leases, callbacks, overrides)", name, s.after.Round(time.Second)),
		fmt.Sprintf("%d, %d", s.keys, s.entries), "", "", "0, 0", yes(s.keys == 0 && s.entries == 0))
	t.row(part, name+": Redis bytes left per idle tenant: used_memory_dataset, used_memory (− before the enqueue)",
		fmt.Sprintf("%.1f, %.1f B", float64(s.dataset)/float64(max(1, r.tenants)), float64(s.bytes)/float64(max(1, r.tenants))),
		"", "", "≈ 0", "")
	if s.shapes != "" {
		t.row(part, name+": keys left by shape", s.shapes, "", "", "", "")
	}
}

// millionOne is one tenant count's run: the backlog stored with the
// throttler stopped, its memory read; the throttler and worker started and
// the drain measured; then the residue once the retention has passed.
func millionOne(ctx context.Context, e *env, n int, retention time.Duration) (millionRun, error) {
	o := e.o
	ret := retention.String()
	name := fmt.Sprintf("million-%d", n)
	sl, err := e.startSluice(ctx, setup{name: name, defaultRate: "1000/s", defaultConc: 100000, workerConc: o.millionConc,
		extra: fmt.Sprintf("retention: {succeeded: %s, canceled: %s, dead: %s, idempotency: %s}\n", ret, ret, ret, ret)})
	if err != nil {
		return millionRun{}, err
	}
	defer sl.stop()
	rec := e.rcv.startCounting(name)
	r := millionRun{tenants: n, jobs: n * o.millionJobs, retention: retention}
	// The throttler seeded the policies; stopped while the backlog is
	// stored, so that its passes neither compete nor drain it early.
	sl.throttler.stop(10 * time.Second)
	mem0, err := e.settledMemory(ctx)
	if err != nil {
		return r, err
	}
	data0 := e.infoMemory(ctx, "used_memory_dataset")
	if err := millionEnqueue(ctx, e, name, n, mem0, &r); err != nil {
		return r, err
	}
	e.logf("million: %d tenants × %d jobs enqueued in %s: %.0f B a job", n, o.millionJobs,
		r.enqueue.Round(time.Millisecond), r.memPerJob)
	if err := sl.startThrottler(ctx); err != nil {
		return r, err
	}
	start := time.Now()
	if err := sl.startWorker(ctx); err != nil {
		return r, err
	}
	if err := millionDrain(ctx, e, sl, rec, start, &r); err != nil {
		return r, err
	}
	if r.residue, err = millionResidue(ctx, e, n, retention, start, mem0, data0); err != nil {
		return r, err
	}
	err = millionMarginal(ctx, e, sl, name, &r)
	if extra := sl.problems(5); extra != "" {
		e.logf("million: log lines of the %d-tenant run:\n%s", n, extra)
	}
	return r, err
}

// millionItems is the run's jobs of one tenant: webhook jobs to the
// receiver whose payload is a JSON string of -million-payload bytes in all.
func millionItems(e *env, run string, n, payload int) ([]store.Item, error) {
	pad := strings.Repeat("x", max(0, payload-len(`{"pad":""}`)))
	return itemsOf(fmt.Appendf(nil, `{"type":"webhook","url":"%s","event":"bench.million","payload":{"pad":"%s"}}`,
		e.rcv.url(run), pad), n)
}

// millionEnqueue stores the run's backlog and reads the sample sizes.
func millionEnqueue(ctx context.Context, e *env, run string, n int, mem0 int64, r *millionRun) error {
	items, err := millionItems(e, run, e.o.millionJobs, e.o.millionPayload)
	if err != nil {
		return err
	}
	tenants := tenantNames("m", n)
	t0 := time.Now()
	ids, err := e.enqueueTenant(ctx, tenants[0], items)
	if err != nil {
		return err
	}
	if err := e.enqueueStore(ctx, tenants[1:], items, e.o.millionProducers); err != nil {
		return fmt.Errorf("enqueue %d × %d jobs: %w", n, len(items), err)
	}
	r.enqueue = time.Since(t0)
	mem1, err := e.settledMemory(ctx)
	if err != nil {
		return err
	}
	r.memPerJob = float64(mem1-mem0) / float64(r.jobs)
	jobKey, err := e.st.JobKey(ids[0])
	if err != nil {
		return err
	}
	for key, to := range map[string]*int64{jobKey: &r.record, e.st.BacklogKey(tenants[0]): &r.backlog,
		strings.TrimSuffix(e.st.BacklogKey(tenants[0]), ":q"): &r.tenantHash} {
		if *to, err = e.rdb.MemoryUsage(ctx, key, 0).Result(); err != nil {
			return fmt.Errorf("memory usage %s: %w", key, err)
		}
	}
	return nil
}

// millionDrain measures the drain: Redis's commands and CPU between the
// 10th and the 90th percent of the deliveries, and the time to the last.
func millionDrain(ctx context.Context, e *env, sl *sluice, rec *recording, start time.Time, r *millionRun) error {
	m := scaleMarker{e: e, sl: sl, rec: rec, deadline: start.Add(boundFor(r.jobs) + r.retention)}
	c0, s0, at0, err := m.mark(ctx, max(1, r.jobs/10), func() {})
	if err != nil {
		return err
	}
	c1, s1, at1, err := m.mark(ctx, max(2, r.jobs*9/10), func() {})
	if err != nil {
		return err
	}
	if !rec.waitDistinct(ctx, r.jobs, m.deadline) {
		_, got := rec.count()
		return fmt.Errorf("%d of %d deliveries before the deadline (%w)", got, r.jobs, errTimeout)
	}
	r.drain, r.windowEnd = time.Since(start), at1.Sub(start)
	d, jobs := s1.sub(s0), c1-c0
	r.calls, r.cpuUS = float64(d.calls)/float64(jobs), d.cpu*1e6/float64(jobs)
	r.rate = float64(jobs) / at1.Sub(at0).Seconds()
	r.cmds = d.top(6, jobs)
	e.logf("million: %d tenants: %.1f Redis commands, %.1f µs Redis CPU a job, %.0f jobs/s in the window; its commands:%s",
		r.tenants, r.calls, r.cpuUS, r.rate, d.top(16, jobs))
	return nil
}

// millionMarginal measures what a job costs beyond its tenant's state
// (hash, backlog list, index entries), which the first jobs of a tenant
// pay: with the throttler stopped (nothing dispatched), J jobs on each of
// up to 1 000 fresh tenants, then J more on each, used_memory read between.
// Run after the drain and the residue: these jobs stay queued.
func millionMarginal(ctx context.Context, e *env, sl *sluice, run string, r *millionRun) error {
	sl.throttler.stop(10 * time.Second)
	items, err := millionItems(e, run, e.o.millionJobs, e.o.millionPayload)
	if err != nil {
		return err
	}
	tenants := tenantNames("x", min(r.tenants, 1000))
	if err := e.enqueueStore(ctx, tenants, items, e.o.millionProducers); err != nil {
		return fmt.Errorf("enqueue %d × %d jobs: %w", len(tenants), len(items), err)
	}
	mem1, err := e.settledMemory(ctx)
	if err != nil {
		return err
	}
	if err := e.enqueueStore(ctx, tenants, items, e.o.millionProducers); err != nil {
		return fmt.Errorf("enqueue %d × %d more jobs: %w", len(tenants), len(items), err)
	}
	mem2, err := e.settledMemory(ctx)
	if err != nil {
		return err
	}
	r.extraTenants, r.extra = len(tenants), len(tenants)*len(items)
	r.memMarginal = float64(mem2-mem1) / float64(r.extra)
	return nil
}

// tenantKeys matches the keys that belong to a tenant or a job, and
// asynq's task keys (a hand-off batch's).
var tenantKeys = regexp.MustCompile(`^(` + regexp.QuoteMeta(prefix) + `:\{s\d+\}:(t|j|idem|sec):|asynq:\{[^}]+\}:t:)`)

// millionResidue waits until the retention ret has passed and nothing of
// the run's tenants is left, or -million-residue-wait more; then reads what
// is left: the keys of tenants and jobs, the index entries, and used_memory
// against mem0 (before the enqueue); and what the removals cost Redis. No
// tenant is removed before its retention after start (the worker's start):
// until then Redis does what an idle deployment does, whose rate is
// subtracted from the rest of the wait (removalCost).
func millionResidue(ctx context.Context, e *env, n int, ret time.Duration, start time.Time, mem0, data0 int64) (residue, error) {
	t0 := time.Now()
	st0, err := e.redisStats(ctx)
	if err != nil {
		return residue{}, err
	}
	idle0 := statsAt{st0, t0}
	idle1 := idle0 // the idle interval's end
	if idleEnd := start.Add(ret - time.Second); idleEnd.Sub(t0) >= 2*time.Second {
		if err := sleepCtx(ctx, time.Until(idleEnd)); err != nil {
			return residue{}, err
		}
		if idle1.st, err = e.redisStats(ctx); err != nil {
			return residue{}, err
		}
		idle1.at = time.Now()
	}
	if err := sleepCtx(ctx, time.Until(t0.Add(ret))); err != nil {
		return residue{}, err
	}
	s, reads, end, err := millionPoll(ctx, e, t0.Add(ret+e.o.millionResidueWait))
	if err != nil {
		return s, err
	}
	s.after = time.Since(t0)
	s.calls, s.cpuUS, s.idle = removalCost(idle0, idle1, end, reads, n)
	e.logf("million: %d tenants: the removals, a tenant: %.1f Redis commands, %.1f µs Redis CPU (idle %s subtracted); "+
		"their commands a tenant, idle passes included:%s", n, s.calls, s.cpuUS, s.idle, end.st.sub(idle1.st).sub(reads).top(12, n))
	mem, err := e.settledMemory(ctx)
	s.bytes = mem - mem0
	s.dataset = e.infoMemory(ctx, "used_memory_dataset") - data0
	e.logf("million: %d tenants: %d keys of %d tenants and %d index entries left after %s; %d B of used_memory, %d B of its dataset",
		n, s.keys, s.tenantKeys, s.entries, s.after.Round(time.Second), s.bytes, s.dataset)
	return s, err
}

// statsAt is Redis's counters read at a time.
type statsAt struct {
	st redisStats
	at time.Time
}

// millionPoll reads what is left of the run's tenants each second until
// nothing is or the deadline has passed: s's keys and entries; what the
// reads that found something cost Redis; Redis's counters before the last.
func millionPoll(ctx context.Context, e *env, deadline time.Time) (residue, redisStats, statsAt, error) {
	var (
		s     residue
		reads redisStats
		end   statsAt
		err   error
	)
	for {
		if end.st, err = e.redisStats(ctx); err != nil {
			return s, reads, end, err
		}
		end.at = time.Now()
		var ks keyScan
		if ks, err = e.scanKeys(ctx); err != nil {
			return s, reads, end, err
		}
		if s.entries, err = e.indexEntries(ctx); err != nil {
			return s, reads, end, err
		}
		s.keys, s.tenantKeys, s.shapes = tenantResidue(ks)
		if (s.keys == 0 && s.entries == 0) || time.Now().After(deadline) {
			return s, reads, end, nil
		}
		var after redisStats
		if after, err = e.redisStats(ctx); err != nil {
			return s, reads, end, err
		}
		reads = reads.add("", after.sub(end.st))
		if err := sleepCtx(ctx, time.Second); err != nil {
			return s, reads, end, err
		}
	}
}

// removalCost is the Redis commands and CPU µs a tenant of n tenants'
// removals: Redis's counters from idle1 (the end of an idle interval begun
// at idle0, before any removal) to end (when nothing was left), less the
// benchmark's reads meanwhile and the idle interval's rate over the same
// time; and that rate as text ("none measured" for an empty interval).
func removalCost(idle0, idle1, end statsAt, reads redisStats, n int) (calls, cpuUS float64, idle string) {
	d := end.st.sub(idle1.st).sub(reads)
	c, cpu := float64(d.calls), d.cpu
	idle = "none measured"
	if span := idle1.at.Sub(idle0.at).Seconds(); span > 0 {
		rate, wait := idle1.st.sub(idle0.st), end.at.Sub(idle1.at).Seconds()
		c -= float64(rate.calls) / span * wait
		cpu -= rate.cpu / span * wait
		idle = fmt.Sprintf("%.0f commands/s, %.2f %% of a core, over %s", float64(rate.calls)/span, 100*rate.cpu/span,
			idle1.at.Sub(idle0.at).Round(time.Second))
	}
	return c / float64(n), cpu * 1e6 / float64(n), idle
}

// tenantResidue counts the keys of tenants and jobs in ks, the tenants
// they name, and their shapes.
func tenantResidue(ks keyScan) (keys, tenants int, shapes string) {
	shape := regexp.MustCompile(`:(t|j|idem|sec):[^:]+`)
	tag := regexp.MustCompile(`\{(s\d+|[^}]+:h\d+)\}`)
	count, ts := map[string]int{}, map[string]bool{}
	for k := range ks {
		if !tenantKeys.MatchString(k) {
			continue
		}
		keys++
		count[shape.ReplaceAllString(tag.ReplaceAllString(k, "{…}"), ":$1:…")]++
		if m := tenantOf.FindStringSubmatch(k); m != nil {
			ts[m[1]] = true
		}
	}
	var out []string
	for s, c := range count {
		out = append(out, fmt.Sprintf("%s ×%d", s, c))
	}
	sort.Strings(out)
	return keys, len(ts), strings.Join(out, ", ")
}

// indexEntries is the members of every shard's tenant index and name set,
// and of its other sets that name tenants or jobs: ready, delayed,
// leases, callbacks, and the policy hash's overrides (fields beyond "*").
func (e *env) indexEntries(ctx context.Context) (int64, error) {
	pipe := e.rdb.Pipeline()
	var fields []*redis.StringSliceCmd
	for s := range shards {
		base := fmt.Sprintf("%s:{s%d}:", prefix, s)
		for _, k := range []string{"tenants", "tenant_names", "ready", "delayed", "leases", "cb"} {
			pipe.ZCard(ctx, base+k)
		}
		fields = append(fields, pipe.HKeys(ctx, base+"policy"))
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("index sizes: %w", err)
	}
	var sum int64
	for _, c := range cmds {
		if v, ok := c.(*redis.IntCmd); ok {
			sum += v.Val()
		}
	}
	for _, f := range fields {
		for _, name := range f.Val() {
			if name != "*" && !strings.HasPrefix(name, "#") { // the defaults and their version
				sum++
			}
		}
	}
	return sum, nil
}

// settledMemory is used_memory once two readings 200 ms apart agree within
// 64 KiB (at most 5 s), the allocator's lazy frees settled.
func (e *env) settledMemory(ctx context.Context) (int64, error) {
	prev := e.usedMemory(ctx)
	for range 25 {
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return 0, err
		}
		cur := e.usedMemory(ctx)
		if d := cur - prev; d < 64<<10 && d > -64<<10 {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}

// infoMemory is one integer field of Redis's INFO memory (0 when unread).
func (e *env) infoMemory(ctx context.Context, field string) int64 {
	info, err := e.rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
