package store

import (
	"strconv"
	"time"
)

// This file holds the types of the dispatch protocol (DESIGN §2.2–§2.3)
// shared by the Store's pass, claim and finish scripts, the dispatcher loop
// and the workers.

// Defaults of PassConfig (DESIGN §1, §7 `dispatch`).
const (
	LeadDefault          = 100 * time.Millisecond // D
	MinLeadDefault       = 50 * time.Millisecond  // L
	ToleranceDefault     = 2 * time.Millisecond   // ε: how early a claim is accepted
	GraceDefault         = time.Second
	MaxPromotionsDefault = 1000 // P
	MaxTenantsDefault    = 256  // K
)

// PassConfig bounds one dispatcher pass over one shard (DESIGN §1 symbols).
// Zero durations and counts take the defaults above (WithDefaults), except
// Capacity, whose zero means "release nothing".
type PassConfig struct {
	Lead time.Duration // D: release jobs whose slot is ≤ now + D. Default LeadDefault
	// MinLead is L, the pickup horizon; ≤ Lead. A released job's slot is
	// its GCRA slot: one at least L away is spaced from the pass's other
	// such slots by ClaimSpacing (a worker surely holds the task by then and
	// claims at the slot); a nearer one is claimed as soon as a worker picks
	// the task up. Default MinLeadDefault; < 0 means 0 (every slot spaced).
	MinLead time.Duration
	// Grace is the lease slack past the slot (released) or past claim +
	// timeout (running). Default GraceDefault.
	Grace         time.Duration
	MaxPromotions int // P: delayed jobs promoted per pass, and expired leases swept per pass. Default MaxPromotionsDefault
	MaxTenants    int // K: tenants taken from ready per pass. Default MaxTenantsDefault
	// Capacity is the most jobs this pass may release (the shard's share of
	// free worker capacity); < 0 means no limit, 0 releases nothing (the
	// pass still promotes and sweeps).
	Capacity int
	// DeadRetention, DeadMaxPerTenant and AttemptLog apply to the jobs the
	// sweep retires (a running lease expired with no attempts left), as
	// FinishConfig's fields of the same names do for Finish. Zero: the
	// FinishConfig defaults.
	DeadRetention    time.Duration
	DeadMaxPerTenant int
	AttemptLog       int
	// ClaimSpacing is the least gap between two slots handed out by one
	// pass, across tenants, so that the workers' claims (one script each,
	// ~0.2 ms of Redis time) do not arrive as a herd at one instant and miss
	// the claim tolerance. Slots only move later, never earlier, so every
	// tenant's rate bound holds; a job pushed past now + D waits for the
	// next pass. Default ClaimSpacingDefault; < 0 means none.
	ClaimSpacing time.Duration
}

// PassResult is what one pass did.
type PassResult struct {
	Now      time.Time // the script's now
	Released []Release // jobs to hand to asynq, in slot order
	// More is set when a bound (P or K) stopped the pass early: run another
	// pass at once.
	More bool
	// CapacityReached is set when Capacity ran out while visited tenants
	// might still have released (it may be set although nothing more was
	// due): wait for worker capacity, not for NextWake.
	CapacityReached bool
	// NextWake is the earliest time anything on the shard becomes due (a
	// ready score − D, a delayed job, a lease deadline); zero when nothing is
	// pending. It may be ≤ Now when More or CapacityReached is set.
	NextWake time.Time
	Promoted int // delayed jobs moved to a backlog or head lane
	Swept    int // expired leases handled
	Tenants  int // tenants visited
}

