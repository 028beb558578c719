package wire

import (
	"encoding/json"
	"fmt"
	"strconv"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// The batched hand-off (issue 13). A dispatcher pass hands its webhook and
// http releases to asynq as tasks of type TaskTypeBatch, each carrying a
// Batch: the releases of one shard and one pass, at most a bounded number
// and within a bounded slot span, in slot order. task jobs are not batched:
// they still go one task per job to the producer's queue (handoff.go).
//
// A batch goes to HandoffQueue(prefix, shard mod HandoffQueues): a small
// fixed set of asynq queues, each its own hash slot on a Redis Cluster
// (asynq's keys are "asynq:{<queue>}:…"), so no single slot carries every
// job. After enqueuing a batch the dispatcher publishes the queue's name on
// HandoffChannel(prefix); a worker polls a hand-off queue in Redis only when
// told a batch may be there (or, as a safety net, every few hundred
// milliseconds), so idle workers cost Redis almost nothing.
//
// A lost batch (its worker died, asynq dropped it) is recovered job by job
// by the existing leases and the sweep; a duplicate or late batch is fenced
// job by job by the generation check at the claim, as per-job tasks were.
const TaskTypeBatch = "sluice:batch"

// HandoffQueues is the number of hand-off queues. Part of the protocol
// between dispatchers and workers of one deployment: change it only with a
// new task type.
const HandoffQueues = 8

// HandoffQueue is hand-off queue i (0 ≤ i < HandoffQueues) under key prefix
// p: "<p>:h<i>". A prefix never contains braces, so neither does the queue.
func HandoffQueue(p string, i int) string { return p + ":h" + strconv.Itoa(i) }

// HandoffQueueOf is the hand-off queue of a shard's batches.
func HandoffQueueOf(p string, shard int) string { return HandoffQueue(p, shard%HandoffQueues) }

// HandoffQueueNames lists every hand-off queue under prefix p, in order.
func HandoffQueueNames(p string) []string {
	out := make([]string, HandoffQueues)
	for i := range out {
		out[i] = HandoffQueue(p, i)
	}
	return out
}

// HandoffChannel is the pub/sub channel on which a dispatcher publishes the
// name of a hand-off queue it has just enqueued a batch on.
func HandoffChannel(p string) string { return p + ":handoff" }

// Batch is the payload of a TaskTypeBatch task: jobs of one shard, each as
// its per-job Payload (id, gen to claim with, send time), in slot order.
type Batch struct {
	Shard int       `json:"shard"`
	Jobs  []Payload `json:"jobs"`
}

// EncodeBatch is b as a task payload.
func EncodeBatch(b Batch) []byte {
	out, _ := json.Marshal(b) // plain fields: cannot fail
	return out
}

// DecodeBatch parses a TaskTypeBatch payload; every job must be a valid
// Payload (DecodePayload's rules) and there must be at least one. A payload
// exactly as EncodeBatch writes it is read by a decoder of that text alone
// (batchfast.go); any other is decoded with github.com/go-json-experiment/json,
// several times faster than encoding/json on a batch of pre-claimed jobs
// (a worker decodes one per delivered batch), with encoding/json's
// leniency: names matched without case, duplicate names and invalid UTF-8
// accepted, unknown names ignored. Both give what encoding/json gives.
func DecodeBatch(raw []byte) (Batch, error) {
	b, ok := decodeBatchFast(raw) // EncodeBatch's own text
	if !ok {
		b = Batch{}
		if err := jsonv2.Unmarshal(raw, &b, batchDecoding); err != nil {
			return Batch{}, fmt.Errorf("%w: batch: %w", ErrBadPayload, err)
		}
	}
	if b.Shard < 0 || len(b.Jobs) == 0 {
		return Batch{}, fmt.Errorf("%w: batch of shard %d with %d jobs", ErrBadPayload, b.Shard, len(b.Jobs))
	}
	for i, p := range b.Jobs {
		if p.ID == "" || p.Gen < 1 || p.SlotUS <= 0 {
			return Batch{}, fmt.Errorf("%w: batch job %d: %+v", ErrBadPayload, i, p)
		}
	}
	return b, nil
}

// batchDecoding are DecodeBatch's options: encoding/json's leniency.
var batchDecoding = jsonv2.JoinOptions(jsonv2.MatchCaseInsensitiveNames(true), jsontext.AllowDuplicateNames(true),
	jsontext.AllowInvalidUTF8(true))

// AsynqQueueKey is asynq's key of the tasks of queue in state (pending,
// active, scheduled, retry, archived, completed): "asynq:{<queue>}:<state>".
// asynq exports no function for it; this is the layout of asynq v0.26.0's
// internal/base (PendingKey, ActiveKey, ScheduledKey, RetryKey, ArchivedKey,
// CompletedKey: QueueKeyPrefix(qname) + state, QueueKeyPrefix being
// "asynq:{<qname>}:"). Check it when upgrading asynq.
func AsynqQueueKey(queue, state string) string {
	return "asynq:{" + queue + "}:" + state
}
