package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// MaxBatch is the most jobs one EnqueueBatch call sends (the API's bound).
const MaxBatch = 1000

// ItemResult is one batch item's result, at Index in the jobs given.
type ItemResult struct {
	Index int
	// Status is the item's HTTP status: 202 when stored or a duplicate,
	// else its refusal's (400, 413, 422, 429).
	Status int
	// Job is the accepted job (Job.Duplicate when it was stored before),
	// nil when refused.
	Job *JobInfo
	// Err is the refusal, an *Error matching ErrRateLimited,
	// ErrBacklogFull or ErrInvalid; nil when accepted.
	Err error
}

// batchItemResult is one element of the API's batch "results".
type batchItemResult struct {
	Index      int          `json:"index"`
	Status     int          `json:"status"`
	Error      *ErrorDetail `json:"error"`
	RetryAfter int64        `json:"retry_after"`
}

type batchAnswer struct {
	Results []json.RawMessage `json:"results"`
}

// EnqueueBatch sends jobs (1 to MaxBatch) to tenant's backlog in one
// request (POST /v1/tenants/{tenant}/jobs:batch), opts applying to every
// item (before an item's own, see WithOptions). Each item carries an
// idempotency_key: its IdempotencyKey, or one the call makes. Items refused
// with 429 rate_limited are sent again, alone, after their retry_after,
// within the retry budget and ctx; a whole request answered 503 or 507 or
// whose answer was lost is sent again like Enqueue's. No item is stored
// twice.
//
// It returns a result per job, in order, each stored (Job), a duplicate
// (Job.Duplicate) or refused (Err). The error is non-nil only when the
// request as a whole failed, and then there are no results: an *Error
// matching ErrInvalid (no job, more than MaxBatch, a malformed body),
// ErrRateLimited (the API key's own limit), ErrStorageFull,
// ErrUnavailable (OutcomeUnknown when items may have been stored: call
// again with the same jobs and keys), ErrUnauthorized, ErrForbidden or
// ErrNotFound; or ctx's error.
func (c *Client) EnqueueBatch(ctx context.Context, tenant string, jobs []Job, opts ...EnqueueOption) ([]ItemResult, error) {
	path := pathOf("/v1/tenants", tenant) + "/jobs:batch"
	if len(jobs) == 0 || len(jobs) > MaxBatch {
		return nil, &Error{Method: http.MethodPost, Path: path, Status: http.StatusUnprocessableEntity, Code: CodeInvalid,
			Message:  fmt.Sprintf("jobs: %d items, want 1 to %d", len(jobs), MaxBatch),
			Problems: []Problem{{Field: "jobs", Message: fmt.Sprintf("%d items, want 1 to %d", len(jobs), MaxBatch)}}}
	}
	specs := make([]enqueueSpec, len(jobs))
	for i, j := range jobs {
		specs[i] = specOf(j, opts)
		if specs[i].invalid != nil {
			return nil, rawJobError(path, fmt.Errorf("item %d: %w", i, specs[i].invalid))
		}
		specs[i].body["idempotency_key"] = specs[i].idem
	}
	results := make([]ItemResult, len(jobs))
	pending := make([]int, len(jobs)) // indexes in jobs still to send
	for i := range pending {
		pending[i] = i
	}
	start := time.Now()
	for {
		wait, err := c.sendBatch(ctx, path, specs, pending, results)
		if err != nil {
			return nil, err
		}
		var again []int
		for _, i := range pending {
			if errors.Is(results[i].Err, ErrRateLimited) {
				again = append(again, i)
			}
		}
		if len(again) == 0 || time.Since(start)+wait > c.budget || !fitsDeadline(ctx, wait) {
			return results, nil
		}
		if sleep(ctx, wait) != nil {
			return results, nil
		}
		pending = again
	}
}

// sendBatch sends the items of specs at pending and records their results;
// it returns the longest retry_after among those refused with 429.
func (c *Client) sendBatch(ctx context.Context, path string, specs []enqueueSpec, pending []int, results []ItemResult) (time.Duration, error) {
	items := make([]map[string]any, len(pending))
	for k, i := range pending {
		items[k] = specs[i].body
	}
	req := &request{method: http.MethodPost, path: path, body: map[string]any{"jobs": items},
		answer: func(status int, body []byte) bool { // an answer with results: every item refused
			var a batchAnswer
			return status/100 == 4 && json.Unmarshal(body, &a) == nil && len(a.Results) == len(items)
		}}
	resp, err := c.do(ctx, req)
	if err != nil {
		return 0, err
	}
	var a batchAnswer
	if err := decode(resp, "batch results", &a); err != nil {
		return 0, err
	}
	if len(a.Results) != len(pending) {
		return 0, fmt.Errorf("sluice client: batch answer holds %d results for %d items", len(a.Results), len(pending))
	}
	var wait time.Duration
	for k, raw := range a.Results {
		i := pending[k]
		var r batchItemResult
		if err := json.Unmarshal(raw, &r); err != nil {
			return 0, fmt.Errorf("sluice client: decode batch result %d: %w", k, err)
		}
		res := ItemResult{Index: i, Status: r.Status}
		if r.Error != nil {
			retry := time.Duration(r.RetryAfter) * time.Second
			e := itemError(http.MethodPost, path, r.Status, r.Error, retry)
			e.IdempotencyKey = specs[i].idem
			res.Err = e
			if r.Status == http.StatusTooManyRequests {
				wait = max(wait, retry)
			}
		} else {
			var info JobInfo
			if err := json.Unmarshal(raw, &info); err != nil {
				return 0, fmt.Errorf("sluice client: decode batch result %d: %w", k, err)
			}
			info.IdempotencyKey, info.Raw = specs[i].idem, raw
			res.Job = &info
		}
		results[i] = res
	}
	return wait, nil
}
