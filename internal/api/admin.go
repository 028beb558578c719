package api

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/store"
)

// Dead-letter paging of GET /v1/tenants/{tenant}/dead.
const (
	DeadPageDefault = 50
	DeadPageMax     = store.MaxDeadLettersPage
)

// pauseRequest is the optional body of POST /v1/tenants/{tenant}/pause.
type pauseRequest struct {
	// Until ends the pause (RFC 3339); absent: until resumed.
	Until *string `json:"until"`
}

// deadPage answers GET /v1/tenants/{tenant}/dead.
type deadPage struct {
	Jobs       []jobView `json:"jobs"`
	NextCursor *string   `json:"next_cursor"`
}

// pauseTenant is POST /v1/tenants/{tenant}/pause (admin keys): no job of the
// tenant leaves until `until` (or until resumed); enqueue still accepts.
// 200 with the tenant view; 422 for an `until` that is not in the future
// (it would end the pause in force, untimed or not, at once).
func (s *Server) pauseTenant(r *http.Request, c *call) (int, any, error) {
	tenant, err := s.adminTenant(r, c)
	if err != nil {
		return 0, nil, err
	}
	var req pauseRequest
	if err := decodeOptionalJSON(c.w, r, s.opts.MaxBodyBytes, &req); err != nil {
		return 0, nil, err
	}
	var until time.Time
	if req.Until != nil {
		if until, err = time.Parse(time.RFC3339Nano, *req.Until); err != nil {
			return 0, nil, errorf(http.StatusUnprocessableEntity, CodeInvalid, "until: not an RFC 3339 time: %q", *req.Until)
		}
		if !until.After(time.Now()) { // a past until would end an untimed pause at once
			return 0, nil, errorf(http.StatusUnprocessableEntity, CodeInvalid,
				"until: %s is not in the future; omit it to pause until resumed, or resume", *req.Until)
		}
	}
	if err := s.opts.Store.Pause(r.Context(), tenant, until); err != nil {
		return 0, nil, s.storeError(r, "pause", err)
	}
	return s.tenantResponse(r, c, tenant)
}

// resumeTenant is POST /v1/tenants/{tenant}/resume (admin keys): clears the
// admin pause, an upstream pause and a 410 disable. 200 with the tenant view.
func (s *Server) resumeTenant(r *http.Request, c *call) (int, any, error) {
	tenant, err := s.adminTenant(r, c)
	if err != nil {
		return 0, nil, err
	}
	if err := s.opts.Store.Resume(r.Context(), tenant); err != nil {
		return 0, nil, s.storeError(r, "resume", err)
	}
	return s.tenantResponse(r, c, tenant)
}

// deadLetters is GET /v1/tenants/{tenant}/dead?cursor=&limit=: the tenant's
// dead letters, oldest first, DeadPageDefault a page (at most DeadPageMax).
func (s *Server) deadLetters(r *http.Request, c *call) (int, any, error) {
	tenant, err := tenantOf(r, c)
	if err != nil {
		return 0, nil, err
	}
	limit := DeadPageDefault
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > DeadPageMax {
			return 0, nil, errorf(http.StatusBadRequest, CodeMalformed, "limit: want 1 … %d, got %q", DeadPageMax, v)
		}
		limit = n
	}
	jobs, next, err := s.opts.Store.DeadLetters(r.Context(), tenant, r.URL.Query().Get("cursor"), limit)
	if errors.Is(err, store.ErrInvalid) { // tenant and limit are checked above: the cursor
		return 0, nil, errorf(http.StatusBadRequest, CodeMalformed, "cursor: not one this listing returned")
	}
	if err != nil {
		return 0, nil, s.storeError(r, "dead_letters", err)
	}
	page := deadPage{Jobs: make([]jobView, 0, len(jobs))}
	for _, j := range jobs {
		page.Jobs = append(page.Jobs, viewOf(j))
	}
	if next != "" {
		page.NextCursor = &next
	}
	return http.StatusOK, page, nil
}

// replayJob is POST /v1/jobs/{id}/replay: a dead job goes back to its
// tenant's backlog (same id, attempts kept, admission not charged). 200 with
// the job; 409 when it is not dead.
func (s *Server) replayJob(r *http.Request, c *call) (int, any, error) {
	if _, err := s.jobFor(r, c); err != nil {
		return 0, nil, err
	}
	j, err := s.opts.Store.Replay(r.Context(), r.PathValue("id"))
	if errors.Is(err, store.ErrConflict) {
		return 0, nil, errorf(http.StatusConflict, CodeConflict, "job %q is not dead: %s", r.PathValue("id"), err.Error())
	}
	if errors.Is(err, store.ErrNotReplicated) {
		return 0, nil, s.notReplicated("replay", err, []string{j.ID},
			"the job is back in its backlog on the primary: GET /v1/jobs/{id} shows it, and replay it again if it is dead after a failover")
	}
	if err != nil {
		return 0, nil, s.storeError(r, "replay", err)
	}
	return http.StatusOK, viewOf(j), nil
}

// adminTenant checks the key is an admin key allowed the path's tenant.
func (s *Server) adminTenant(r *http.Request, c *call) (string, error) {
	if !c.key.Admin {
		return "", errorf(http.StatusForbidden, CodeForbidden, "API key %q is not an admin key", c.key.Name)
	}
	return tenantOf(r, c)
}
