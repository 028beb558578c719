package store

import (
	"time"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/tuning"
	"github.com/sluicehq/sluice/internal/wire"
)

// This file holds the types of the dispatch protocol (docs/design.md §2.2–§2.3)
// shared by the Store's pass, claim and finish scripts, the dispatcher loop
// and the workers.

// Defaults of PassConfig (docs/design.md §1, §7 `dispatch`).
// Their values are declared in internal/tuning, which the configuration
// resolves its YAML with.
const (
	LeadDefault          = tuning.LeadDefault      // D
	MinLeadDefault       = tuning.MinLeadDefault   // L
	ToleranceDefault     = tuning.ToleranceDefault // ε: how early a claim is accepted
	GraceDefault         = tuning.GraceDefault
	MaxPromotionsDefault = tuning.MaxPromotionsDefault // P
	MaxTenantsDefault    = tuning.MaxTenantsDefault    // K
)

// PassConfig bounds one dispatcher pass over one shard (docs/design.md §1 symbols).
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
	// FairShare is λ, the workers' slots per unit of tenant weight, that
	// the dispatcher's budget gives a pass while the workers' pool is
	// contended (docs/design.md §2.2 "Fair shares of the pool"): a tenant whose running
	// + released jobs reached max(1, ⌊weight·λ⌋) releases none in this
	// pass, whatever its concurrency allows. 0 (the pool is not contended):
	// no cap but the tenants' concurrency. Resolution 1/1000; at most
	// MaxFairShare.
	FairShare float64
	// Preclaim is ε of the pass's pre-claim (docs/design.md §2.2): a
	// webhook or http job whose send target is within Preclaim of now at
	// its release is claimed by the pass itself and handed off running
	// (wire.Claimed), so its worker sends it without a claim. The
	// dispatcher sets it to the claim's tolerance (ToleranceDefault unless
	// the deployment's settings say otherwise) while every live worker can
	// run pre-claimed jobs. Zero or less (the zero value): no pre-claim,
	// every job is claimed by its worker as before issue #33.
	Preclaim time.Duration
}

// MaxFairShare bounds PassConfig.FairShare (far above any pool: a share
// that large caps nothing).
const MaxFairShare = 1e9

// PassResult is what one pass did.
type PassResult struct {
	Now      time.Time      // the script's now
	Released []wire.Release // jobs to hand to asynq, in slot order
	// More is set when a bound (P or K) stopped the pass early: run another
	// pass at once.
	More bool
	// CapacityReached is set when Capacity ran out while visited tenants
	// might still have released (it may be set although nothing more was
	// due): wait for worker capacity, not for NextWake.
	CapacityReached bool
	// NextWake is the earliest time anything on the shard becomes due (a
	// ready score − D, a delayed job, a lease deadline); zero when nothing is
	// pending. It is Now when More or CapacityReached is set: work is left,
	// and the shard's sets are not read for it.
	NextWake time.Time
	Promoted int // delayed jobs moved to a backlog or head lane
	Swept    int // expired leases handled
	Tenants  int // tenants visited
	// Demand lists the upstreams some lane head of this pass waited on
	// without room in the shard's segments (and the shard had not asked
	// already): ask their coordinators (GrantUpstreams) and hand the grants
	// to the shard's next pass.
	Demand []quota.UpstreamDemand
	// Aligned lists the sets of upstreams some lane head naming several of
	// them waited on without a common instant in the shard's segments (and
	// the shard had not asked already for that set): ask for aligned
	// segments (AlignUpstreams) and hand the grants to the next pass.
	Aligned []quota.AlignedDemand
	// Planned says the release was decided by internal/plan and written by
	// plan_apply.lua (Config.Planner PlannerGo), not by pass.lua alone.
	Planned bool

	skipped bool // planned: some tenant moved between the read and the apply
}

// ClaimOutcome is the worker's answer from the claim script (docs/design.md §2.3).
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
	// SendAt is the instant to send at (Redis time): the slot, later by
	// the lateness the tenant's send schedule carries, or the claim's now
	// when that came after both. A claim up to ε early is answered at once:
	// the worker waits for SendAt, so the claim's round trip never moves
	// the send.
	SendAt  time.Time
	Created time.Time // when the job was enqueued (Job.Created), the same on every attempt
	// Cost is the cost the job reserved at its release (its enqueue cost):
	// a cost correction charges or refunds ActualCost − Cost.
	Cost int64
	// Upstreams are the upstreams the job names (record field ups), sorted;
	// nil when none.
	Upstreams []string
	// Signing is a webhook job's tenant's signing state as the claim read
	// it — its live secrets by API and its policy's unsigned flag, what
	// Store.Secrets reads (its Now the claim's) —, so the worker signs
	// without a read of its own; nil for other jobs, and when the claim
	// could not give it (a stored secret is corrupt: Store.Secrets says).
	Signing *SecretSet
}
