package store

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/wire"
)

// BenchmarkDrain measures the Redis CPU a delivered job costs while a
// backlog drains, four ways in one shape, on one Redis (scripts/bench-drain
// runs the parts in turn and prints them side by side, as ratios; issue
// #33's target is Sluice ≤ 1.0 × bare asynq). No HTTP, no throttler or
// worker process: Redis is measured alone, so that a change of the scripts
// shows, where scripts/bench-dispatch's end-to-end rounds scatter ±25 % on a
// 2-core machine. One op is one whole drain on a fresh key prefix.
//
//	part=asynq   bare asynq: the jobs enqueued as tasks first (not
//	             counted), then an asynq server with a handler that does
//	             nothing drains them (asynq's dequeue and done)
//	part=sluice  the store's own scripts as a contended pool drives them:
//	             passes of at most `capacity` jobs (pre-claim on, fair share
//	             λ below one job a tenant), each pass's jobs handed off as one
//	             asynq batch task (asynq's enqueue, dequeue and done, and the
//	             hand-off channel's PUBLISH) to a server whose handler
//	             finishes them with successes in calls of `finish`
//	             (FinishBatch, as the worker's Coalescer sends them), while
//	             the next passes run; at most drainInFlight jobs in flight
//	part=floor   the same drain and hand-off through drainFloorLib: the
//	             commands today's pass and finish run for these jobs, in the
//	             same order and with values of the same sizes, but no
//	             decision — no fair-share heap, GCRA, pre-claim rules,
//	             tenant decoding, send schedule or bookkeeping. What Redis
//	             would still do per job if every decision moved out of the
//	             scripts and the data model (records, tenant state, leases,
//	             logs, aggregates) stayed as it is. A lower bound: a design
//	             that decides elsewhere must also read the tenants' states
//	             before it decides and check them when it writes — part=thin
//	part=thin    the floor with that read and check: each pass is two
//	             calls, a read of the ready tenants (their hashes, as the
//	             pass reads them) and an apply that checks each tenant's
//	             state is still what the read gave (an HGET compared) before
//	             it writes: what Redis would do a job if a dispatcher decided
//	             in Go between the two calls. Its finishes are the floor's.
//
// The shape (environment variables, defaults from bench-dispatch's
// throughput part at concurrency 100): SLUICE_DRAIN_TENANTS 1000 tenants ×
// SLUICE_DRAIN_DEPTH 20 webhook jobs with bodies of SLUICE_DRAIN_BODY 200
// bytes, passes of SLUICE_DRAIN_CAPACITY 23 jobs, finishes SLUICE_DRAIN_FINISH
// 14 a call. The fake clock moves 2ms a pass; each tenant runs at 1000/s,
// so every tenant visited is due. Reported per job: cpu-µs/job (INFO cpu:
// the server's user + system CPU over the drain, the enqueues excluded),
// cmds/job (INFO commandstats, the scripts' commands included). With
// SLUICE_DRAIN_SPLIT=1, every call of the drain is logged (SLOWLOG) and its
// time inside Redis (a wall time; the log's own cost included) reported
// per job by what it is: pass-µs/job (the pass, or the floor's and thin's
// pass calls), finish-µs/job, asynq-µs/job (asynq's scripts: the hand-off's
// enqueue, dequeue and done, and bare asynq's) and other-µs/job (every other
// command: PUBLISH, the asynq servers' bookkeeping).
func BenchmarkDrain(b *testing.B) {
	sh := drainShapeFromEnv(b)
	for _, part := range []string{"asynq", "sluice", "floor", "thin"} {
		b.Run("part="+part, func(b *testing.B) {
			for range b.N {
				e := newEnvShards(b, 1)
				var st commandStats
				if part == "asynq" {
					st = drainAsynq(e, sh)
				} else {
					st = drainSluice(e, sh, part)
				}
				jobs := float64(sh.tenants * sh.depth)
				b.ReportMetric(float64(st.cpu)/jobs, "cpu-µs/job")
				b.ReportMetric(float64(st.calls)/jobs, "cmds/job")
				if sh.split {
					for what, us := range e.drainSplit() {
						b.ReportMetric(float64(us)/jobs, what+"-µs/job")
					}
				}
			}
		})
	}
}

// drainShape is BenchmarkDrain's shape; split: SLUICE_DRAIN_SPLIT=1.
type drainShape struct {
	tenants, depth, capacity, finish, body int
	split                                  bool
}

