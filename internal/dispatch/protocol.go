package dispatch

import "time"

// This file holds the types of the dispatch protocol (DESIGN §2.2–§2.3)
// shared by the Store's pass, claim and finish scripts, the dispatcher loop
// and the workers.

// PassConfig bounds one dispatcher pass over one shard (DESIGN §1 symbols).
type PassConfig struct {
	Lead          time.Duration // D: release jobs whose slot is ≤ now + D
	MinLead       time.Duration // L: a released job's slot is ≥ now + L
	Grace         time.Duration // lease slack past the slot (released) or past claim + timeout (running)
	MaxPromotions int           // P: delayed jobs promoted per pass
	MaxTenants    int           // K: tenants visited per pass
	// Capacity is the most jobs this pass may release (free worker
	// capacity share); < 0 means no limit.
	Capacity int
}

// PassResult is what one pass did.
type PassResult struct {
	Now      time.Time // the script's now
	Released []Release // jobs to hand to asynq, in slot order
	// More is set when a bound (P, K, Capacity) stopped the pass early: run
	// another pass at once.
	More bool
	// NextWake is the earliest time anything on the shard becomes due (a
	// ready score − D, a delayed job, a lease deadline); zero when nothing is
	// pending.
	NextWake time.Time
	Promoted int // delayed jobs moved to a backlog
	Swept    int // expired leases handled
}

// ClaimOutcome is the worker's answer from the claim script (DESIGN §2.3).
type ClaimOutcome uint8

// Claim outcomes.
const (
	ClaimOK        ClaimOutcome = iota + 1 // running now: Job is set; send it
	ClaimEarly                             // before slot − ε: wait Claim.Wait and claim again
	ClaimStale                             // gen not current or not released: a duplicate task, drop it
	ClaimCanceled                          // canceled: drop it
	ClaimReturned                          // paused, disabled or at the concurrency cap: back to the head lane unsent
	ClaimReslotted                         // late: a new Slot and Gen within D; wait until Slot and claim with Gen
)

// Claim is the reply of Store.Claim.
type Claim struct {
	Outcome ClaimOutcome
	Job     ClaimedJob    // ClaimOK
	Wait    time.Duration // ClaimEarly
	Gen     int64         // ClaimReslotted: the generation to claim with
	Slot    time.Time     // ClaimReslotted: the new slot
}

// ClaimedJob is what a worker needs to run one attempt.
type ClaimedJob struct {
	ID      string
	Tenant  string
	Type    string
	Body    []byte        // the canonical job JSON stored at enqueue
	Gen     int64         // the fencing token for Finish
	Attempt int64         // this attempt's number, 1-based
	Timeout time.Duration // the policy's per-attempt timeout
}

// FinishKind classifies an attempt's outcome (DESIGN §4.2).
type FinishKind uint8

// Finish kinds.
const (
	FinishSuccess   FinishKind = iota + 1 // 2xx: succeeded
	FinishRetry                           // retryable failure: retry per the policy's curve, or dead when exhausted
	FinishThrottled                       // upstream said slow down: pause the tenant Pause, job to the head lane, no attempt used
	FinishPermanent                       // permanent failure: dead letter
	FinishGone                            // 410: disable the tenant, job to the head lane
)

// AttemptOutcome is a worker's report of one attempt to Store.Finish.
type AttemptOutcome struct {
	Kind    FinishKind
	Status  int           // HTTP status, 0 when none
	Latency time.Duration // request time
	Error   string        // short reason for people; no secrets
	// Pause is, for FinishThrottled, how long the upstream asked to wait
	// (0: the configured default); capped by the configured maximum.
	Pause time.Duration
}
