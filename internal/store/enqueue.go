package store

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redisscript"
)

// MaxBatch is the most items one Enqueue call takes (docs/design.md §6).
const MaxBatch = 1000

// maxTimeUS bounds times given to the scripts: the bound of a job's run_at,
// 2⁵² µs (year 2112), keeps every sum of a time and an interval exact in
// Lua's doubles.
const maxTimeUS = job.MaxRunAtUS

// Item is one job to enqueue. Enqueue checks Type, Cost, RunAt, Delay and
// IdemKey with the job package (job.Attrs.Check, the checks the HTTP layer
// applies) and refuses an invalid item (ErrInvalid); it stores Body, the
// canonical JSON of a valid job.Spec, as given.
type Item struct {
	// Type is the job type: wire.TypeWebhook, wire.TypeHTTP or wire.TypeTask.
	Type string
	// Cost is the job's size in tokens; 0 means 1. It must not exceed
	// min(burst, admit_burst) of the tenant's policy: checked against
	// policy.MaxBurst here and against the policy in the script (Refused, CodeInvalid).
	Cost int64
	// RunAt, when not zero, is the earliest time the job may run: after
	// 1970, at most job.MaxRunAt. A RunAt at or before now queues the job
	// at once.
	RunAt time.Time
	// Delay, when > 0, runs the job at (Redis) now + Delay, at most
	// job.MaxDelay. Not with RunAt.
	Delay time.Duration
	// Body is the job's canonical JSON.
	Body []byte
	// Callback, when not "", is the URL told of the job's terminal state
	// (record field cb; see Callbacks): checked with job.CheckURL. The
	// caller checks it against the egress guard.
	Callback string
	// Upstreams names the shared upstream quotas the job consumes (issue
	// #15): at most MaxUpstreamsPerJob, each a valid upstream name
	// (ValidUpstreamName), no name twice; order does not matter (stored
	// sorted, joined by ',', in record field ups). A job naming upstreams
	// waits in its tenant's lane for that set (lua/lanes.lua) and leaves only
	// when its tenant's slot and each upstream's have come. The caller
	// refuses names of upstreams that do not exist.
	Upstreams []string
	// Destination is a webhook or http job's destination, the scheme, host
	// and port of its URL (webhook.Destination; "" for none): record field
	// dst, by which the pass holds the job while its tenant's circuit for
	// it is open (docs/design.md §4.5) — computed once here, never parsed
	// in Lua. At most 1024 bytes, no space.
	Destination string
	// IdemKey, when not "", makes the enqueue idempotent: see
	// job.CheckIdemKey.
	IdemKey string
	// Fingerprint identifies the request under IdemKey: the SHA-256 of the
	// raw body (of the item's canonical JSON in a batch).
	Fingerprint [32]byte
	// Unless, when not nil, refuses the item with its code and detail unless
	// IdemKey replays an earlier request (which answers as usual: Duplicate,
	// or CodeIdempotencyMismatch): for a new job that must not be stored
	// now — a task job whose queue has no live worker — whose retried
	// request must still get its original answer. The code
	// CodeNoWebhookSecret is waived in the same script when the tenant's
	// policy says unsigned or it holds a live secret by API (AddSecret).
	Unless *Refusal
}

// Refusal is a refusal an Item carries (Item.Unless): a code of the caller's
// (it need not be one of this package's) and a detail for people.
type Refusal struct {
	Code   Code
	Detail string
}

// Outcome is what happened to one Item.
type Outcome uint8

// The outcomes.
const (
	Accepted  Outcome = iota + 1 // stored: ID, State, ETA
	Duplicate                    // IdemKey seen with the same Fingerprint: the original ID, State, ETA
	Refused                      // nothing stored: Code, RetryAfter, Detail
)

// Code is why an item was refused: the API error codes of docs/design.md §4.3.
type Code string