func drainShapeFromEnv(b *testing.B) drainShape {
	b.Helper()
	sh := drainShape{tenants: 1000, depth: 20, capacity: 23, finish: 14, body: 200,
		split: os.Getenv("SLUICE_DRAIN_SPLIT") == "1"}
	for name, v := range map[string]*int{"TENANTS": &sh.tenants, "DEPTH": &sh.depth,
		"CAPACITY": &sh.capacity, "FINISH": &sh.finish, "BODY": &sh.body} {
		s := os.Getenv("SLUICE_DRAIN_" + name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("SLUICE_DRAIN_%s=%q: want a positive integer", name, s)
		}
		*v = n
	}
	return sh
}

// drainStart reads the server's totals at the start of a drain's measured
// part and, for a split (sh.split), has the SLOWLOG log every command from
// then on.
func (e *env) drainStart(sh drainShape) commandStats {
	if sh.split {
		e.slowlog("1000000", "0")
		if err := e.rdb.SlowLogReset(e.ctx).Err(); err != nil {
			e.t.Fatal(err)
		}
	}
	return e.commandStats()
}

// slowlog sets the SLOWLOG's length and threshold (µs).
func (e *env) slowlog(maxLen, slowerThan string) {
	for _, kv := range [][2]string{{"slowlog-max-len", maxLen}, {"slowlog-log-slower-than", slowerThan}} {
		if err := e.rdb.ConfigSet(e.ctx, kv[0], kv[1]).Err(); err != nil {
			e.t.Fatal(err)
		}
	}
}

// drainSplit ends the SLOWLOG's logging of every command (back to Redis's
// defaults, after reading it) and returns the logged calls' µs inside
// Redis by what they are (BenchmarkDrain). Redis
// keeps each entry's first arguments: an FCALL's function name among them.
// It logs the commands a script runs as well, with the client address
// "?:0": those are left out (the script's own entry holds their time).
func (e *env) drainSplit() map[string]int64 {
	e.slowlog("1000000", "10000") // nothing more logged; the log kept until read
	logs, err := e.rdb.SlowLogGet(e.ctx, 1000000).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.rdb.SlowLogReset(e.ctx).Err(); err != nil {
		e.t.Fatal(err)
	}
	e.slowlog("128", "10000")
	out := map[string]int64{"pass": 0, "finish": 0, "asynq": 0, "other": 0}
	for _, l := range logs {
		if l.ClientAddr == "?:0" {
			continue // a command a script ran: its time is in the script's
		}
		out[drainCallKind(l.Args)] += l.Duration.Microseconds()
	}
	return out
}

// drainCallKind says what a logged call is: pass, finish, asynq or other.
func drainCallKind(args []string) string {
	if len(args) == 0 {
		return "other"
	}
	switch cmd := strings.ToLower(args[0]); {
	case cmd == "evalsha" || cmd == "eval":
		return "asynq"
	case cmd != "fcall" || len(args) < 2:
		return "other"
	case strings.HasSuffix(args[1], "_pass") || strings.HasPrefix(args[1], "drain_thin_"):
		return "pass"
	case strings.HasSuffix(args[1], "_finish"):
		return "finish"
	}
	return "other"
}

// drainBody is a job body of about n bytes.
func drainBody(n int) string { return `{"bench":"` + strings.Repeat("x", max(0, n-12)) + `"}` }

// drainServer starts an asynq server of the given concurrency running
// handle on queue q; stop it with Shutdown.
func drainServer(b testing.TB, e *env, q string, concurrency int, handle asynq.HandlerFunc) *asynq.Server {
	b.Helper()
	srv := asynq.NewServerFromRedisClient(e.rdb, asynq.Config{Concurrency: concurrency,
		Queues: map[string]int{q: 1}, TaskCheckInterval: 20 * time.Millisecond,
		ShutdownTimeout: 2 * time.Second, LogLevel: asynq.FatalLevel})
	if err := srv.Start(handle); err != nil {
		b.Fatal(err)
	}
	return srv
}

