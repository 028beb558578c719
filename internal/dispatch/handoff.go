package dispatch

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/internal/store"
)

// The hand-off contract between the dispatcher and the workers (DESIGN §2.2,
// §2.5). webhook and http jobs become asynq tasks of type TaskTypeWebhook or
// TaskTypeHTTP on the queues WebhookQueue(prefix) and HTTPQueue(prefix),
// with a Payload; task jobs become tasks of the producer's type on the
// producer's queue, carrying the protocol in the headers HeaderJob,
// HeaderGen and HeaderSlot. Every task's id is store.Release.TaskID,
// "<id>:<gen>": a second enqueue of the same generation conflicts
// (asynq.ErrTaskIDConflict) while the first task exists.
const (
	TaskTypeWebhook = "sluice:webhook"
	TaskTypeHTTP    = "sluice:http"

	HeaderJob  = "sluice-job"     // the job id
	HeaderGen  = "sluice-gen"     // the generation to claim with, decimal
	HeaderSlot = "sluice-slot-us" // the slot, Redis time in µs, decimal
)

// Job types as stored by the API (internal/job).
const (
	typeWebhook = "webhook"
	typeHTTP    = "http"
	typeTask    = "task"
)

// WebhookQueue is the asynq queue of webhook jobs under key prefix p:
// "<p>:webhook", which is "sluice:webhook" with the default prefix. Deriving
// the queue from the prefix keeps two deployments (or two tests) that share
// one Redis apart. A prefix never contains braces, so neither does the queue.
func WebhookQueue(p string) string { return p + ":webhook" }

// HTTPQueue is the asynq queue of http jobs under key prefix p: "<p>:http".
func HTTPQueue(p string) string { return p + ":http" }

// Payload is the asynq payload of webhook and http tasks, JSON
// {"id","gen","slot_us"}: everything a worker needs to wait for the slot and
// claim; the job itself comes back from the claim.
type Payload struct {
	ID     string `json:"id"`
	Gen    int64  `json:"gen"`
	SlotUS int64  `json:"slot_us"` // Redis time, µs since the Unix epoch
}

// Slot is the payload's slot as a time (Redis clock).
func (p Payload) Slot() time.Time { return time.UnixMicro(p.SlotUS) }

// ErrBadPayload is wrapped by DecodePayload's errors.
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
// attempt and the lease slack; taskFor adds the lateness the tenant's send
// schedule carries (SendAt − Slot) to the slack.
func TaskTimeout(lead, attempt, grace time.Duration) time.Duration {
	total := 2*lead + max(attempt, 0) + grace
	secs := math.Ceil(total.Seconds())
	return time.Duration(max(secs, 1)) * time.Second
}

// taskFor builds the asynq task and options of one release (the hand-off
// contract above). A task job's asynq payload is empty: the middleware gets
// the job's payload from the claim. An unknown job type, or a task job
// without a queue, a task type or with braces in its queue, is an error:
// such a job cannot have been admitted by the API.
func (d *Dispatcher) taskFor(r store.Release) (*asynq.Task, []asynq.Option, error) {
	opts := []asynq.Option{
		asynq.TaskID(r.TaskID()),
		asynq.MaxRetry(0),
		// The worker first waits for SendAt: the slot plus the lateness
		// the tenant's send schedule carries.
		asynq.Timeout(TaskTimeout(d.cfg.Pass.Lead, r.Timeout, d.cfg.Pass.Grace+max(r.SendAt.Sub(r.Slot), 0))),
	}
	switch r.Type {
	case typeWebhook, typeHTTP:
		payload, _ := json.Marshal(Payload{ID: r.ID, Gen: r.Gen, SlotUS: r.SendAt.UnixMicro()}) // plain fields: cannot fail
		taskType, queue := TaskTypeWebhook, WebhookQueue(d.cfg.Prefix)
		if r.Type == typeHTTP {
			taskType, queue = TaskTypeHTTP, HTTPQueue(d.cfg.Prefix)
		}
		return asynq.NewTask(taskType, payload), append(opts, asynq.Queue(queue)), nil
	case typeTask:
		if r.Queue == "" || r.TaskType == "" || strings.ContainsAny(r.Queue, "{}") {
			return nil, nil, fmt.Errorf("task job %s: queue %q, task type %q: want a queue without braces and a task type", r.ID, r.Queue, r.TaskType)
		}
		headers := map[string]string{
			HeaderJob:  r.ID,
			HeaderGen:  strconv.FormatInt(r.Gen, 10),
			HeaderSlot: strconv.FormatInt(r.SendAt.UnixMicro(), 10),
		}
		return asynq.NewTaskWithHeaders(r.TaskType, nil, headers), append(opts, asynq.Queue(r.Queue)), nil
	}
	return nil, nil, fmt.Errorf("job %s: unknown type %q", r.ID, r.Type)
}
