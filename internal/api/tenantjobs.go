package api

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// Bounds of GET /v1/tenants/{tenant}/jobs.
const (
	TenantJobsLimitDefault = 50
	MaxTenantJobsLimit     = 500
)

// tenantJobsPage answers GET /v1/tenants/{tenant}/jobs.
type tenantJobsPage struct {
	Jobs   []jobView `json:"jobs"`
	Cursor *string   `json:"cursor"` // null on the last page
}

// listTenantJobs is GET /v1/tenants/{tenant}/jobs?state=&order=&cursor=&limit=:
// a page of the tenant's jobs in one state — queued (default), delayed,
// running (released or running) or dead — oldest (default: the next to
// leave first) or newest first, after the cursor (store.TenantJobs: one
// script on the tenant's shard, O(limit); a page of delayed or running
// jobs may hold fewer than limit with a cursor to go on). Bad parameters:
// 400, in one message.
func (s *Server) listTenantJobs(r *http.Request, c *call) (int, any, error) {
	tenant, err := tenantOf(r, c)
	if err != nil {
		return 0, nil, err
	}
	q, err := parseJobsQuery(r)
	if err != nil {
		return 0, nil, err
	}
	jobs, next, err := s.opts.Store.TenantJobs(r.Context(), tenant, q)
	if errors.Is(err, store.ErrInvalid) { // the cursor: the rest was checked here
		return 0, nil, errorf(http.StatusBadRequest, CodeMalformed, "cursor: not one this listing returned for this state and order")
	}
	if err != nil {
		return 0, nil, s.storeError(r, "tenant_jobs", err)
	}
	page := tenantJobsPage{Jobs: make([]jobView, 0, len(jobs))}
	for _, j := range jobs {
		page.Jobs = append(page.Jobs, viewOf(j))
	}
	if next != "" {
		page.Cursor = &next
	}
	return http.StatusOK, page, nil
}

// parseJobsQuery reads GET /v1/tenants/{tenant}/jobs' parameters; every
// problem is one 400.
func parseJobsQuery(r *http.Request) (store.JobsQuery, error) {
	v := r.URL.Query()
	q := store.JobsQuery{State: v.Get("state"), Cursor: v.Get("cursor"), Limit: TenantJobsLimitDefault}
	var errs []error
	switch q.State {
	case "":
		q.State = store.ListQueued
	case store.ListQueued, store.ListDelayed, store.ListRunning, store.ListDead:
	default:
		errs = append(errs, errors.New("state: want queued, delayed, running or dead"))
	}
	switch v.Get("order") {
	case "", "oldest":
	case "newest":
		q.Newest = true
	default:
		errs = append(errs, errors.New("order: want oldest or newest"))
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxTenantJobsLimit {
			errs = append(errs, errors.New("limit: want 1 … "+strconv.Itoa(MaxTenantJobsLimit)))
		}
		q.Limit = n
	}
	if err := errors.Join(errs...); err != nil {
		return store.JobsQuery{}, errorf(http.StatusBadRequest, CodeMalformed, "%s", joinMessages(err))
	}
	return q, nil
}

// CancelLimitDefault is the default limit of POST /v1/tenants/{tenant}/jobs:cancel.
const CancelLimitDefault = 100

// cancelManyRequest is the optional body of POST /v1/tenants/{tenant}/jobs:cancel.
type cancelManyRequest struct {
	State  string  `json:"state"`  // queued | delayed | "" (both)
	Event  string  `json:"event"`  // "" = any; else only webhook jobs of this event
	Before *string `json:"before"` // RFC 3339: only jobs enqueued before it
	Limit  *int    `json:"limit"`  // 1 … store.MaxTenantJobsPage; default CancelLimitDefault
	Cursor string  `json:"cursor"` // "" starts a walk
}

// cancelManyResponse answers POST /v1/tenants/{tenant}/jobs:cancel.
type cancelManyResponse struct {
	Canceled int     `json:"canceled"`
	Cursor   *string `json:"cursor"` // null when the walk is done
}

// cancelMany is POST /v1/tenants/{tenant}/jobs:cancel (admin keys): cancels,
// as DELETE /v1/jobs/{id} does (callbacks included), the jobs the body
// selects among the next limit queued or delayed jobs of the tenant
// (store.CancelTenantJobs); repeat with the returned cursor until it is
// null. Safe to repeat: a job is canceled once. Bad input: 400, nothing
// canceled.
func (s *Server) cancelMany(r *http.Request, c *call) (int, any, error) {
	tenant, err := s.adminTenant(r, c)
	if err != nil {
		return 0, nil, err
	}
	var req cancelManyRequest
	if err := decodeOptionalJSON(c.w, r, s.opts.MaxBodyBytes, &req); err != nil {
		return 0, nil, err
	}
	sel := store.CancelSelect{State: req.State, Limit: CancelLimitDefault, Cursor: req.Cursor}
	var errs []error
	if req.State != "" && req.State != store.ListQueued && req.State != store.ListDelayed {
		errs = append(errs, errors.New("state: want queued or delayed (running jobs cannot be canceled, dead ones are done)"))
	}
	if req.Limit != nil {
		if sel.Limit = *req.Limit; sel.Limit < 1 || sel.Limit > store.MaxTenantJobsPage {
			errs = append(errs, errors.New("limit: want 1 … "+strconv.Itoa(store.MaxTenantJobsPage)))
		}
	}
	var before time.Time
	if req.Before != nil {
		if before, err = time.Parse(time.RFC3339Nano, *req.Before); err != nil {
			errs = append(errs, errors.New("before: want an RFC 3339 time"))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return 0, nil, errorf(http.StatusBadRequest, CodeMalformed, "%s", joinMessages(err))
	}
	if req.Event != "" || !before.IsZero() {
		sel.Match = func(j store.Job) bool {
			if !before.IsZero() && !j.Created.Before(before) {
				return false
			}
			if req.Event == "" {
				return true
			}
			spec, err := job.Parse(j.Body)
			return err == nil && spec.Type == wire.TypeWebhook && spec.Event == req.Event
		}
	}
	n, next, err := s.opts.Store.CancelTenantJobs(r.Context(), tenant, sel)
	if errors.Is(err, store.ErrInvalid) { // the cursor: the rest was checked here
		return 0, nil, errorf(http.StatusBadRequest, CodeMalformed, "cursor: not one this walk returned for this state")
	}
	if err != nil {
		return 0, nil, s.storeError(r, "cancel_many", err)
	}
	resp := cancelManyResponse{Canceled: n}
	if next != "" {
		resp.Cursor = &next
	}
	return http.StatusOK, resp, nil
}
