package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/internal/store"
)

// idleTarget is issue 13's bound on the Redis commands per second of one
// idle throttler and one idle worker together; wakeTarget its bound on how
// late a job leaves after idle.
const (
	idleTarget = 300
	wakeTarget = 5 * time.Millisecond
)

// wakeDelay is the delay of the delayed wake-up jobs.
const wakeDelay = time.Second

// idleRun is one system's idle measurement and its wake-ups after idle.
type idleRun struct {
	redis   redisStats // over the window
	window  time.Duration
	cpu     cpuShares
	first   wakeups // the job sent before the idle window, the first since start
	now     wakeups // jobs due at once
	delayed wakeups // jobs delayed by wakeDelay
}

// commandsPerSecond is the Redis commands per second over the window (the
// measurement's own INFO included: one call).
func (r idleRun) commandsPerSecond() float64 {
	if r.window <= 0 {
		return 0
	}
	return float64(r.redis.calls) / r.window.Seconds()
}

// wakeups are the receiver arrivals of jobs each enqueued after ≥ 1 s of
// idle: arrival − slot (the slot of the job's release, Sluice only) and
// arrival − due time (the enqueue for a job due at once, else its run_at).
type wakeups struct {
	slot, due []time.Duration
}

// idle is part 7: what one throttler and one worker cost Redis with no jobs
// — commands per second over a window after settling — beside one idle bare
// asynq server of the same TaskCheckInterval and concurrency; then, from
// idle, jobs due at once and jobs delayed by wakeDelay, one at a time and
// e.o.idleGap apart: how late each reaches the receiver. Each system sends
// one job due at once before its idle window, the first since it started:
// it dials its connections and loads asynq's scripts (NOSCRIPT, then EVAL),
// a once-per-process cost the wake-up rows leave out; its figures are a row
// of their own.
func idle(ctx context.Context, e *env, t *table) error {
	s, err := idleSluice(ctx, e)
	if err != nil {
		t.note("idle: Sluice: %v", err)
	}
	peer, err := idlePeer(ctx, e)
	if err != nil {
		t.note("idle: bare asynq: %v", err)
	}
	idleRows(e, t, s, peer)
	t.note("idle: a wake-up's slot is set by the pass that released the job; enqueue (or run_at) → arrival adds the wait " +
		"for that pass. asynq's due time: its enqueue, or its whole-second ProcessAt (forwarded every 5 s by default).")
	t.note("idle: Redis commands/s by command, Sluice:%s", s.redis.perSecond(8, s.window))
	t.note("idle: Redis commands/s by command, bare asynq:%s", peer.redis.perSecond(8, peer.window))
	return nil
}

func idleRows(e *env, t *table, s, peer idleRun) {
	const part = "7 idle"
	t.row(part, fmt.Sprintf("no jobs: settle %s, then a %s window; worker concurrency %d, TaskCheckInterval %s",
		e.o.idleSettle, e.o.idleWindow, e.o.concurrency, e.o.tci),
		"Sluice: 1 throttler + 1 worker", "bare asynq: 1 server, 1 queue, asynq's defaults otherwise", "", "", "")
	cps, peerCPS := s.commandsPerSecond(), peer.commandsPerSecond()
	t.row(part, "Redis commands/s, idle", orNA(s.window > 0, "%.0f", cps), orNA(peer.window > 0, "%.0f", peerCPS),
		div(cps, peerCPS), fmt.Sprintf("≤ %d", idleTarget), yes(s.window > 0 && cps <= idleTarget))
	t.row(part, "CPU, % of one core, idle", s.cpu.format(cpuNames...), peer.cpu.format(cpuNames...), "", "", "")
	first := "the first job since start, sent before the idle window (not in the rows below)"
	t.row(part, first+": slot → arrival; enqueue → arrival", meanMax(s.first.slot)+"; "+meanMax(s.first.due),
		"-; "+meanMax(peer.first.due), "", "", "")
	n := e.o.idleWakeups
	target := "max ≤ " + msf(wakeTarget)
	met := func(l []time.Duration) string { return yes(len(l) == n && slices.Max(l) <= wakeTarget) }
	now := fmt.Sprintf("wake-up from idle, due at once (%d jobs, ≥ %s apart)", n, e.o.idleGap)
	t.row(part, now+": slot → arrival", meanMax(s.now.slot), "-", "", target, met(s.now.slot))
	t.row(part, now+": enqueue → arrival", meanMax(s.now.due), meanMax(peer.now.due), "", target, met(s.now.due))
	later := fmt.Sprintf("wake-up from idle, delayed %s (%d jobs)", wakeDelay, n)
	t.row(part, later+": slot → arrival", meanMax(s.delayed.slot), "-", "", target, met(s.delayed.slot))
	t.row(part, later+": due (run_at) → arrival", meanMax(s.delayed.due), meanMax(peer.delayed.due), "", target, met(s.delayed.due))
	t.gap()
}