// The refusal codes.
const (
	CodeRateLimited         Code = "rate_limited"         // 429: admission bucket empty; RetryAfter = time until cost tokens exist
	CodeBacklogFull         Code = "backlog_full"         // 429: max_backlog or max_backlog_bytes; RetryAfter estimated from the drain rate
	CodeIdempotencyMismatch Code = "idempotency_mismatch" // 422: the key was used with another fingerprint
	CodeInvalid             Code = "invalid"              // 422: cost > min(burst, admit_burst), or body > max_backlog_bytes
)

// Result is the outcome of one Item, in the order of the items.
type Result struct {
	Outcome Outcome
	// ID is the job id (Accepted, Duplicate).
	ID string
	// State is queued or scheduled (Accepted); the original job's current
	// state (Duplicate; "" when its record has expired).
	State State
	// ETA is a lower bound of the job's slot, as computed at its enqueue:
	// max(run_at, now, max(TAT, now) + (Q − (b − cost))·T) with Q the tokens
	// queued ahead of it (lua/enqueue.lua).
	ETA time.Time
	// Code, RetryAfter (> 0 for CodeRateLimited and CodeBacklogFull, else 0)
	// and Detail (for people) explain a refusal.
	Code       Code
	RetryAfter time.Duration
	Detail     string
	// Admit is the tenant's admission bucket right after this item's
	// decision (every outcome), for the "admit" rate-limit headers.
	Admit Admission
}

// Admission is the state of a tenant's admission token bucket (capacity
// Burst, one token per Interval) at one decision of an Enqueue call.
type Admission struct {
	// Tokens is the whole tokens left, 0 … Burst.
	Tokens int64
	// FullIn is the time until the bucket is full again; 0 when it is full.
	FullIn time.Duration
	// Interval is the refill interval of the effective policy (admit_us),
	// the same for every item of one call.
	Interval time.Duration
	// Burst is the bucket's capacity (admit_burst), the same for every item
	// of one call.
	Burst int64
}

// Enqueue admits and stores items for tenant in one script on the tenant's
// shard (docs/design.md §2.1): per item, in order, idempotency, admission token bucket
// (charging Cost), backlog caps, then the job is stored in the backlog
// (queued) or the shard's delayed set (scheduled); then reschedule(tenant) and
// a wake-up PUBLISH when the shard's earliest time moved earlier. Items are
// decided one by one: a batch can be partially accepted, and a refused item
// changes nothing. The error is for the call as a whole (bad arguments:
// ErrInvalid; Redis failures), in which case nothing was stored — except
// a *NotReplicatedError (Config.WaitReplicas), which comes with the
// results: the accepted items are stored on the master, and fewer replicas
// than asked confirmed them (or, for a call of replays only, the originals)
// in time.
//
// Concurrent Enqueues of fewer than EnqueueShareItems items of one shard
// share script calls: one with no call of its shard in flight goes at
// once; those that arrive meanwhile go together in the next call (at most
// EnqueueShareMax of them and EnqueueShareItems items in all), each
// decided as if alone and answered its own results, and the script's own
// cost per call — its round trip, its reads of the shard — is paid once
// for all of them. A larger Enqueue runs its own call at once, as every
// Enqueue did before. One whose ctx ends while it waits (or has ended) is
// not sent: it returns an error that wraps ErrNotSent and ctx.Err(). Once
// sent, a call runs on no caller's context (until the latest of its
// callers' deadlines, at most a minute): a caller that gives up then
// returns ctx.Err() while its jobs may still be stored.
func (s *Store) Enqueue(ctx context.Context, tenant string, items []Item) ([]Result, error) {
	shard := s.keys.shardOf(tenant)
	args, err := s.enqueueArgs(tenant, shard, items)
	if err != nil {
		return nil, fmt.Errorf("enqueue for tenant %q: %w", tenant, err)
	}
	r := &enqueueReq{args: args, n: len(items)}
	if r.n >= EnqueueShareItems { // nothing to share a call with: at once, on ctx
		err = s.enqueueCall(ctx, shard, []*enqueueReq{r})
	} else {
		err = s.enqueues.do(ctx, shard, r)
	}
	if err != nil {
		return nil, fmt.Errorf("enqueue for tenant %q: %w", tenant, err)
	}
	if s.waiting() {
		if err := s.replicated(ctx, shard, r.res, r.acked); err != nil {
			return r.res, fmt.Errorf("enqueue for tenant %q: %w", tenant, err)
		}
	}
	return r.res, nil
}