// Release is a job the pass released: hand it to asynq as task TaskID()
// with MaxRetry(0) and Timeout = ⌈2D + Timeout + grace⌉ s (DESIGN §2.2).
type Release struct {
	ID     string
	Tenant string
	Type   string // webhook, http or task
	Cost   int64
	Gen    int64     // the job's generation after the release; the worker claims with it
	Slot   time.Time // the job's planned slot: the instant it may be sent (Redis time)
	// SendAt is when the worker should claim it (the task carries it):
	// Slot, or later by the lateness the tenant's send schedule carries
	// (claim.lua).
	SendAt time.Time
	// Timeout is the tenant's per-attempt timeout at the release.
	Timeout time.Duration
	// Queue and TaskType are, for task jobs, the body's "queue" and
	// "task_type" (DESIGN §2.5); "" for other types or when the body lacks
	// them. The payload travels with the claim (ClaimedJob.Body).
	Queue    string
	TaskType string
}

// TaskID is the asynq task id of this release, "<id>:<gen>": unique per
// delivery, so a duplicate Enqueue of the same release conflicts.
func (r Release) TaskID() string { return r.ID + ":" + strconv.FormatInt(r.Gen, 10) }

// ClaimOutcome is the worker's answer from the claim script (DESIGN §2.3).
type ClaimOutcome uint8

// Claim outcomes.
const (
	ClaimOK       ClaimOutcome = iota + 1 // running now: Job is set; send it
	ClaimEarly                            // before the slot or the send schedule: wait Claim.Wait and claim again
	ClaimStale                            // gen not current or not released (or no record): a duplicate task, drop it
	ClaimCanceled                         // canceled: drop it
	ClaimReturned                         // back to the head lane unsent (Reason says why): drop the task
)

// Reasons of ClaimReturned.
const (
	ReasonDisabled    = "disabled"    // the tenant is disabled (410)
	ReasonPaused      = "paused"      // admin pause or upstream pause
	ReasonConcurrency = "concurrency" // running ≥ concurrency
)

// Claim is the reply of Store.Claim.
type Claim struct {
	Outcome ClaimOutcome
	Job     ClaimedJob    // ClaimOK
	Wait    time.Duration // ClaimEarly: until the slot, or until the send schedule allows the job
	Reason  string        // ClaimReturned: a Reason… constant
	State   State         // ClaimStale: the job's state ("" when no record)
}

// ClaimedJob is what a worker needs to run one attempt.
type ClaimedJob struct {
	ID      string
	Tenant  string
	Type    string
	Body    []byte        // the canonical job JSON stored at enqueue
	Gen     int64         // the fencing token for Finish
	Attempt int64         // this attempt's number, 1-based (attempts used so far, this one included)
	Timeout time.Duration // the policy's per-attempt timeout
	Slot    time.Time     // the slot the job was claimed at
}

// FinishKind classifies an attempt's outcome (DESIGN §4.2).
type FinishKind uint8

// Finish kinds.
const (
	FinishSuccess   FinishKind = iota + 1 // 2xx: succeeded
	FinishRetry                           // retryable failure: retry per the policy's curve, or dead when exhausted
	FinishThrottled                       // upstream said slow down: pause the tenant Pause, job to the head lane, no attempt used
	FinishPermanent                       // permanent failure: dead letter
	FinishGone                            // 410: disable the tenant, job to the head lane, no attempt used
)

var finishKinds = [...]string{FinishSuccess: "success", FinishRetry: "retry",
	FinishThrottled: "throttled", FinishPermanent: "permanent", FinishGone: "gone"}

// String is the kind's name as the attempt log records it: success, retry,
// throttled, permanent, gone.
func (k FinishKind) String() string {
	if int(k) < len(finishKinds) && finishKinds[k] != "" {
		return finishKinds[k]
	}
	return "FinishKind(" + strconv.Itoa(int(k)) + ")"
}

// AttemptOutcome is a worker's report of one attempt to Store.Finish.
type AttemptOutcome struct {
	Kind    FinishKind
	Status  int           // HTTP status, 0 when none
	Latency time.Duration // request time
	Error   string        // short reason for people; no secrets. Cut to MaxErrorLen bytes
	// Pause is how long the upstream asked to wait: for FinishThrottled, 0
	// means the configured default; for the other kinds, > 0 pauses the
	// tenant pre-emptively (its quota is used up) and 0 means no pause.
	// Capped by the configured maximum; negative is 0.
	Pause time.Duration
}