// idleSluice starts a throttler and a worker with no jobs, measures them
// idle, then runs the wake-ups.
func idleSluice(ctx context.Context, e *env) (idleRun, error) {
	sl, err := e.startSluice(ctx, setup{name: "idle", defaultRate: "100/s", defaultConc: 100,
		workerConc: e.o.concurrency, startWorker: true})
	if err != nil {
		return idleRun{}, err
	}
	defer sl.stop()
	first, err := firstSluiceJob(ctx, e, sl)
	if err != nil {
		return idleRun{}, err
	}
	res, err := idleWindow(ctx, e, sl)
	res.first = first
	if err != nil {
		return res, err
	}
	const run = "idle-wake"
	rec := e.rcv.start(run)
	delayed := map[string]bool{}
	for i := range 2 * e.o.idleWakeups {
		if err := sleepCtx(ctx, e.o.idleGap); err != nil {
			return res, err
		}
		body, late := e.webhookJob(run, i), i%2 == 1
		if late {
			body = withDelay(body, wakeDelay)
		}
		ids, err := sl.enqueueHTTP(ctx, "wake", [][]byte{body})
		if err != nil {
			return res, err
		}
		delayed[ids[0]] = late
		if !rec.waitDistinct(ctx, i+1, time.Now().Add(wakeDelay+10*time.Second)) {
			return res, fmt.Errorf("wake-up job %s (delayed: %v) did not arrive (%w); diagnosis:\n%s",
				ids[0], late, errTimeout, sl.diagnose(ctx, []string{"wake"}, ids))
		}
	}
	res.now, res.delayed, err = wakeLatencies(ctx, e, rec.snapshot(), delayed)
	e.logf("idle: wake-ups, slot → arrival, in order: due at once %v; delayed %v", roundAll(res.now.slot), roundAll(res.delayed.slot))
	if extra := sl.problems(5); extra != "" {
		e.logf("idle: log lines of the Sluice run:\n%s", extra)
	}
	return res, err
}

// firstSluiceJob sends sl's first job, due at once, and measures it as a
// wake-up.
func firstSluiceJob(ctx context.Context, e *env, sl *sluice) (wakeups, error) {
	rec, err := oneJob(ctx, e, sl, "wake", "idle-first", 10*time.Second)
	if err != nil {
		return wakeups{}, err
	}
	first, _, err := wakeLatencies(ctx, e, rec.snapshot(), nil)
	return first, err
}

// idleWindow waits e.o.idleSettle, then measures Redis's counters and the
// CPU of Redis, this program and sl's processes (sl may be nil) over
// e.o.idleWindow.
func idleWindow(ctx context.Context, e *env, sl *sluice) (idleRun, error) {
	if err := sleepCtx(ctx, e.o.idleSettle); err != nil {
		return idleRun{}, err
	}
	meter := e.cpuMeter(ctx, sl)
	rs0, err := e.redisStats(ctx)
	if err != nil {
		return idleRun{}, err
	}
	start := time.Now()
	if err := sleepCtx(ctx, e.o.idleWindow); err != nil {
		return idleRun{}, err
	}
	rs1, err := e.redisStats(ctx)
	window := time.Since(start)
	if err != nil {
		return idleRun{}, err
	}
	return idleRun{redis: rs1.sub(rs0), window: window, cpu: meter.stop()}, nil
}

// withDelay adds the field delay to a job body (a JSON object).
func withDelay(body []byte, d time.Duration) []byte {
	body = body[:len(body)-1] // the closing brace
	return fmt.Appendf(body, `,"delay":%q}`, d.String())
}

// wakeLatencies splits the first arrival of each job by delayed (job id →
// delayed) and measures it against its job's record: the slot of its
// release, and its due time (run_at when it has one, else its enqueue).
func wakeLatencies(ctx context.Context, e *env, arr []arrival, delayed map[string]bool) (now, later wakeups, err error) {
	err = firstArrivals(ctx, e, arr, func(a arrival, j store.Job) {
		due, w := j.Created, &now
		if delayed[a.id] {
			due, w = j.RunAt, &later
		}
		w.slot = append(w.slot, a.at.Sub(j.Slot))
		w.due = append(w.due, a.at.Sub(due))
	})
	return now, later, err
}

