package wire

import (
	"strconv"
	"time"
)

// FinishKind classifies an attempt's outcome (docs/design.md §4.2).
type FinishKind uint8

// Finish kinds.
const (
	FinishSuccess   FinishKind = iota + 1 // 2xx: succeeded
	FinishRetry                           // retryable failure: retry per the policy's curve, or dead when exhausted
	FinishThrottled                       // upstream said slow down: pause the tenant Pause, job to the head lane, no attempt used
	FinishPermanent                       // permanent failure: dead letter
	FinishGone                            // 410: the job is dead (reason gone); a webhook job's tenant is disabled (an http job's with disable_on_gone)
	// FinishDeferred: not sent, its destination's circuit is open
	// (docs/design.md §4.5): the job waits Pause in the delayed set
	// (retrying), no attempt used, its slot refunded; Error names the
	// destination.
	FinishDeferred
	// FinishLapsed: a pre-claimed job dropped unsent, too late to finish
	// well inside its lease: it goes back to its tenant's head lane at
	// once, the pre-claim's attempt given back, nothing logged (what the
	// sweep does when its lease ends).
	FinishLapsed
)

var finishKinds = [...]string{FinishSuccess: "success", FinishRetry: "retry",
	FinishThrottled: "throttled", FinishPermanent: "permanent", FinishGone: "gone", FinishDeferred: "deferred",
	FinishLapsed: "lapsed"}

// String is the kind's name as the attempt log records it: success, retry,
// throttled, permanent, gone (deferred and lapsed: never logged, no
// attempt).
func (k FinishKind) String() string {
	if int(k) < len(finishKinds) && finishKinds[k] != "" {
		return finishKinds[k]
	}
	return "FinishKind(" + strconv.Itoa(int(k)) + ")"
}

// ReasonTimeout is the Error of an attempt that ran out of time, as the
// attempt log shows it.
const ReasonTimeout = "timeout"

// MaxErrorLen bounds AttemptOutcome.Error as stored, in bytes.
const MaxErrorLen = 512

// AttemptOutcome is a worker's report of one attempt to the store's finish.
type AttemptOutcome struct {
	Kind    FinishKind
	Status  int           // HTTP status, 0 when none
	Latency time.Duration // request time
	Error   string        // short reason for people; no secrets. Cut to MaxErrorLen bytes
	// TimedOut is set when the attempt ran out of its timeout before an
	// answer (Error is then ReasonTimeout): a congestion signal.
	TimedOut bool
	// Pause is how long the upstream asked to wait: for FinishThrottled, 0
	// means the configured default; for the other kinds, > 0 pauses the
	// tenant pre-emptively (its quota is used up) and 0 means no pause.
	// Capped by the configured maximum; negative is 0.
	Pause time.Duration
	// Excerpt is the start of the response body, at most MaxExcerptBytes
	// (the attempt log keeps it); nil when no response or an empty body.
	Excerpt []byte
	// Result is what an http job keeps of this attempt's response as its
	// result (GET /v1/jobs/{id} "result"); nil for other jobs and when no
	// response arrived.
	Result *AttemptResult
	// ActualCost is the attempt's actual cost when the worker learned it
	// (an upstream's cost header, sluicetask.SetCost), 1 … MaxActualCost;
	// 0 means unknown: the cost the job reserved at dispatch stands. Finish
	// charges or refunds the difference on the tenant's schedule.
	ActualCost int64
	// Quota is the tightest quota the response reported (headers read on
	// every response, webhook.PaceQuota), which paces the tenant (policy
	// pacing: headers); nil when it reported none.
	Quota *Quota
}

// Quota units.
const (
	QuotaRequests = "requests"
	QuotaTokens   = "tokens"
)

// Quota is a quota an upstream reported on a response: what is left of it
// and when it is whole again.
type Quota struct {
	Unit      string        // QuotaRequests or QuotaTokens
	Remaining int64         // ≥ 0, at most MaxQuotaCount
	Limit     int64         // the quota's size; 0 when not reported
	ResetIn   time.Duration // after the response; > 0
	Source    string        // the header field Remaining was read from ("RateLimit", "X-RateLimit-Remaining", "X-Ratelimit-Remaining-Tokens", …)
	Name      string        // the quota's name where the upstream gives one (the IETF policy's, GitHub's X-RateLimit-Resource); not stored
}

// MaxQuotaCount bounds Quota.Remaining and Quota.Limit.
const MaxQuotaCount = 1_000_000_000_000_000

// MaxActualCost bounds AttemptOutcome.ActualCost: the largest cost of one
// job (policy.MaxBurst). A larger report is ignored, as a bad one.
const MaxActualCost = 1_000_000

// MaxExcerptBytes bounds AttemptOutcome.Excerpt: the attempt log keeps the
// first 4 KiB of each attempt's response body.
const MaxExcerptBytes = 4 << 10

// AttemptResult is an http job's result: the last attempt's response, as
// far as the tenant's policy keeps it.
type AttemptResult struct {
	Status int // HTTP status
	// Header holds the response headers the policy's result_headers allow,
	// by canonical name.
	Header map[string][]string
	// Body is the start of the response body, at most the policy's
	// max_result_bytes.
	Body []byte
	// Truncated is set when the response body was longer than Body, or
	// its read was cut before its end (Cut).
	Truncated bool
	// Cut is why the body's read stopped before its end ("" = it did not):
	// "timeout" (the attempt's timeout), "canceled", "connection_error".
	Cut string
}

// Congested reports whether o tells an adaptive tenant to slow down (docs/design.md
// §4.2): FinishThrottled, or FinishRetry after a 5xx response or a timeout
// with no response. Connection, TLS and DNS errors, 408 and 425 are not
// congestion signals.
func (o AttemptOutcome) Congested() bool {
	switch {
	case o.Kind == FinishThrottled:
		return true
	case o.Kind != FinishRetry:
		return false
	case o.Status >= 500 && o.Status <= 599:
		return true
	}
	return o.Status == 0 && o.TimedOut
}
