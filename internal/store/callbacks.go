package store

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// Callbacks (job.Spec.Callback, docs/design.md §4.4). A job
// enqueued with a callback URL keeps it in record field cb. Every terminal
// transition — finish (succeeded, dead), the sweep's and the claim's dead,
// cancel — queues the job id on its shard's callback set (ZSET
// <p>:{sN}:cb, id → due µs) in the same script, so a callback is never
// lost once the job's state is. Senders (internal/worker Callbacks) take
// due entries with TakeCallbacks, which leases them, send, and report with
// CallbackDone. Nothing here touches a tenant's rate or backlog: callbacks
// are outside the GCRA.

// CallbackLeaseMin bounds TakeCallbacks' lease from below.
const CallbackLeaseMin = time.Millisecond

// TakeCallbacks takes up to n callbacks of shard whose due time has come,
// oldest first, and leases each for lease: its due time moves to now +
// lease, so no other taker gets it meanwhile, and it is due again when the
// lease ends without a CallbackDone (a sender killed mid-send): at least
// once. It returns the job ids and how long until the next callback left
// in the shard's set is due (by Redis's clock; the taken ones' lease ends
// count), or -1 when the set is empty.
func (s *Store) TakeCallbacks(ctx context.Context, shard, n int, lease time.Duration) (ids []string, next time.Duration, err error) {
	if shard < 0 || shard >= s.keys.shards || n < 1 || lease < CallbackLeaseMin {
		return nil, 0, fmt.Errorf("take callbacks of shard %d: %w", shard,
			invalidf("shard %d of %d, n %d, lease %s: want a shard of the Store, n ≥ 1, lease ≥ %s",
				shard, s.keys.shards, n, lease, CallbackLeaseMin))
	}
	d, err := s.run(ctx, scriptCallbackTake, shard, n, lease.Microseconds())
	if err != nil {
		return nil, 0, fmt.Errorf("take callbacks of shard %d: %w", shard, err)
	}
	now, due := d.int(1), d.int(2)
	ids = make([]string, 0, max(d.Len()-3, 0))
	for i := 3; i < d.Len(); i++ {
		ids = append(ids, d.str(i))
	}
	if err := d.Err(); err != nil {
		return nil, 0, fmt.Errorf("take callbacks of shard %d: %w", shard, err)
	}
	next = -1
	if due > 0 {
		next = time.Duration(max(due-now, 0)) * time.Microsecond
	}
	return ids, next, nil
}

// CallbackChannel is shard's callback channel under prefix,
// "<p>:{s<shard>}:callbacks": every script that queues a callback due now
// PUBLISHes on it (lua/lifecycle.lua callback_due), and the workers'
// Callbacks subscribe to it.
func CallbackChannel(prefix string, shard int) string {
	return keyspace{prefix: prefix}.base(shard) + "callbacks"
}

// CallbackOutcome is how one send of a callback went.
type CallbackOutcome string

// The outcomes CallbackDone takes.
const (
	CallbackDelivered CallbackOutcome = "delivered" // a 2xx: done
	CallbackRetry     CallbackOutcome = "retry"     // failed: again on the tenant's retry curve, dropped after max_attempts
	CallbackDrop      CallbackOutcome = "drop"      // can never succeed (egress refused): dropped now
)

// CallbackStatus is what CallbackDone did.
type CallbackStatus string

// The statuses CallbackDone reports.
const (
	CallbackDone    CallbackStatus = "done"    // delivered, off the set
	CallbackStale   CallbackStatus = "stale"   // the job is gone, live again, or ended again since: nothing recorded
	CallbackDropped CallbackStatus = "dropped" // off the set unsent: drop, or max_attempts failures
	CallbackRetried CallbackStatus = "retry"   // due again at Due
)

// CallbackReport is CallbackDone's answer.
type CallbackReport struct {
	Status   CallbackStatus
	Due      time.Time // when retried: the next send's time
	Failures int64     // failed sends so far
}

// CallbackDone records one send of job id's callback, which told of the
// terminal state the job reached at ended (Job.Ended). Delivered takes it
// off the callback set; Retry counts a failure (record field cb_n) and makes
// it due again after the tenant policy's retry backoff for that count
// (min_backoff doubling, ±10 % jitter, capped at max_backoff), or drops it
// once the failures reach retry.max_attempts; Drop drops it at once. A job
// whose record is gone or live again only leaves the set, and one that
// ended again since (a replayed dead letter) is left alone (CallbackStale).
func (s *Store) CallbackDone(ctx context.Context, id string, ended time.Time, o CallbackOutcome) (CallbackReport, error) {
	shard, err := s.jobShard(id)
	if err != nil {
		return CallbackReport{}, fmt.Errorf("callback of job %q: %w", id, err)
	}
	if o != CallbackDelivered && o != CallbackRetry && o != CallbackDrop {
		return CallbackReport{}, fmt.Errorf("callback of job %q: %w", id, invalidf("outcome %q", o))
	}
	d, err := s.run(ctx, scriptCallbackDone, shard, id, ended.UnixMicro(), string(o), s.seedArg())
	if err != nil {
		return CallbackReport{}, fmt.Errorf("callback of job %q: %w", id, err)
	}
	r := CallbackReport{Status: CallbackStatus(d.str(1)), Due: redisscript.MicrosTime(d.int(2)), Failures: d.int(3)}
	if err := d.Err(); err != nil {
		return CallbackReport{}, fmt.Errorf("callback of job %q: %w", id, err)
	}
	return r, nil
}

// PendingCallbacks is the number of callbacks of shard waiting or being
// sent (ZCARD of its callback set), for metrics and tests.
func (s *Store) PendingCallbacks(ctx context.Context, shard int) (int64, error) {
	n, err := s.rdb.ZCard(ctx, s.keys.callbacks(shard)).Result()
	if err != nil {
		return 0, fmt.Errorf("pending callbacks of shard %d: %w", shard, err)
	}
	return n, nil
}
