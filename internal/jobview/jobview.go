// Package jobview is a job as the API shows it (GET /v1/jobs/{id}, DELETE,
// dead letters) and as a callback carries it (its "data"): one shape for
// both, built from the store's record. No I/O.
package jobview

import (
	"encoding/json"
	"time"

	"github.com/sluicehq/sluice/internal/store"
)

// TimeLayout is RFC 3339 in UTC with milliseconds, the API's time format.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// View is a job as GET and DELETE /v1/jobs/{id} show it. Times are
// RFC 3339 UTC with milliseconds, null when unset; job is the job as
// stored (its canonical JSON) with an http job's secret header values
// redacted (RedactedJob), null once succeeded or canceled.
type View struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Type   string `json:"type"`
	State  string `json:"state"`
	Cost   int64  `json:"cost"`
	// ActualCost is the actual cost the latest attempt reported (an
	// upstream's cost header, sluicetask.SetCost); absent when none did:
	// the reserved cost stood.
	ActualCost     int64           `json:"actual_cost,omitempty"`
	Created        *string         `json:"created"`
	RunAt          *string         `json:"run_at"`
	ETA            *string         `json:"eta"`
	Ended          *string         `json:"ended"`
	AttemptCount   int64           `json:"attempt_count"`
	Attempts       []AttemptView   `json:"attempts"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	Job            json.RawMessage `json:"job"`
	// Result is an http job's last response (status, allowed headers, body
	// or body_base64, truncated and truncated_reason: max_result_bytes, or
	// storage_full when Redis had no room for the body); absent before one
	// arrived and for other jobs.
	Result *store.JobResult `json:"result,omitempty"`
	// Callback is the callback URL; absent when none.
	Callback *CallbackView `json:"callback,omitempty"`
	// Upstreams are the shared upstream quotas the job consumes, sorted
	// (named by its body or its tenant policy's default at enqueue); []
	// when none.
	Upstreams []string `json:"upstreams"`
	// DeadReason is why a dead job died, when recorded: "gone" (a 410),
	// "unknown_upstream" (an upstream it names was deleted).
	DeadReason string `json:"dead_reason,omitempty"`
	// CanceledFrom is the state a DELETE canceled the job in.
	CanceledFrom string `json:"canceled_from,omitempty"`
}

// CallbackView is a job's callback.
type CallbackView struct {
	URL string `json:"url"`
}

// AttemptView is one entry of a job's attempt log.
type AttemptView struct {
	At        *string `json:"at"`
	Status    int     `json:"status"` // HTTP status, 0 when none (timeout, connection error)
	LatencyMS int64   `json:"latency_ms"`
	Error     string  `json:"error,omitempty"`
	// Body is the first 4 KiB of the response body when it is UTF-8, else
	// BodyBase64 holds them in base64; both absent when there was none.
	Body       string `json:"body,omitempty"`
	BodyBase64 string `json:"body_base64,omitempty"`
}

// Of is j's view.
func Of(j store.Job) View {
	v := View{ID: j.ID, Tenant: j.Tenant, Type: j.Type, State: string(j.State), Cost: j.Cost, ActualCost: j.ActualCost,
		Created: TimeString(j.Created), RunAt: TimeString(j.RunAt), ETA: TimeString(j.ETA), Ended: TimeString(j.Ended),
		AttemptCount: j.Attempt, Attempts: make([]AttemptView, 0, len(j.Attempts)), IdempotencyKey: j.IdemKey,
		DeadReason: j.DeadReason, Result: j.Result}
	if json.Valid(j.Body) {
		v.Job = RedactedJob(j.Body)
	}
	if j.Callback != "" {
		v.Callback = &CallbackView{URL: j.Callback}
	}
	v.Upstreams = upstreamsOf(j.Body)
	for _, a := range j.Attempts {
		v.Attempts = append(v.Attempts, AttemptView{At: TimeString(a.At), Status: a.Status,
			LatencyMS: a.Latency.Milliseconds(), Error: a.Error, Body: a.Body, BodyBase64: a.BodyBase64})
	}
	return v
}

// upstreamsOf reads the "upstreams" of a job's canonical body (the API
// stores the resolved list there); [] when it names none or is not JSON.
func upstreamsOf(body []byte) []string {
	var b struct {
		Upstreams []string `json:"upstreams"`
	}
	if json.Unmarshal(body, &b) != nil || b.Upstreams == nil {
		return []string{}
	}
	return b.Upstreams
}

// TimeString formats t as RFC 3339 UTC with milliseconds; nil for zero.
func TimeString(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(TimeLayout)
	return &s
}