// idlePeer runs one bare asynq server with no tasks, measures it idle, then
// enqueues tasks one at a time from idle: due at once, and scheduled (asynq
// schedules in whole seconds: at the second boundary 1–2 s ahead, which is
// then the task's due time).
func idlePeer(ctx context.Context, e *env) (idleRun, error) {
	if err := e.flush(ctx); err != nil {
		return idleRun{}, err
	}
	const run = "idle-wake-asynq"
	rec := e.rcv.start(run)
	post := newPoster(e.rcv.url(run), e.o.concurrency)
	defer post.client.CloseIdleConnections()
	srv := asynq.NewServerFromRedisClient(e.rdb, peerConfig(e, e.o.concurrency))
	if err := srv.Start(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		return post.post(ctx, id)
	})); err != nil {
		return idleRun{}, fmt.Errorf("start the asynq server: %w", err)
	}
	defer srv.Shutdown()
	client := asynq.NewClientFromRedisClient(e.rdb)
	// The first task since start (see idle), before the idle window.
	at := time.Now()
	info, err := client.EnqueueContext(ctx, asynq.NewTask(peerTaskType, []byte("first")), asynq.Queue(peerQueue))
	if err != nil {
		return idleRun{}, fmt.Errorf("enqueue the first task: %w", err)
	}
	if !rec.waitDistinct(ctx, 1, time.Now().Add(10*time.Second)) {
		return idleRun{}, fmt.Errorf("the first task %s did not arrive: %w", info.ID, errTimeout)
	}
	firstID, firstAt := info.ID, rec.snapshot()[0].at
	res, err := idleWindow(ctx, e, nil)
	res.first.due = []time.Duration{firstAt.Sub(at)}
	if err != nil {
		return res, err
	}
	return res, idlePeerWakeups(ctx, e, client, rec, firstID, &res)
}

// idlePeerWakeups enqueues the peer's wake-up tasks one at a time, each
// after -idle-gap of idle, due at once and delayed by turns, and adds
// their due → arrival times to res (the first task, firstID, left out).
func idlePeerWakeups(ctx context.Context, e *env, client *asynq.Client, rec *recording, firstID string, res *idleRun) error {
	due := map[string]time.Time{}
	delayed := map[string]bool{}
	for i := range 2 * e.o.idleWakeups {
		if err := sleepCtx(ctx, e.o.idleGap); err != nil {
			return err
		}
		at, opts := time.Now(), []asynq.Option{asynq.Queue(peerQueue)}
		if i%2 == 1 {
			at = at.Add(2 * wakeDelay).Truncate(time.Second)
			opts = append(opts, asynq.ProcessAt(at))
		}
		info, err := client.EnqueueContext(ctx, asynq.NewTask(peerTaskType, []byte("wake")), opts...)
		if err != nil {
			return fmt.Errorf("enqueue a wake-up task: %w", err)
		}
		due[info.ID], delayed[info.ID] = at, i%2 == 1
		// asynq forwards scheduled tasks every 5 s (its default): wait for that.
		if !rec.waitDistinct(ctx, i+2, time.Now().Add(2*wakeDelay+10*time.Second)) {
			return fmt.Errorf("wake-up task %s did not arrive: %w", info.ID, errTimeout)
		}
	}
	for _, a := range rec.snapshot() {
		if a.id == firstID {
			continue
		}
		w := &res.now
		if delayed[a.id] {
			w = &res.delayed
		}
		w.due = append(w.due, a.at.Sub(due[a.id]))
	}
	return nil
}

// perSecond lists the n commands with the most calls, per second of d:
// " name calls/s;".
func (a redisStats) perSecond(n int, d time.Duration) string {
	if d <= 0 {
		return " n/a"
	}
	names := slices.SortedFunc(maps.Keys(a.cmds), func(x, y string) int {
		return cmp.Or(cmp.Compare(a.cmds[y].calls, a.cmds[x].calls), cmp.Compare(x, y))
	})
	var b strings.Builder
	for _, name := range names[:min(n, len(names))] {
		fmt.Fprintf(&b, " %s %.1f/s;", name, float64(a.cmds[name].calls)/d.Seconds())
	}
	return b.String()
}

// meanMax is "mean X ms, max Y ms (n)" of ds, "n/a" when empty.
func meanMax(ds []time.Duration) string {
	if len(ds) == 0 {
		return "n/a"
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return fmt.Sprintf("mean %s, max %s (%d)", msf(sum/time.Duration(len(ds))), msf(slices.Max(ds)), len(ds))
}

// orNA formats args when ok, else "n/a".
func orNA(ok bool, format string, args ...any) string {
	if !ok {
		return "n/a"
	}
	return fmt.Sprintf(format, args...)
}

// roundAll rounds each duration to 10 µs, for a log line.
func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(10 * time.Microsecond)
	}
	return out
}
