package api

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// Timing of the memory guard's readings.
const (
	// memoryReadEvery is how long one INFO memory reading of a master
	// serves the enqueues of its shards before the next one reads again.
	memoryReadEvery = time.Second
	// memoryReadTrusted is how old a reading may be and still refuse: when
	// a master cannot be read for longer (Redis unreachable), enqueue is
	// left to fail or succeed on its own.
	memoryReadTrusted = 5 * memoryReadEvery
	// maxMemoryRetryAfter bounds the Retry-After estimated from the drain,
	// in seconds.
	maxMemoryRetryAfter = 60
	// jobOverheadBytes is what one stored job costs Redis beyond its body,
	// about: docs/benchmarks.md's 2 289 B per queued job of a 1 KiB payload. A body
	// counts 5/4 of its size: the allocator's size classes of large values
	// are a quarter of a power of two apart.
	jobOverheadBytes = 1280
)

// memoryGuard refuses new jobs while the Redis master that would store
// them uses more than highWater × its maxmemory, so the writes that drain
// the backlog — the hand-off to asynq, asynq's dequeue (both scripts Redis
// refuses past maxmemory with noeviction), claims and finishes — keep the
// rest as headroom. It reads INFO memory of each master at most once per
// memoryReadEvery, on the enqueue that finds the reading stale (the
// enqueues that come meanwhile use the last one), so its cost is one round
// trip per master per second while jobs arrive. Between readings it adds
// the jobs this process stored (their bodies and jobOverheadBytes each) to
// the last reading, so a burst cannot run a second's worth of enqueues
// past the mark (other throttlers' enqueues show at the next reading). A
// master without maxmemory is never refused. Results of http jobs, which
// the workers' finishes write, stop at the same mark by themselves (a body
// past it is cut or dropped: store.Config.MemoryHighWater); the guard sees
// them at its next reading. Safe for concurrent use; the zero highWater is
// off.
type memoryGuard struct {
	rdb       redis.UniversalClient
	highWater float64
	log       *slog.Logger
	now       func() time.Time

	mu    sync.Mutex
	nodes map[string]*nodeMemory // by master address ("" for a single client)
}

// nodeMemory is what the guard knows of one master.
type nodeMemory struct {
	used, max int64     // the last reading: used_memory and maxmemory, bytes
	at        time.Time // when it was taken (zero: never)
	stored    int64     // bytes of the jobs stored here since (an estimate)
	prevUsed  int64     // the reading before, for the drain's pace
	prevAt    time.Time
	reading   bool // a reading is under way
	full      bool // above the mark at the last reading (for the log)
}

func newMemoryGuard(rdb redis.UniversalClient, highWater float64, log *slog.Logger) *memoryGuard {
	return &memoryGuard{rdb: rdb, highWater: highWater, log: log, now: time.Now, nodes: map[string]*nodeMemory{}}
}

// admit returns nil when the master holding key's slot is below the
// high-water mark, cannot be read, or has no maxmemory; else a 507
// storage_full whose Retry-After is the time the drain of the last second
// would take to bring it back under the mark (StorageFullRetryAfter when
// it does not go down). Nothing is written. node names the master for
// stored.
func (g *memoryGuard) admit(ctx context.Context, key string) (node string, refusal *Error) {
	if g == nil || g.highWater <= 0 {
		return "", nil
	}
	client, node, err := masterOf(ctx, g.rdb, key)
	if err != nil {
		return "", nil // the enqueue that follows meets the same failure and answers it
	}
	m := g.reading(ctx, client, node)
	mark := int64(g.highWater * float64(m.max))
	if m.at.IsZero() || g.now().Sub(m.at) > memoryReadTrusted || m.max <= 0 || m.used+m.stored < mark {
		return node, nil
	}
	used := m.used + m.stored
	return node, &Error{Status: http.StatusInsufficientStorage, Code: CodeStorageFull, RetryAfter: m.retryAfter(mark),
		Message: fmt.Sprintf("storage full: Redis uses %.0f%% of its maxmemory, above the high-water mark of %.0f%% "+
			"kept for delivery; nothing was stored, retry later", 100*float64(used)/float64(m.max), 100*g.highWater)}
}

// stored adds jobs of bodyBytes in all, just stored on node (as admit
// named it), to its estimate until the next reading.
func (g *memoryGuard) stored(node string, jobs int, bodyBytes int64) {
	if g == nil || g.highWater <= 0 || jobs == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if m := g.nodes[node]; m != nil {
		m.stored += bodyBytes*5/4 + int64(jobs)*jobOverheadBytes
	}
}

// reading returns the master's last reading, taking a new one first when
// it is older than memoryReadEvery and no other caller is taking one.
func (g *memoryGuard) reading(ctx context.Context, node redis.UniversalClient, addr string) nodeMemory {
	g.mu.Lock()
	m := g.nodes[addr]
	if m == nil {
		m = &nodeMemory{}
		g.nodes[addr] = m
	}
	if m.reading || (!m.at.IsZero() && g.now().Sub(m.at) < memoryReadEvery) {
		defer g.mu.Unlock()
		return *m
	}
	m.reading = true
	g.mu.Unlock()

	used, max, err := redisscript.ReadMemory(ctx, node)
	now := g.now()

	g.mu.Lock()
	defer g.mu.Unlock()
	m.reading = false
	if err != nil {
		return *m // retried by the next enqueue; trusted only until memoryReadTrusted
	}
	m.prevUsed, m.prevAt = m.used, m.at
	m.used, m.max, m.at, m.stored = used, max, now, 0
	g.logCrossing(addr, m)
	return *m
}

// logCrossing logs when a master goes above the mark or back under it.
func (g *memoryGuard) logCrossing(addr string, m *nodeMemory) {
	full := m.max > 0 && m.used >= int64(g.highWater*float64(m.max))
	if full == m.full {
		return
	}
	m.full = full
	what := "Redis memory above the high-water mark: refusing new jobs until delivery frees memory"
	if !full {
		what = "Redis memory back under the high-water mark: accepting jobs"
	}
	g.log.Warn(what, "node", addr, "used_memory", m.used, "maxmemory", m.max, "high_water", g.highWater)
}

// retryAfter is, in whole seconds (1 … maxMemoryRetryAfter), how long the
// pace between the last two readings takes to bring used (and what was
// stored since) under mark; StorageFullRetryAfter when memory did not go
// down.
func (m nodeMemory) retryAfter(mark int64) int64 {
	gone := m.prevUsed - m.used
	span := m.at.Sub(m.prevAt)
	if m.prevAt.IsZero() || gone <= 0 || span <= 0 {
		return StorageFullRetryAfter
	}
	secs := float64(m.used+m.stored-mark) / (float64(gone) / span.Seconds())
	return int64(min(max(math.Ceil(secs), 1), maxMemoryRetryAfter))
}

// masterOf is the client of the master holding key's slot on a Cluster
// (with its address), else rdb itself (address "").
func masterOf(ctx context.Context, rdb redis.UniversalClient, key string) (redis.UniversalClient, string, error) {
	c, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return rdb, "", nil
	}
	node, err := c.MasterForKey(ctx, key)
	if err != nil {
		return nil, "", fmt.Errorf("the master of key %q: %w", key, err)
	}
	return node, node.Options().Addr, nil
}