// drainAsynq is part=asynq: tenants × depth tasks through bare asynq at
// concurrency 100.
func drainAsynq(e *env, sh drainShape) commandStats {
	b := e.t
	n := sh.tenants * sh.depth
	q := "bare" + e.prefix
	c := asynq.NewClientFromRedisClient(e.rdb)
	payload := []byte(drainBody(sh.body))
	for range n {
		if _, err := c.EnqueueContext(e.ctx, asynq.NewTask("bench", payload), asynq.Queue(q)); err != nil {
			b.Fatal(err)
		}
	}
	var done atomic.Int64
	before := e.drainStart(sh)
	srv := drainServer(b, e, q, 100, func(context.Context, *asynq.Task) error {
		done.Add(1)
		return nil
	})
	defer srv.Shutdown()
	redistest.Poll(b, time.Minute, fmt.Sprintf("asynq handles %d tasks", n), func() bool { return done.Load() == int64(n) })
	return e.commandStats().minus(before)
}

// drainSluice is part=sluice, part=floor and part=thin (mode). The
// passes run in this goroutine; the hand-off server's handler finishes each
// batch it takes, as a worker would, so passes, hand-off and finishes
// overlap as in a deployment. At most drainInFlight jobs are released and
// not yet finished (the dispatcher's lease budget): a pass waits for
// finishes beyond that.
func drainSluice(e *env, sh drainShape, mode string) commandStats {
	b := e.t
	floor := mode != "sluice"
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = 1000, 1, 10 }))
	if floor {
		if err := e.rdb.Do(e.ctx, "FUNCTION", "LOAD", "REPLACE", drainFloorLib).Err(); err != nil {
			b.Fatal(err)
		}
	}
	names := make([]string, sh.tenants)
	for i := range names {
		names[i] = fmt.Sprintf("t%05d", i)
	}
	for range sh.depth {
		e.benchEnqueueBody(names, drainBody(sh.body))
	}
	queue := wire.HandoffQueueOf(e.prefix, 0)
	client := asynq.NewClientFromRedisClient(e.rdb)
	fin := FinishConfig{}.WithDefaults()
	var finished atomic.Int64
	var failed atomic.Value // the first error of a handler
	freed := make(chan struct{}, 1)
	before := e.drainStart(sh)
	srv := drainServer(b, e, queue, 16, func(_ context.Context, t *asynq.Task) error {
		bt, err := wire.DecodeBatch(t.Payload())
		if err == nil {
			err = e.drainFinish(bt, sh.finish, floor, fin)
		}
		if err != nil {
			failed.CompareAndSwap(nil, err)
		}
		finished.Add(int64(len(bt.Jobs)))
		select {
		case freed <- struct{}{}:
		default:
		}
		return nil
	})
	defer srv.Shutdown()
	cfg := PassConfig{Lead: 90 * ms, MinLead: 50 * ms, Grace: time.Minute, Capacity: sh.capacity,
		Preclaim: 2 * ms, FairShare: 0.1}
	total, jobs, next := sh.tenants*sh.depth, 0, 0
	inFlight := func() int64 { return int64(jobs) - finished.Load() } // handed off, not yet finished
	for jobs < total && failed.Load() == nil {
		if inFlight() >= drainInFlight {
			<-freed
			continue
		}
		var rel []wire.Release
		if mode == "thin" {
			var read int
			if rel, read = e.thinPass(sh.capacity); len(rel) == 0 && read > 0 {
				continue // the tenants read had nothing queued: they left ready
			}
		} else if floor {
			n := min(sh.capacity, total-jobs)
			picked := make([]string, n)
			for i := range picked {
				picked[i] = names[next%sh.tenants]
				next++
			}
			rel = e.floorPass(picked)
		} else {
			rel = e.pass(0, cfg).Released
		}
		e.clock.Advance(2 * ms)
		if len(rel) == 0 { // every tenant due holds its one job (fair share, or thin's ready set): wait for a finish
			if inFlight() == 0 {
				b.Fatalf("a pass released nothing with %d of %d jobs drained and none in flight", jobs, total)
			}
			<-freed
			continue
		}
		e.drainHandoff(client, queue, rel)
		jobs += len(rel)
	}
	redistest.Poll(b, time.Minute, fmt.Sprintf("the workers finish %d jobs", total), func() bool {
		return failed.Load() != nil || finished.Load() == int64(total)
	})
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return e.commandStats().minus(before)
}

// drainInFlight bounds the jobs BenchmarkDrain's passes have released and
// its workers not yet finished (the dispatcher's lease budget: about the
// workers' concurrency with its headroom).
const drainInFlight = 200