// EnqueueShareMax is the most Enqueue calls one script call carries, and
// EnqueueShareItems the most items of the calls it combines; an Enqueue of
// that many items or more runs its own call at once. Past ~100 items a
// script call's own cost is a few per cent of it, while a larger call
// holds Redis longer and works over more memory, and a queue behind one
// call in flight per shard would only add a round trip between them.
const (
	EnqueueShareMax   = 64
	EnqueueShareItems = 100
)

// enqueueCallTimeout bounds a shared enqueue call whose callers have no
// deadline.
const enqueueCallTimeout = time.Minute

// enqueueReq is one Enqueue's request in a shared call and, once answered,
// its results.
type enqueueReq struct {
	batchState
	args  []any // enqueueArgs's: tenant, n, the items' values
	n     int
	res   []Result
	acked int // replicas that confirmed the call (Config.WaitReplicas)
}

// newEnqueueBatcher returns s's batcher of enqueues: per shard, at most
// EnqueueShareMax requests and EnqueueShareItems items a call; a request
// whose caller gave up before its call is not sent.
func newEnqueueBatcher(s *Store) *batcher[int, *enqueueReq] {
	b := newBatcher(EnqueueShareMax, s.enqueueShared)
	b.budget, b.weight, b.dropEnded = EnqueueShareItems, func(r *enqueueReq) int { return r.n }, true
	return b
}

// enqueueShared runs one enqueue call for reqs and answers each, bounded
// by the latest of their callers' deadlines, at most enqueueCallTimeout.
func (s *Store) enqueueShared(shard int, reqs []*enqueueReq) {
	deadline, bounded := time.Time{}, true
	for _, r := range reqs {
		d, ok := r.ctx.Deadline()
		bounded = bounded && ok
		if d.After(deadline) {
			deadline = d
		}
	}
	if most := time.Now().Add(enqueueCallTimeout); !bounded || deadline.After(most) {
		deadline = most
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	err := s.enqueueCall(ctx, shard, reqs)
	for _, r := range reqs {
		r.answer(err)
	}
}

// enqueueCall runs enqueue.lua for reqs (of one shard) and decodes each
// one's results. The same call run twice stores each job once: go-redis
// re-sends a call whose connection broke before the reply, and the script
// answers the jobs the first run stored as they were stored (enqueue.lua).
func (s *Store) enqueueCall(ctx context.Context, shard int, reqs []*enqueueReq) error {
	d, acked, err := s.runWaited(ctx, scriptEnqueue, shard, enqueueArgv(reqs)...)
	if err != nil {
		return err
	}
	if d.Len() != 3+len(reqs) {
		d.fail("%d elements for %d requests", d.Len(), len(reqs))
	}
	for j, r := range reqs {
		q := d.list(3 + j)
		if q.Len() != 2+r.n {
			q.fail("%d elements for %d items", q.Len(), r.n)
		}
		interval, burst := time.Duration(q.int(0))*time.Microsecond, q.int(1)
		r.res, r.acked = make([]Result, r.n), acked
		for i := range r.res {
			r.res[i] = decodeResult(q.list(2 + i))
			r.res[i].Admit.Interval, r.res[i].Admit.Burst = interval, burst
		}
	}
	return d.Err()
}

// enqueueArgv is enqueue.lua's ARGV[3…] for reqs: their count, then each
// one's arguments.
func enqueueArgv(reqs []*enqueueReq) []any {
	n := 1
	for _, r := range reqs {
		n += len(r.args)
	}
	argv := make([]any, 0, n)
	argv = append(argv, len(reqs))
	for _, r := range reqs {
		argv = append(argv, r.args...)
	}
	return argv
}

// replicated checks an enqueue's confirmation (acked replicas after its
// script): a call that stored a job needs WaitReplicas; one that only
// replayed earlier jobs confirms the master's writes so far (the
// originals among them); one that refused everything wrote nothing.
func (s *Store) replicated(ctx context.Context, shard int, results []Result, acked int) error {
	var stored, replayed bool
	for _, r := range results {
		stored = stored || r.Outcome == Accepted
		replayed = replayed || r.Outcome == Duplicate
	}
	switch {
	case stored:
		return s.checkAcked(acked)
	case replayed:
		return s.confirm(ctx, shard)
	}
	return nil
}

// enqueueArgs validates the call and builds ARGV[3…] of enqueue.lua.
func (s *Store) enqueueArgs(tenant string, shard int, items []Item) ([]any, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, err
	}
	if len(items) < 1 || len(items) > MaxBatch {
		return nil, invalidf("%d items: want 1 … %d", len(items), MaxBatch)
	}
	args := make([]any, 0, 2+itemValues*len(items))
	args = append(args, tenant, len(items))
	now := s.now()
	for i, it := range items {
		if err := it.check(); err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		id, err := s.jobID(shard, now)
		if err != nil {
			return nil, err
		}
		var runAt int64
		if !it.RunAt.IsZero() {
			runAt = it.RunAt.UnixMicro()
		}
		var unless Refusal
		if it.Unless != nil {
			unless = *it.Unless
		}
		args = append(args, id, it.Type, max(it.Cost, 1), runAt, it.Delay.Microseconds(),
			it.IdemKey, hex.EncodeToString(it.Fingerprint[:]), it.Body, string(unless.Code), unless.Detail, it.Callback,
			upstreamsField(it.Upstreams), it.Destination)
	}
	return args, nil
}

