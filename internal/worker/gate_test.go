package worker_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/internal/worker"
)

// commandCounter is a go-redis hook counting the commands that reach Redis
// through its client (a pipeline counts each of its commands).
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// gatedServer is a Worker behind one real asynq server polling through a
// client of its own with a DequeueGate; counted counts what passes the gate.
type gatedServer struct {
	w       *worker.Worker
	gate    *worker.DequeueGate
	counted *commandCounter
}

// startGatedServer starts exec's Worker (newWorker), a DequeueGate with
// safetyNet and legacyQuiet on the hand-off channel, and one asynq server
// (TCI 20 ms) polling through a dedicated client: gate, then a command
// counter.
func (h *harness) startGatedServer(exec worker.Executor, safetyNet, legacyQuiet time.Duration) *gatedServer {
	h.t.Helper()
	w := h.newWorker(exec, nil)
	client, _ := redistest.New(h.t)
	o := redistest.Options()
	o.ClientName = subscriberName(h.prefix)
	sub := redistest.NewClient(h.t, o)
	gate, err := worker.NewDequeueGate(worker.GateConfig{Redis: sub, Prefix: h.prefix,
		Queues: wire.HandoffQueueNames(h.prefix), Legacy: []string{wire.WebhookQueue(h.prefix), wire.HTTPQueue(h.prefix)},
		SafetyNet: safetyNet, LegacyQuiet: legacyQuiet, Hold: 100 * time.Millisecond, Logger: testLogger(h.t)}) // short holds: more dequeues to count
	if err != nil {
		h.t.Fatal(err)
	}
	counted := &commandCounter{}
	client.AddHook(gate)
	client.AddHook(counted) // inner: sees only what the gate lets through
	if err := gate.Start(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(gate.Stop)
	srv := asynq.NewServerFromRedisClient(client, asynq.Config{
		Concurrency: 4, TaskCheckInterval: worker.TaskCheckIntervalDefault,
		Queues: w.Queues(), ShutdownTimeout: 2 * time.Second, Logger: quietLogger{}, LogLevel: asynq.FatalLevel,
	})
	if err := srv.Start(w); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(srv.Shutdown)
	return &gatedServer{w: w, gate: gate, counted: counted}
}

// subscriberName names the gate's subscription connection (CLIENT LIST).
func subscriberName(prefix string) string { return "gate-" + prefix }

// handOff enqueues rs as one batch on their shard's hand-off queue, as a
// dispatcher does, and publishes the queue's name when announce is set.
func (h *harness) handOff(rs []wire.Release, announce bool) {
	h.t.Helper()
	client := asynq.NewClientFromRedisClient(h.rdb)
	shard, _ := store.ShardOfJobID(rs[0].ID)
	queue := wire.HandoffQueueOf(h.prefix, shard)
	if _, err := client.EnqueueContext(h.ctx, batchOf(h.t, rs...), asynq.Queue(queue), asynq.MaxRetry(0),
		asynq.Timeout(10*time.Second)); err != nil {
		h.t.Fatal(err)
	}
	if announce {
		if err := h.rdb.Publish(h.ctx, wire.HandoffChannel(h.prefix), queue).Err(); err != nil {
			h.t.Fatal(err)
		}
	}
}

// TestGateAnswersIdlePollsLocallyAndLetsAnnouncedBatchesThrough: with a
// safety net of an hour, an idle server's dequeues are answered by the
// gate (each queue reaches Redis about once, at the start); a batch
// enqueued without an announcement stays in its queue, and its
// announcement gets it fetched and delivered.
func TestGateAnswersIdlePollsLocallyAndLetsAnnouncedBatchesThrough(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	exec := &sentExecutor{}
	gs := h.startGatedServer(exec, time.Hour, time.Millisecond)
	queues := int64(len(gs.w.Queues()))

	redistest.Poll(t, 10*time.Second, "20 dequeues answered by the gate", func() bool {
		local, _ := gs.gate.Counts()
		return local >= 20
	})
	local, real := gs.gate.Counts()
	if real > 2*queues {
		t.Fatalf("%d dequeues reached Redis while idle (%d answered locally), want about one per queue (%d)", real, local, queues)
	}

	h.policy("t1", store.Overrides{RateUS: ptr(400_000), Burst: ptr(1)}) // T = 400ms
	h.enqueue("t1", 2)
	rel := h.passOf(0, 500*time.Millisecond, 3*time.Second).Released
	if len(rel) != 2 {
		t.Fatalf("released %+v, want two jobs", rel)
	}
	later := rel[1:] // its slot 400ms away: the batch can wait for its announcement
	h.handOff(later, false)
	redistest.Hold(t, 200*time.Millisecond, "an unannounced batch stays unfetched", func() bool {
		return len(exec.sent()) == 0
	})
	if err := h.rdb.Publish(h.ctx, wire.HandoffChannel(h.prefix), wire.HandoffQueueOf(h.prefix, 0)).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Poll(t, 5*time.Second, "the announced batch delivered", func() bool {
		return slices.Equal(exec.sent(), idsOf(later))
	})
	// The executor records a send before the worker's finish: wait for it.
	redistest.Poll(t, 5*time.Second, "the delivered job succeeded", func() bool {
		return h.jobOf(later[0].ID).State == store.StateSucceeded
	})
}

// TestGateKeepsAnIdleWorkerUnderAHundredCommandsPerSecond: everything one
// gated asynq server sends to Redis (asynq's own background included) over
// 50 of its dequeues stays under 100 commands a second (legacy queues
// quiet after 50 ms rather than 10 s, to keep the test short).
func TestGateKeepsAnIdleWorkerUnderAHundredCommandsPerSecond(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	gs := h.startGatedServer(&sentExecutor{}, worker.SafetyNetDefault, 50*time.Millisecond)
	redistest.Poll(t, 5*time.Second, "the first dequeue answered by the gate", func() bool {
		local, _ := gs.gate.Counts()
		return local > 0
	})
	start, before := time.Now(), gs.counted.n.Load()
	localBefore, realBefore := gs.gate.Counts()
	redistest.Poll(t, 30*time.Second, "50 more dequeues", func() bool { // held up to 100 ms each while all are empty
		local, real := gs.gate.Counts()
		return local+real-localBefore-realBefore >= 50
	})
	elapsed, sent := time.Since(start), gs.counted.n.Load()-before
	local, real := gs.gate.Counts()
	perSecond := float64(sent) / elapsed.Seconds()
	t.Logf("idle: %d commands to Redis in %s (%.0f/s); dequeues %d local, %d real", sent, elapsed.Round(time.Millisecond),
		perSecond, local-localBefore, real-realBefore)
	if perSecond > 100 {
		t.Fatalf("%.0f commands/s while idle, want ≤ 100", perSecond)
	}
}

// TestGateKeepsALegacyQueueInUsePolled: an earlier dispatcher hands off
// per-job tasks (no announcement) on a legacy queue. Found busy by the
// gated server's first poll, the queue stays polled: the next task, slotted
// a second later, is fetched before its slot and sent when due (at its
// slot, or a second after the first send when that one was late), though
// the safety net is an hour.
func TestGateKeepsALegacyQueueInUsePolled(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	h.policy("t1", store.Overrides{RateUS: ptr(1_000_000), Burst: ptr(1)})
	h.enqueue("t1", 2)
	rel := h.passOf(0, 1500*time.Millisecond, 5*time.Second).Released
	if len(rel) != 2 {
		t.Fatalf("released %+v, want two jobs", rel)
	}
	client := asynq.NewClientFromRedisClient(h.rdb)
	handOff := func(r wire.Release) {
		t.Helper()
		if _, err := client.EnqueueContext(h.ctx, taskOf(r), asynq.Queue(wire.WebhookQueue(h.prefix)), asynq.MaxRetry(0),
			asynq.Timeout(10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	handOff(rel[0]) // waiting before the server starts: its first poll finds the queue busy
	gs := h.startGatedServer(nil, time.Hour, time.Hour)
	h.recv.waitFor(t, "t1", 1, 5*time.Second)
	r := rel[1]
	handOff(r)
	got := h.recv.waitFor(t, "t1", 2, 5*time.Second)
	if got[1].id != r.ID {
		t.Fatalf("arrived %+v, want job %s second", got, r.ID)
	}
	// Its slot, or a second after the first job's send if that one went
	// out late (its late pickup waited for the server's start, slower on a
	// Cluster): the tenant's schedule keeps its distances over sends.
	due := r.Slot
	if next := got[0].redis.Add(time.Second); next.After(due) {
		due = next
	}
	if off := got[1].redis.Sub(due); off > sendBound() {
		t.Fatalf("sent %s after it was due (slot %s, first send +1s %s), want within %s", off,
			r.Slot.Format(time.StampMicro), got[0].redis.Add(time.Second).Format(time.StampMicro), sendBound())
	}
	redistest.Poll(t, 5*time.Second, "the job succeeded at its first release's gen", func() bool {
		j := h.jobOf(r.ID)
		return j.Gen == r.Gen && j.State == store.StateSucceeded
	})
	if _, real := gs.gate.Counts(); real == 0 {
		t.Fatal("no dequeue reached Redis")
	}
}

// TestGatePollsEveryQueueWhileDeafAndAfterResubscribing: when the
// subscription's connection is killed, the gate stops answering (every
// queue goes to Redis again) until go-redis has resubscribed; then it
// answers again.
func TestGatePollsEveryQueueWhileDeafAndAfterResubscribing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	gs := h.startGatedServer(&sentExecutor{}, time.Hour, time.Millisecond)
	redistest.Poll(t, 5*time.Second, "dequeues answered by the gate", func() bool {
		local, _ := gs.gate.Counts()
		return local > 0
	})
	_, realBefore := gs.gate.Counts()
	if killed, err := redistest.KillClients(h.ctx, h.rdb, subscriberName(h.prefix), false); err != nil || killed == 0 {
		t.Fatalf("close the connections named %s: %d closed, %v", subscriberName(h.prefix), killed, err)
	}
	queues := int64(len(wire.HandoffQueueNames(h.prefix)))
	redistest.Poll(t, 5*time.Second, "every hand-off queue polled in Redis again", func() bool {
		_, real := gs.gate.Counts()
		return real-realBefore >= queues
	})
	localAfter, _ := gs.gate.Counts()
	redistest.Poll(t, 5*time.Second, "the gate answering again after resubscribing", func() bool {
		local, _ := gs.gate.Counts()
		return local > localAfter+queues
	})
}

// TestGateAnswersOnlyDequeuesOfKnownEmptyQueues drives the hook directly
// with a script of the dequeue's key layout: before Start every dequeue goes
// to Redis; once heard, an empty queue's second dequeue is answered with
// redis.Nil locally; an announcement sends the next one to Redis again; a
// script with other keys always passes; the counts are exported.
func TestGateAnswersOnlyDequeuesOfKnownEmptyQueues(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	w := h.newWorker(&sentExecutor{}, nil)
	gate, err := w.Gate(h.rdb, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	client, _ := redistest.New(t)
	client.AddHook(gate)
	queue := wire.HandoffQueue(h.prefix, 3)
	dequeue := redis.NewScript(`return redis.call("RPOP", KEYS[1])`)
	keys := dequeueKeys
	if err := dequeue.Load(h.ctx, client).Err(); err != nil { // EVALSHA succeeds: one call per dequeue
		t.Fatal(err)
	}
	run := func(q string) error { return dequeue.Run(h.ctx, client, keys(q), 0, "x").Err() }
	counts := func() (float64, float64) {
		return h.counter("sluice_worker_dequeues_total", "answered=gate"), h.counter("sluice_worker_dequeues_total", "answered=redis")
	}

	for range 2 {
		if err := run(queue); !errors.Is(err, redis.Nil) {
			t.Fatalf("dequeue of an empty queue = %v, want redis.Nil", err)
		}
	}
	if local, real := counts(); local != 0 || real != 2 {
		t.Fatalf("before Start: %v answered by the gate, %v by Redis; want 0, 2", local, real)
	}
	if err := gate.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	defer gate.Stop()
	// The first dequeue of each queue after the subscription goes to Redis
	// (every queue dirty). The legacy queues are in use (each dequeue finds
	// a task): asynq's dequeues of them poll them, the gate never holds
	// nor redirects for them (a quiet one not polled for a safety net would
	// be polled in a known-empty queue's place).
	for _, q := range []string{wire.WebhookQueue(h.prefix), wire.HTTPQueue(h.prefix)} {
		if err := client.RPush(h.ctx, keys(q)[0], "task").Err(); err != nil {
			t.Fatal(err)
		}
		if err := run(q); err != nil {
			t.Fatalf("dequeue of legacy queue %s holding a task: %v", q, err)
		}
	}
	for _, q := range wire.HandoffQueueNames(h.prefix) {
		_ = run(q)
	}
	for range 2 {
		_ = run(queue)
	}
	if local, real := counts(); local != 2 || real != 2+wire.HandoffQueues+2 {
		t.Fatalf("heard: %v answered by the gate, %v by Redis; want 2, %d", local, real, 2+wire.HandoffQueues+2)
	}
	if err := client.RPush(h.ctx, keys(queue)[0], "task").Err(); err != nil {
		t.Fatal(err)
	}
	if err := run(queue); !errors.Is(err, redis.Nil) {
		t.Fatalf("unannounced: %v, want the gate's redis.Nil", err)
	}
	if err := h.rdb.Publish(h.ctx, wire.HandoffChannel(h.prefix), queue).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Poll(t, 5*time.Second, "the announced queue's task dequeued", func() bool {
		return run(queue) == nil
	})
	_ = run(queue) // Redis: empty again, so known empty
	// Other keys, in the queue's slot: a Cluster runs the script too.
	tag := "asynq:{" + queue + "}:"
	other := []string{tag + "pending", tag + "a", tag + "b", tag + "c"}
	local, real := counts()
	if err := dequeue.Run(h.ctx, client, other, 0, "x").Err(); !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	if l, r := counts(); l != local || r != real {
		t.Fatalf("a script with other keys: gate %v → %v, Redis %v → %v; want neither counted", local, l, real, r)
	}
	if _ = run(queue); h.counter("sluice_worker_dequeues_total", "answered=gate") != local+1 {
		t.Fatal("the empty queue's dequeue was not answered by the gate")
	}
}

// TestGateHoldsAnIdleDequeueAndRedirectsItToTheAnnouncedQueue: once every
// gated queue is known empty, a dequeue of one of them waits for an
// announcement; the announcement of another queue sends the held dequeue
// to that queue's keys, so its task is fetched by that very call (asynq
// does not finish a round of empty queues, nor sleep, before fetching it).
func TestGateHoldsAnIdleDequeueAndRedirectsItToTheAnnouncedQueue(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	_, client := h.startGate(worker.GateConfig{SafetyNet: time.Hour, Hold: time.Hour})
	// The script returns the queue it popped from with the task: the keys
	// it ran on, whatever the call named.
	dequeue := redis.NewScript(`local v = redis.call("RPOP", KEYS[1]) if v then return KEYS[1] .. "=" .. v .. "@" .. ARGV[2] end return nil`)
	keys := dequeueKeys
	run := func(q string) (string, error) {
		return dequeue.Run(h.ctx, client, keys(q), 0, "asynq:{"+q+"}:t:").Text()
	}
	for _, q := range wire.HandoffQueueNames(h.prefix) {
		if _, err := run(q); !errors.Is(err, redis.Nil) { // Redis's answer: every queue now known empty
			t.Fatalf("first dequeue of %s: %v, want redis.Nil", q, err)
		}
	}
	asked, announced := wire.HandoffQueue(h.prefix, 2), wire.HandoffQueue(h.prefix, 6)
	got := make(chan string, 1)
	go func() {
		v, err := run(asked) // held: every queue is known empty
		if err != nil {
			v = err.Error()
		}
		got <- v
	}()
	redistest.Hold(t, 50*time.Millisecond, "the dequeue is held", func() bool { return len(got) == 0 })
	if err := h.rdb.RPush(h.ctx, keys(announced)[0], "task").Err(); err != nil {
		t.Fatal(err)
	}
	if err := h.rdb.Publish(h.ctx, wire.HandoffChannel(h.prefix), announced).Err(); err != nil {
		t.Fatal(err)
	}
	want := keys(announced)[0] + "=task@asynq:{" + announced + "}:t:"
	if v := <-got; v != want {
		t.Fatalf("held dequeue of %s after announcing %s = %q, want %q", asked, announced, v, want)
	}
}

// TestGateHoldsAHeldDequeueAgainAfterAnEmptySafetyNetPoll: a dequeue held
// while every queue is known empty goes to Redis at each safety net; when
// that poll finds nothing it is held again instead of answered (an empty
// answer would make asynq sleep its TaskCheckInterval, deaf to the next
// announcement), so a batch announced a safety net later is fetched by that
// very call.
func TestGateHoldsAHeldDequeueAgainAfterAnEmptySafetyNetPoll(t *testing.T) {
	t.Parallel()
	heldAcrossSafetyNets(t, false)
}

// TestGateHoldsAHeldDequeueAcrossALegacyQueuesSafetyNet: with legacy
// queues (an earlier dispatcher's per-job queues, polled at each safety
// net), a held dequeue whose hold ends at a legacy queue's safety net polls
// that queue and is held again, never answered empty: an empty answer at
// the end of asynq's round would make it sleep its TaskCheckInterval, and a
// batch announced then would wait up to that long.
func TestGateHoldsAHeldDequeueAcrossALegacyQueuesSafetyNet(t *testing.T) {
	t.Parallel()
	heldAcrossSafetyNets(t, true)
}

// heldAcrossSafetyNets starts a gate with a 100 ms safety net on the
// hand-off queues (and, withLegacy, the legacy wire.WebhookQueue), polls
// every queue once (the legacy ones last: their safety nets come due after
// the others'), holds a dequeue across four safety nets — every queue
// polled at least twice, the dequeue never answered — then announces a
// task, which that dequeue must fetch.
func heldAcrossSafetyNets(t *testing.T, withLegacy bool) {
	t.Helper()
	h := newHarness(t, 1)
	const safetyNet = 100 * time.Millisecond
	var legacy []string
	if withLegacy {
		legacy = []string{wire.WebhookQueue(h.prefix)}
	}
	gate, client := h.startGate(worker.GateConfig{SafetyNet: safetyNet, Legacy: legacy})
	dequeue := redis.NewScript(`local v = redis.call("RPOP", KEYS[1]) if v then return KEYS[1] .. "=" .. v end return nil`)
	keys := dequeueKeys
	run := func(q string) (string, error) { return dequeue.Run(h.ctx, client, keys(q), 0, "x").Text() }
	all := append(wire.HandoffQueueNames(h.prefix), legacy...)
	for _, q := range all {
		if _, err := run(q); !errors.Is(err, redis.Nil) { // never held: Redis's answer
			t.Fatalf("first dequeue of %s: %v, want redis.Nil", q, err)
		}
	}
	_, realBefore := gate.Counts()
	got := make(chan string, 1)
	go func() {
		v, err := run(wire.HandoffQueue(h.prefix, 0))
		if err != nil {
			v = err.Error()
		}
		got <- v
	}()
	// Four safety nets: each sends every queue to Redis, finds it empty,
	// and holds the dequeue again.
	redistest.Hold(t, 4*safetyNet, "the dequeue is held across the safety nets", func() bool { return len(got) == 0 })
	if _, real := gate.Counts(); real-realBefore < 2*int64(len(all)) {
		t.Fatalf("%d dequeues reached Redis over 4 safety nets, want at least %d (every queue, twice)", real-realBefore, 2*len(all))
	}
	announced := wire.HandoffQueue(h.prefix, 5)
	if err := h.rdb.RPush(h.ctx, keys(announced)[0], "task").Err(); err != nil {
		t.Fatal(err)
	}
	if err := h.rdb.Publish(h.ctx, wire.HandoffChannel(h.prefix), announced).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-got:
		if want := keys(announced)[0] + "=task"; v != want {
			t.Fatalf("held dequeue = %q, want %q", v, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the announced task was not fetched by the held dequeue")
	}
}

// TestGateSafetyNetPollsOnceForAllServers: four servers dequeuing through
// one worker's gate — each dequeue held, and asked again as soon as it is
// answered, as asynq's processors do — send each queue's safety-net poll
// to Redis once between them, not once each: an idle worker costs the
// same with one fetcher or four.
func TestGateSafetyNetPollsOnceForAllServers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	const safetyNet, servers = 100 * time.Millisecond, 4
	gate, client := h.startGate(worker.GateConfig{SafetyNet: safetyNet})
	dequeue := redis.NewScript(`local v = redis.call("RPOP", KEYS[1]) if v then return KEYS[1] .. "=" .. v end return nil`)
	queues := wire.HandoffQueueNames(h.prefix)
	for _, q := range queues {
		if _, err := dequeue.Run(h.ctx, client, dequeueKeys(q), 0, "x").Text(); !errors.Is(err, redis.Nil) {
			t.Fatalf("first dequeue of %s: %v, want redis.Nil", q, err)
		}
	}
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{}, servers)
	_, realBefore := gate.Counts()
	start := time.Now()
	for i := range servers {
		go func() {
			defer func() { done <- struct{}{} }()
			for ctx.Err() == nil {
				if _, err := dequeue.Run(ctx, client, dequeueKeys(queues[i]), 0, "x").Text(); !errors.Is(err, redis.Nil) && ctx.Err() == nil {
					t.Errorf("dequeue of an empty queue: %v, want redis.Nil", err)
					return
				}
			}
		}()
	}
	redistest.Hold(t, 6*safetyNet, "the servers dequeue while idle", func() bool { return len(done) == 0 })
	elapsed := time.Since(start)
	_, real := gate.Counts()
	cancel()
	for range servers {
		<-done
	}
	// Each queue is due once per safety net: at most one poll each per
	// safety net begun in the window, plus one in flight at its edge.
	nets := int64(elapsed/safetyNet) + 2
	if polls, most := real-realBefore, nets*int64(len(queues)); polls > most || polls < int64(len(queues)) {
		t.Fatalf("%d safety-net polls reached Redis from %d servers in %s, want %d … %d (every queue once per safety net)",
			polls, servers, elapsed.Round(time.Millisecond), len(queues), most)
	}
}

// startGate starts a dequeue gate on the hand-off queues of h's prefix
// (cfg's Redis, Prefix and Queues set here), hooked into a client of its
// own, both ended with the test.
func (h *harness) startGate(cfg worker.GateConfig) (*worker.DequeueGate, redis.UniversalClient) {
	h.t.Helper()
	return h.startGateCtx(h.ctx, cfg)
}

// startGateCtx is startGate with the gate started on ctx.
func (h *harness) startGateCtx(ctx context.Context, cfg worker.GateConfig) (*worker.DequeueGate, redis.UniversalClient) {
	h.t.Helper()
	cfg.Redis, cfg.Prefix, cfg.Queues = h.rdb, h.prefix, wire.HandoffQueueNames(h.prefix)
	gate, err := worker.NewDequeueGate(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	client, _ := redistest.New(h.t)
	client.AddHook(gate)
	if err := gate.Start(ctx); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(gate.Stop) // also releases a held dequeue after a failure
	return gate, client
}

// dequeueKeys are the four keys of asynq's dequeue script for queue q.
func dequeueKeys(q string) []string {
	k := "asynq:{" + q + "}:"
	return []string{k + "pending", k + "paused", k + "active", k + "lease"}
}

// TestGateHoldsNothingOnceItsContextEnds: when the context the gate was
// started with ends (the worker's signal), announcements are no longer
// heard, so no dequeue is held any more and each goes to Redis — even when
// the subscription's last receive returned a message as the context ended.
// A dequeue held on (up to 20 safety nets) kept asynq's server from
// stopping: its shutdown waits for the fetch in progress.
func TestGateHoldsNothingOnceItsContextEnds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	dequeue := redis.NewScript(`return redis.call("RPOP", KEYS[1])`)
	for round := range 20 {
		ctx, cancel := context.WithCancel(h.ctx)
		gate, client := h.startGateCtx(ctx, worker.GateConfig{SafetyNet: time.Hour, Hold: time.Hour})
		for _, q := range wire.HandoffQueueNames(h.prefix) { // every queue known empty
			if err := dequeue.Run(h.ctx, client, dequeueKeys(q), 0).Err(); !errors.Is(err, redis.Nil) {
				t.Fatalf("first dequeue of %s: %v, want redis.Nil", q, err)
			}
		}
		// Announcements of a queue nobody fills arrive while the context
		// ends: the subscription's last receive may return one of them.
		// The context ends after 1 to 5 of them (by round), so the end
		// falls at different points of the subscription's receives.
		quiet := wire.HandoffQueue(h.prefix, 0)
		stop := make(chan struct{})
		published := make(chan struct{})
		sent := make(chan struct{}, 1)
		go func() {
			defer close(published)
			for n := 1; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				_ = h.rdb.Publish(h.ctx, wire.HandoffChannel(h.prefix), quiet).Err()
				if n == 1+round%5 {
					sent <- struct{}{}
				}
			}
		}()
		<-sent
		cancel()
		close(stop)
		<-published
		// The first dequeue polls the announced queue; were announcements
		// still taken as heard, the next would find every queue known
		// empty and be held for the hour. (One that comes before the gate
		// has seen its context end may be answered by it, or held until
		// it has.)
		for i := range 3 {
			got := make(chan error, 1)
			go func() { got <- dequeue.Run(h.ctx, client, dequeueKeys(quiet), 0).Err() }()
			select {
			case err := <-got:
				if !errors.Is(err, redis.Nil) {
					t.Fatalf("round %d: dequeue %d after the gate's context ended: %v, want Redis's redis.Nil", round, i, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: dequeue %d after the gate's context ended was held", round, i)
			}
		}
		gate.Stop()
	}
}
