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
	// Claimed is set when the pass claimed the job itself (a pre-claim,
	// docs/design.md §2.2): the job is running already, SendAt is the
	// claim's send instant, and the worker sends it without a claim. nil:
	// the worker claims it.
	Claimed *Claimed
}

// TaskID is the asynq task id of this release, "<id>:<gen>": unique per
// delivery, so a duplicate Enqueue of the same release conflicts.
func (r Release) TaskID() string { return r.ID + ":" + strconv.FormatInt(r.Gen, 10) }

// Payload is the asynq payload of webhook and http tasks, JSON
// {"id","gen","slot_us"}: everything a worker needs to wait for the send
// time and claim; the job itself comes back from the claim.
//
// Claimed (field "claimed", added in issue #33; absent otherwise) marks a
// pre-claimed job of a batch: the pass claimed it (docs/design.md §2.2), gen
// is its running generation, slot_us its send instant, and Claimed what a
// claim would have answered. A worker of an earlier version ignores the
// field, claims, gets stale and drops the job; the sweep then returns it
// without an attempt (dispatchers pre-claim only while every live worker
// says it runs pre-claimed jobs: internal/fleet).
type Payload struct {
	ID      string   `json:"id"`
	Gen     int64    `json:"gen"`
	SlotUS  int64    `json:"slot_us"` // Redis time, µs since the Unix epoch
	Claimed *Claimed `json:"claimed,omitempty"`
}

// Claimed is a pre-claimed job as the pass's claim gave it: the fields of
// a claim's reply that the release does not carry (tenant, type and gen
// travel in the release). Times are Redis time in µs since the Unix epoch.
type Claimed struct {
	Tenant    string   `json:"tenant"`
	Type      string   `json:"type"`
	Body      string   `json:"body"`       // the canonical job JSON stored at enqueue
	Attempt   int64    `json:"attempt"`    // this attempt's number, 1-based
	TimeoutUS int64    `json:"timeout_us"` // the per-attempt timeout
	SlotUS    int64    `json:"slot_us"`    // the job's planned slot
	CreatedUS int64    `json:"created_us"`
	Cost      int64    `json:"cost"`
	Upstreams []string `json:"upstreams,omitempty"`
	// Signing is a webhook job's tenant's signing state as the pass read it
	// (store.SecretSet's fields); nil for other jobs, and when it could not
	// be given (the worker then reads it itself).
	Signing *Signing `json:"signing,omitempty"`
}

// Signing is a tenant's signing state: its policy's unsigned flag and its
// live secrets by API, sealed, as read at NowUS.
type Signing struct {
	NowUS    int64           `json:"now_us"`
	Unsigned bool            `json:"unsigned,omitempty"`
	Secrets  []SigningSecret `json:"secrets,omitempty"`
}

// SigningSecret is one sealed secret of a Signing.
type SigningSecret struct {
	ID        string `json:"id"`
	CreatedUS int64  `json:"created_us"`
	ExpiresUS int64  `json:"expires_us,omitempty"` // 0: never
	Sealed    string `json:"sealed"`
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