// itemValues is the number of ARGV values per item of enqueue.lua.
const itemValues = 13

// check validates what can be checked without the tenant's policy: the
// job's attributes with the job package's checks, then Unless.
func (it Item) check() error {
	cost := it.Cost
	if cost == 0 {
		cost = 1
	}
	attrs := job.Attrs{Type: it.Type, Cost: cost, Delay: it.Delay, RunAt: it.RunAt, IdemKey: it.IdemKey, Callback: it.Callback}
	if err := attrs.Check(policy.MaxBurst); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := checkUpstreams(it.Upstreams); err != nil {
		return err
	}
	if len(it.Destination) > 1024 || strings.ContainsAny(it.Destination, " \t\r\n") {
		return invalidf("destination: want at most 1024 bytes and no space")
	}
	if it.Unless != nil && (it.Unless.Code == "" || len(it.Unless.Code) > 64 || len(it.Unless.Detail) > 1024) {
		return invalidf("unless: want a code of 1–64 bytes and a detail of at most 1024")
	}
	return nil
}

// decodeResult reads one item's reply (see lua/enqueue.lua); Admit.Interval
// and Admit.Burst come from the call's header and are set by the caller.
func decodeResult(d decoder) Result {
	var r Result
	switch kind := d.str(0); kind {
	case "accepted", "duplicate":
		r = Result{Outcome: Accepted, ID: d.str(1), State: State(d.str(2)), ETA: redisscript.MicrosTime(d.int(3))}
		if kind == "duplicate" {
			r.Outcome = Duplicate
		}
	case "refused":
		r = Result{Outcome: Refused, Code: Code(d.str(1)),
			RetryAfter: microsSat(d.int(2)), Detail: d.str(3)}
	default:
		d.fail("item outcome %q", kind)
		return Result{}
	}
	r.Admit.Tokens, r.Admit.FullIn = d.int(4), time.Duration(d.int(5))*time.Microsecond
	return r
}