// drainFinish finishes batch bt's jobs with successes, per calls of at most
// per jobs: through FinishBatch, or the floor's finish.
func (e *env) drainFinish(bt wire.Batch, per int, floor bool, fin FinishConfig) error {
	for i := 0; i < len(bt.Jobs); i += per {
		part := bt.Jobs[i:min(i+per, len(bt.Jobs))]
		if floor {
			args := []any{"FCALL", "drain_floor_finish", 1, e.store.keys.ready(0), e.store.keys.base(0),
				e.clock.Now().UnixMicro()}
			for _, p := range part {
				args = append(args, p.ID, p.Claimed.Tenant)
			}
			if err := e.rdb.Do(e.ctx, args...).Err(); err != nil {
				return err
			}
			continue
		}
		var claims []ClaimRequest // a release the pass did not pre-claim: the worker claims it first
		for _, p := range part {
			if p.Claimed == nil {
				claims = append(claims, ClaimRequest{ID: p.ID, Gen: p.Gen})
			}
		}
		cs, err := e.store.ClaimBatch(e.ctx, 0, claims, time.Minute)
		if err != nil {
			return err
		}
		for k, c := range cs {
			if c.Outcome != ClaimOK {
				return fmt.Errorf("claim of %s: %v, want claimed", claims[k].ID, c.Outcome)
			}
		}
		reqs := make([]FinishRequest, len(part))
		for k, p := range part {
			reqs[k] = FinishRequest{ID: p.ID, Gen: p.Gen, Outcome: benchOK}
		}
		rs, err := e.store.FinishBatch(e.ctx, 0, reqs, fin)
		if err != nil {
			return err
		}
		for k, r := range rs {
			if r.State != StateSucceeded {
				return fmt.Errorf("finish of %s: %s, want succeeded", part[k].ID, r.State)
			}
		}
	}
	return nil
}

