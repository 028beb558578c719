package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// State is a job's lifecycle state (docs/design.md §2).
type State string

// The states. A Result of a duplicate whose record has expired carries "".
const (
	StateScheduled State = "scheduled" // delayed set, until run_at
	StateQueued    State = "queued"    // tenant backlog or head lane
	StateReleased  State = "released"  // handed to asynq, lease set
	StateRunning   State = "running"   // claimed by a worker, lease set
	StateRetrying  State = "retrying"  // delayed set, until the backoff ends
	StateSucceeded State = "succeeded" // terminal; record expires after retention
	StateDead      State = "dead"      // terminal; tenant dead set until trimmed
	StateCanceled  State = "canceled"  // terminal tombstone; expires after retention
)

// Terminal reports whether s is final: succeeded, dead or canceled.
func (s State) Terminal() bool {
	return s == StateSucceeded || s == StateDead || s == StateCanceled
}

// Job is a job record (hash j:<id>). Times are Redis time.
//
// Record fields: tenant, type, cost, bytes, body, state, gen, attempt,
// created, run_at, eta, idem, slot, ended (as below), and
//
//	resv     the send instant an out-of-order claim reserved (µs; claim.lua), 0 = none
//	grace    the lease slack the pass gave the current delivery (µs); the
//	         claim keeps it for the running lease
//	claimed  the last claim's time (µs)
//	first    the first attempt's claim time (µs), for max_retry_duration
//	due      a retrying job's due time (µs)
//	log      the attempt log: one JSON object a line, newest last, the last
//	         N kept (FinishConfig.AttemptLog)
//	logged   attempts ever logged
//	reason   why the job died, when told: "gone" (a 410; Finish),
//	         "unknown_upstream" (DeadLetterUnknownUpstream); a replay clears it
//	result   an http job's result: the last attempt's response (JSON of
//	         JobResult without its body; result.go)
//	rb1 …    the result's body, raw, in chunks (rbn: how many; result.go)
//	cb       the callback URL (enqueue), "" = none
//	cb_n     callback attempts failed so far
//	acost    the actual cost the last attempt that reported one reported
//	         (Finish, cost correction)
type Job struct {
	ID     string
	Tenant string
	Type   string // as given at enqueue: webhook, http, task
	Cost   int64  // tokens reserved at each release (the cost given at enqueue)
	// ActualCost is the actual cost the latest attempt that learned one
	// reported (wire.AttemptOutcome.ActualCost); 0 when none did.
	ActualCost int64
	Bytes      int64  // body size at enqueue
	Body       []byte // the job as the API stored it; nil once succeeded or canceled
	State      State
	Gen        int64     // generation, bumped by every release, sweep, return, replay (docs/design.md §1)
	Attempt    int64     // attempts used
	Created    time.Time // enqueue time
	RunAt      time.Time // requested run_at (or now + delay); zero when none
	ETA        time.Time // the lower bound reported at enqueue
	Slot       time.Time // the slot of the last release; zero before the first
	Ended      time.Time // terminal time; zero while live
	// DeadReason is why a dead job died, when recorded: DeadReasonGone,
	// DeadReasonUnknownUpstream.
	DeadReason string
	IdemKey    string    // idempotency key, "" when none
	Claimed    time.Time // the last claim; zero before the first
	First      time.Time // the first attempt's claim; zero before it
	Due        time.Time // when retrying: the next attempt's earliest time
	// Attempts is the attempt log, oldest first: the last
	// FinishConfig.AttemptLog attempts; Logged counts all of them.
	Attempts []Attempt
	Logged   int64
	// Result is an http job's last response (nil before one arrived, and
	// for other jobs).
	Result *JobResult
	// Callback is the URL told of the job's terminal state; "" = none.
	Callback string
	// CallbackFailures counts the failed sends of the pending callback.
	CallbackFailures int64
}

// Attempt is one entry of a job's attempt log.
type Attempt struct {
	At      time.Time     // when the outcome was recorded
	Gen     int64         // the generation it was claimed at
	Number  int64         // the attempt number at the time (attempts used, this one included)
	Outcome string        // a wire.FinishKind's String, or "lease_expired" (the sweep)
	Status  int           // HTTP status, 0 when none (timeout, connection error)
	Latency time.Duration // request time
	Error   string
	Stale   bool // reported by a Finish whose gen was no longer current
	// Body is the first 4 KiB of the response body when valid UTF-8, else
	// BodyBase64 is (base64); both "" when no body.
	Body, BodyBase64 string
}

// GetJob returns the record of job id. ErrNotFound when there is none (a
// malformed id included: no such job can exist).
func (s *Store) GetJob(ctx context.Context, id string) (Job, error) {
	if _, err := s.jobShard(id); err != nil {
		return Job{}, fmt.Errorf("get job %q: %w", id, err)
	}
	key, err := s.keys.job(id)
	if err != nil {
		return Job{}, fmt.Errorf("get job %q: %w", id, err)
	}
	m, err := s.rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return Job{}, fmt.Errorf("get job %q: %w", id, err)
	}
	if len(m) == 0 {
		return Job{}, fmt.Errorf("get job %q: %w", id, ErrNotFound)
	}
	job, err := parseJob(id, m)
	if err != nil {
		return Job{}, fmt.Errorf("get job %q: %w", id, err)
	}
	return job, nil
}

