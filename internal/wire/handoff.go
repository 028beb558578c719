package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Job types, as a job's "type" field and the store record them.
const (
	TypeWebhook = "webhook"
	TypeHTTP    = "http"
	TypeTask    = "task"
)

// The hand-off from the dispatcher to the workers. webhook and http jobs
// become asynq tasks of type TaskTypeWebhook or TaskTypeHTTP on the queues
// WebhookQueue(prefix) and HTTPQueue(prefix), with a Payload; task jobs
// become tasks of the producer's type on the producer's queue, carrying the
// protocol in the headers HeaderJob, HeaderGen and HeaderSlot. Every task's
// id is Release.TaskID, "<id>:<gen>": a second enqueue of the same
// generation conflicts (asynq.ErrTaskIDConflict) while the first task
// exists.
const (
	TaskTypeWebhook = "sluice:webhook"
	TaskTypeHTTP    = "sluice:http"

	HeaderJob  = "sluice-job"     // the job id
	HeaderGen  = "sluice-gen"     // the generation to claim with, decimal
	HeaderSlot = "sluice-slot-us" // the send time, Redis time in µs, decimal
)

// WebhookQueue is the asynq queue of webhook jobs under key prefix p:
// "<p>:webhook", which is "sluice:webhook" with the default prefix. Deriving
// the queue from the prefix keeps two deployments (or two tests) that share
// one Redis apart. A prefix never contains braces, so neither does the queue.
func WebhookQueue(p string) string { return p + ":webhook" }

// HTTPQueue is the asynq queue of http jobs under key prefix p: "<p>:http".
func HTTPQueue(p string) string { return p + ":http" }

// Release is a job a dispatcher pass released: hand it to asynq as task
// TaskID() with MaxRetry(0) and Timeout = TaskTimeout (docs/design.md §2.2).
type Release struct {
	ID     string
	Tenant string
	Type   string // TypeWebhook, TypeHTTP or TypeTask
	Cost   int64
	Gen    int64     // the job's generation after the release; the worker claims with it
	Slot   time.Time // the job's planned slot: the instant it may be sent (Redis time)
	// SendAt is when the worker should claim it (the task carries it):
	// Slot, or later by the lateness the tenant's send schedule carries.
	SendAt time.Time
	// Timeout is the tenant's per-attempt timeout at the release.
	Timeout time.Duration
	// Queue and TaskType are, for task jobs, the body's "queue" and
	// "task_type" (docs/design.md §2.5); "" for other types or when the body lacks
	// them. The payload travels with the claim.
	Queue    string
	TaskType string
}

// TaskID is the asynq task id of this release, "<id>:<gen>": unique per
// delivery, so a duplicate Enqueue of the same release conflicts.
func (r Release) TaskID() string { return r.ID + ":" + strconv.FormatInt(r.Gen, 10) }

// Payload is the asynq payload of webhook and http tasks, JSON
// {"id","gen","slot_us"}: everything a worker needs to wait for the send
// time and claim; the job itself comes back from the claim.
type Payload struct {
	ID     string `json:"id"`
	Gen    int64  `json:"gen"`
	SlotUS int64  `json:"slot_us"` // Redis time, µs since the Unix epoch
}

// Slot is the payload's slot as a time (Redis clock).
func (p Payload) Slot() time.Time { return time.UnixMicro(p.SlotUS) }

// Headers is the payload as the headers of a task job (HeaderJob,
// HeaderGen, HeaderSlot).
func (p Payload) Headers() map[string]string {
	return map[string]string{
		HeaderJob:  p.ID,
		HeaderGen:  strconv.FormatInt(p.Gen, 10),
		HeaderSlot: strconv.FormatInt(p.SlotUS, 10),
	}
}

// ErrBadPayload is wrapped by DecodePayload's and PayloadFromHeaders' errors.
var ErrBadPayload = errors.New("bad sluice task payload")

// DecodePayload parses a webhook or http task's payload; a missing id, a
// generation < 1 or a slot ≤ 0 is an error wrapping ErrBadPayload.
func DecodePayload(b []byte) (Payload, error) {
	var p Payload
	if err := json.Unmarshal(b, &p); err != nil {
		return Payload{}, fmt.Errorf("%w: %w", ErrBadPayload, err)
	}
	if p.ID == "" || p.Gen < 1 || p.SlotUS <= 0 {
		return Payload{}, fmt.Errorf("%w: %q", ErrBadPayload, b)
	}
	return p, nil
}

// PayloadFromHeaders reads the protocol of a task job from its headers
// (HeaderJob, HeaderGen, HeaderSlot); errors wrap ErrBadPayload.
func PayloadFromHeaders(h map[string]string) (Payload, error) {
	gen, errGen := strconv.ParseInt(h[HeaderGen], 10, 64)
	slot, errSlot := strconv.ParseInt(h[HeaderSlot], 10, 64)
	p := Payload{ID: h[HeaderJob], Gen: gen, SlotUS: slot}
	if errGen != nil || errSlot != nil || p.ID == "" || p.Gen < 1 || p.SlotUS <= 0 {
		return Payload{}, fmt.Errorf("%w: headers %s=%q %s=%q %s=%q", ErrBadPayload,
			HeaderJob, h[HeaderJob], HeaderGen, h[HeaderGen], HeaderSlot, h[HeaderSlot])
	}
	return p, nil
}

// TaskTimeout is the asynq Timeout of a released job whose attempt timeout
// is attempt: ⌈2·lead + attempt + grace⌉ in whole seconds, at least 1 s
// (asynq stores whole seconds and turns a sub-second timeout into 30 min).
// It covers the wait for the slot (≤ D), one early claim's wait (≤ D), the
// attempt and the lease slack; the dispatcher adds the lateness the
// tenant's send schedule carries (SendAt − Slot) to grace.
func TaskTimeout(lead, attempt, grace time.Duration) time.Duration {
	total := 2*lead + max(attempt, 0) + grace
	secs := math.Ceil(total.Seconds())
	return time.Duration(max(secs, 1)) * time.Second
}