// drainHandoff hands rel to asynq as the dispatcher does (internal/dispatch
// handoff): one batch task on the shard's hand-off queue, then the queue's
// name published on the hand-off channel.
func (e *env) drainHandoff(c *asynq.Client, queue string, rel []wire.Release) {
	bt := wire.Batch{Shard: 0, Jobs: make([]wire.Payload, len(rel))}
	for i, r := range rel {
		bt.Jobs[i] = wire.Payload{ID: r.ID, Gen: r.Gen, SlotUS: r.SendAt.UnixMicro(), Claimed: r.Claimed}
	}
	task := asynq.NewTask(wire.TaskTypeBatch, wire.EncodeBatch(bt))
	if _, err := c.EnqueueContext(e.ctx, task, asynq.Queue(queue), asynq.MaxRetry(0), asynq.Timeout(time.Minute),
		asynq.TaskID("b:"+rel[0].ID+":"+strconv.FormatInt(rel[0].Gen, 10))); err != nil {
		e.t.Fatal(err)
	}
	if err := e.rdb.Publish(e.ctx, wire.HandoffChannel(e.prefix), queue).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// floorPass releases and pre-claims the head job of each tenant named
// through drainFloorLib's pass.
func (e *env) floorPass(tenants []string) []wire.Release {
	now := e.clock.Now().UnixMicro()
	args := []any{"FCALL", "drain_floor_pass", 1, e.store.keys.ready(0), e.store.keys.base(0), now, len(tenants)}
	for _, tn := range tenants {
		args = append(args, tn)
	}
	return e.floorRows(now, args)
}

// floorRows runs a floor or thin pass call (args) at now and turns its rows
// into pre-claimed releases.
func (e *env) floorRows(now int64, args []any) []wire.Release {
	rows, err := e.rdb.Do(e.ctx, args...).Slice()
	if err != nil {
		e.t.Fatal(err)
	}
	at := time.UnixMicro(now)
	rel := make([]wire.Release, len(rows))
	for i, row := range rows {
		v := row.([]any) // id, tenant, type, body, created µs
		created, _ := v[4].(int64)
		rel[i] = wire.Release{ID: v[0].(string), Tenant: v[1].(string), Type: v[2].(string), Cost: 1, Gen: 1,
			Slot: at, SendAt: at, Timeout: 30 * time.Second, Claimed: &wire.Claimed{Tenant: v[1].(string),
				Type: v[2].(string), Body: v[3].(string), Attempt: 1, TimeoutUS: 30_000_000, SlotUS: now,
				CreatedUS: created, Cost: 1}}
	}
	return rel
}

// thinPass reads up to n ready tenants through drainFloorLib's read, then
// releases and pre-claims the head job of each through its apply, which
// checks each tenant's state against the read's; and the tenants read.
func (e *env) thinPass(n int) ([]wire.Release, int) {
	now := e.clock.Now().UnixMicro()
	ready, base := e.store.keys.ready(0), e.store.keys.base(0)
	got, err := e.rdb.Do(e.ctx, "FCALL", "drain_thin_read", 1, ready, base, now, n).Slice()
	if err != nil {
		e.t.Fatal(err)
	}
	args := []any{"FCALL", "drain_thin_apply", 1, ready, base, now, len(got)}
	for _, t := range got {
		v := t.([]any) // tenant, its field s
		args = append(args, v[0], v[1])
	}
	return e.floorRows(now, args), len(got)
}

// drainFloorLib is part=floor's library (see BenchmarkDrain): the
// commands of today's pass (pre-claiming one job of each tenant named) and
// of a call of fast finishes, as MONITOR shows them for this shape, in the
// same order, with the values a real call writes fixed or copied (a
// tenant's state is written back as it was read) and nothing decided.
const drainFloorLib = `#!lua name=sluice_drain_floor
local rc -- redis.call, bound by each entry point (not reachable at the library's load)
-- read: what a pass reads before it decides: the due delayed jobs and
-- expired leases, the first ready tenants, the policy, each tenant's hash
-- (tns: the tenants named, or nil: the first n ready ones), the vclock.
local function read(keys, base, now, n, tns)
  rc('ZRANGEBYSCORE', base .. 'delayed', '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1001)
  rc('ZRANGEBYSCORE', base .. 'leases', '-inf', now, 'LIMIT', 0, 1001)
  local ready = rc('ZRANGEBYSCORE', keys[1], '-inf', '+inf', 'WITHSCORES', 'LIMIT', 0, n + 3)
  if not tns then
    tns = {}
    for i = 1, math.min(n, #ready / 2) do tns[i] = ready[2 * i - 1] end
  end
  rc('HMGET', base .. 'policy', '#v', '#ab', tns[1] or '')
  local T = {}
  for i = 1, #tns do
    local h, s, rs = rc('HGETALL', base .. 't:' .. tns[i]), '', ''
    for k = 1, #h, 2 do
      if h[k] == 's' then s = h[k + 1] elseif h[k] == 'rs' then rs = h[k + 1] end
    end
    T[i] = {s = s, rs = rs}
  end
  rc('GET', base .. 'vclock')
  return tns, T
end
-- release: what a pass writes for the head job of each tenant of tns
-- (state T[i], its hash as read) it pre-claims, and its last reads.
local function release(keys, base, now, tns, T)
  local ids, rows, out = {}, {}, {}
  for i = 1, #tns do
    local id = rc('LPOP', base .. 't:' .. tns[i] .. ':q')
    if id then
      local r = rc('HMGET', base .. 'j:' .. id, 'state', 'cost', 'gen', 'type', 'bytes', 'attempt', 'first', 'body',
        'created', 'ups', 'pcl')
      ids[#ids + 1], rows[#rows + 1], out[#out + 1] = id, {id, tns[i], r[4], r[8], tonumber(r[9])}, i
    end
  end
  rc('HGET', base .. 'fair', 'r')
  local leases, top = {}, {}
  for i = 1, #ids do
    rc('HSET', base .. 'j:' .. ids[i], 'state', 'running', 'attempt', '1', 'claimed', now, 'first', now, 'gen', '1',
      'slot', now, 'grace', '1000000', 'resv', '0', 'pc', '1')
    leases[2 * i - 1], leases[2 * i] = now, ids[i]
    top[2 * i - 1], top[2 * i] = 1, tns[out[i]]
  end
  if #ids > 0 then rc('ZADD', base .. 'leases', unpack(leases)) end
  for i = 1, #tns do
    rc('HSET', base .. 't:' .. tns[i], 's', T[i].s, 'rs', T[i].rs)
  end
  if #tns > 0 then rc('ZREM', keys[1], unpack(tns)) end
  rc('HINCRBY', base .. 'fair', 'w', #ids)
  rc('HINCRBY', base .. 'agg', 'or', 4294967296 * #ids)
  rc('ZCARD', base .. 'top')
  if #ids > 0 then rc('ZADD', base .. 'top', unpack(top)) end
  rc('ZRANGEBYSCORE', base .. 'tenants', '-inf', now, 'LIMIT', 0, 64)
  rc('ZRANGE', keys[1], 0, 0, 'WITHSCORES')
  rc('ZRANGEBYSCORE', base .. 'delayed', '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  rc('ZRANGE', base .. 'leases', 0, 0, 'WITHSCORES')
  return rows
end
-- floor_pass: one call, as today's pass (the tenants named).
local function floor_pass(keys, args)
  rc = redis.call
  local tns = {}
  for i = 1, tonumber(args[3]) do tns[i] = args[3 + i] end
  local _, T = read(keys, args[1], args[2], #tns, tns)
  return release(keys, args[1], args[2], tns, T)
end
-- thin_read: the read alone; {tenant, field s} of each tenant read.
local function thin_read(keys, args)
  rc = redis.call
  local tns, T = read(keys, args[1], args[2], tonumber(args[3]), nil)
  local out = {}
  for i = 1, #tns do out[i] = {tns[i], T[i].s} end
  return out
end
-- thin_apply: each tenant's field s checked against the read's, then the
-- release of those that match.
local function thin_apply(keys, args)
  rc = redis.call
  local base, tns, T = args[1], {}, {}
  for i = 1, tonumber(args[3]) do
    local tn, s = args[2 + 2 * i], args[3 + 2 * i]
    if rc('HGET', base .. 't:' .. tn, 's') == s then
      tns[#tns + 1], T[#T + 1] = tn, {s = s, rs = ''}
    end
  end
  return release(keys, base, args[2], tns, T)
end
local function finish(keys, args)
  rc = redis.call
  local base, now = args[1], args[2]
  local ids, ready = {}, {}
  for i = 3, #args, 2 do
    local id, tn = args[i], args[i + 1]
    local jk = base .. 'j:' .. id
    rc('HMGET', jk, 'state', 'tenant', 'gen', 'attempt', 'idem', 'logged', 'cb')
    rc('HINCRBY', base .. 't:' .. tn, 'ff', -1)
    if i == 3 then rc('HGET', base .. 'policy', '#ab') end
    rc('HGET', base .. 't:' .. tn, 'fx')
    if i == 3 then
      rc('ZRANGE', keys[1], 0, 0, 'WITHSCORES')
      rc('ZRANGE', base .. 'delayed', 0, 0, 'WITHSCORES')
    end
    rc('APPEND', base .. 't:' .. tn .. ':ra', string.rep('r', 19) .. id)
    rc('HSET', jk, 'state', 'succeeded', 'ended', now, 'body', '', 'log', '{"at":' .. now ..
      ',"gen":1,"attempt":1,"outcome":"success","status":200,"latency_us":20000,"error":""}', 'logged', '1')
    rc('PEXPIRE', jk, 86400000)
    ids[#ids + 1] = id
    ready[#ready + 1], ready[#ready + 2] = now, tn
  end
  rc('ZREM', base .. 'leases', unpack(ids))
  rc('ZADD', keys[1], unpack(ready))
  rc('HINCRBY', base .. 'fair', 'w', -#ids)
  rc('HINCRBY', base .. 'agg', 'or', -4294967296 * #ids)
  rc('HINCRBY', base .. 'finished', string.sub(now, 1, 10), #ids)
  return 'ok'
end
redis.register_function('drain_floor_pass', floor_pass)
redis.register_function('drain_thin_read', thin_read)
redis.register_function('drain_thin_apply', thin_apply)
redis.register_function('drain_floor_finish', finish)
`

func TestDrainCallKind(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"FCALL", "sluice_7e39632daf28_pass", "1", "p:{s0}:ready"}, "pass"},
		{[]string{"fcall", "drain_floor_pass", "1"}, "pass"},
		{[]string{"FCALL", "drain_thin_read", "1"}, "pass"},
		{[]string{"FCALL", "drain_thin_apply", "1"}, "pass"},
		{[]string{"FCALL", "sluice_7e39632daf28_finish", "1"}, "finish"},
		{[]string{"FCALL", "drain_floor_finish", "1"}, "finish"},
		{[]string{"FCALL", "sluice_7e39632daf28_claim", "1"}, "other"},
		{[]string{"EVALSHA", "a8153319", "2"}, "asynq"},
		{[]string{"PUBLISH", "p:handoff", "q"}, "other"},
		{[]string{"FCALL"}, "other"},
		{nil, "other"},
	} {
		if got := drainCallKind(c.args); got != c.want {
			t.Errorf("drainCallKind(%q) = %s, want %s", c.args, got, c.want)
		}
	}
}
