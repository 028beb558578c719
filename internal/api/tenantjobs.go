package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/internal/store"
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