// Cancel cancels job id in one script (docs/design.md §2): queued (backlog or head
// lane), scheduled, retrying and released jobs become canceled tombstones —
// out of every set, the tenant's counters decremented, the body dropped, the
// record and its idempotency key expiring after Config.CanceledRetention.
// A released job's asynq task finds the tombstone at its claim and is done.
// When the cancel moved the shard's earliest time earlier (the tenant freed
// from its concurrency or release cap), it is published on the shard's wake
// channel. It returns the record after the cancel and the state the job left.
// Running and terminal jobs: a *ConflictError (ErrConflict) with their state.
// ErrNotFound when there is no such job.
func (s *Store) Cancel(ctx context.Context, id string) (Job, State, error) {
	shard, err := s.jobShard(id)
	if err != nil {
		return Job{}, "", fmt.Errorf("cancel job %q: %w", id, err)
	}
	d, err := s.run(ctx, scriptCancel, shard, id, s.retention.Microseconds(), max(s.idemRetention, 0).Microseconds())
	if errors.Is(err, ErrConflict) {
		state := State(d.str(1))
		if derr := d.Err(); derr != nil {
			return Job{}, "", fmt.Errorf("cancel job %q: %w", id, derr)
		}
		return Job{}, "", fmt.Errorf("cancel job %q: %w", id, &ConflictError{ID: id, State: state})
	}
	if err != nil {
		return Job{}, "", fmt.Errorf("cancel job %q: %w", id, err)
	}
	from := State(d.str(1))
	fields := d.fields(2)
	if err := d.Err(); err != nil {
		return Job{}, "", fmt.Errorf("cancel job %q: %w", id, err)
	}
	job, err := parseJob(id, fields)
	if err != nil {
		return Job{}, "", fmt.Errorf("cancel job %q: %w", id, err)
	}
	return job, from, nil
}

// jobShard is the shard of job id; ErrNotFound for ids that cannot exist
// in this Store (malformed, or a shard beyond Shards).
func (s *Store) jobShard(id string) (int, error) {
	shard, err := ShardOfJobID(id)
	if err != nil || shard >= s.keys.shards {
		return 0, ErrNotFound
	}
	return shard, nil
}

// DeadReasonGone is Job.DeadReason of a job dead of a 410.
const DeadReasonGone = "gone"

// parseJob reads a record's fields with checked integer conversions.
func parseJob(id string, m map[string]string) (Job, error) {
	p := fieldParser{m: m}
	j := Job{
		ID:               id,
		Tenant:           m["tenant"],
		Type:             m["type"],
		Cost:             p.int("cost"),
		Bytes:            p.int("bytes"),
		State:            State(m["state"]),
		Gen:              p.int("gen"),
		Attempt:          p.int("attempt"),
		Created:          p.micros("created"),
		RunAt:            p.micros("run_at"),
		ETA:              p.micros("eta"),
		Slot:             p.micros("slot"),
		Ended:            p.micros("ended"),
		IdemKey:          m["idem"],
		DeadReason:       m["reason"],
		Claimed:          p.micros("claimed"),
		First:            p.micros("first"),
		Due:              p.micros("due"),
		Logged:           p.int("logged"),
		Callback:         m["cb"],
		CallbackFailures: p.int("cb_n"),
		ActualCost:       p.int("acost"),
	}
	// A succeeded job's body is dropped: emptied, not deleted (lib.lua
	// to_succeeded), so absent here either way.
	if body, ok := m["body"]; ok && j.State != StateSucceeded {
		j.Body = []byte(body)
	}
	if p.err != nil {
		return Job{}, p.err
	}
	attempts, err := parseLog(m["log"])
	if err != nil {
		return Job{}, err
	}
	j.Attempts = attempts
	if j.Result, err = parseResult(m); err != nil {
		return Job{}, fmt.Errorf("%w: field result: %w", ErrProtocol, err)
	}
	return j, nil
}

// logEntry is one line of the attempt log as lib.lua log_attempt writes it.
type logEntry struct {
	At        int64  `json:"at"`
	Gen       int64  `json:"gen"`
	Attempt   int64  `json:"attempt"`
	Outcome   string `json:"outcome"`
	Status    int    `json:"status"`
	LatencyUS int64  `json:"latency_us"`
	Error     string `json:"error"`
	Stale     bool   `json:"stale"`
	Body      string `json:"body"`
	Base64    string `json:"body_base64"`
}

// parseLog parses the log field; "" is an empty log.
func parseLog(s string) ([]Attempt, error) {
	if s == "" {
		return nil, nil
	}
	lines := strings.Split(s, "\n")
	out := make([]Attempt, 0, len(lines))
	for _, line := range lines {
		var e logEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			return nil, fmt.Errorf("%w: attempt log line %q: %w", ErrProtocol, line, err)
		}
		a := Attempt{At: redisscript.MicrosTime(e.At), Gen: e.Gen, Number: e.Attempt, Outcome: e.Outcome,
			Status: e.Status, Latency: redisscript.Micros(e.LatencyUS), Error: e.Error, Stale: e.Stale}
		a.Body, a.BodyBase64 = logBody(e.Body, e.Base64)
		out = append(out, a)
	}
	return out, nil
}

// fieldParser parses optional integer fields of a hash; absent reads as 0,
// a malformed value is a sticky error wrapping ErrProtocol.
type fieldParser struct {
	m   map[string]string
	err error
}

func (p *fieldParser) int(name string) int64 {
	s, ok := p.m[name]
	if !ok || s == "" {
		return 0
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("%w: field %s = %q is not an integer", ErrProtocol, name, s)
	}
	return v
}

// micros reads a µs time; 0 reads as the zero time.
func (p *fieldParser) micros(name string) time.Time {
	return redisscript.MicrosTime(p.int(name))
}
