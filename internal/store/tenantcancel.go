package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// CancelSelect selects the jobs one CancelTenantJobs call cancels.
type CancelSelect struct {
	// State is ListQueued, ListDelayed, or "" for both (queued first).
	State string
	// Match, when not nil, says which of the listed jobs to cancel (the
	// API's event and before filters); nil cancels every one.
	Match func(Job) bool
	// Limit is the most of the tenant's jobs one call lists, and so
	// cancels: 1 … MaxTenantJobsPage.
	Limit int
	// Cursor is the previous call's next cursor; "" starts a walk. It
	// serves only the State it was made for.
	Cursor string
}

// cancelCursor is CancelTenantJobs' opaque cursor: the select's state, the
// state walked and its TenantJobs cursor.
type cancelCursor struct {
	Select string `json:"q"`
	State  string `json:"s"`
	Jobs   string `json:"c,omitempty"`
}

// CancelTenantJobs cancels, as Cancel does (each a tombstone, its callback
// queued when it asked for one), the jobs Match selects among one page of
// tenant's jobs in sel.State, oldest first (TenantJobs: O(limit) Redis
// work, plus one script per job canceled), and returns how many it
// canceled and the next call's cursor ("" when the walk is done). A job
// that left its state meanwhile (released, or canceled by another) is
// passed. Repeating a call is safe: a job already canceled is not counted
// again. The cursor goes on after the last job kept, so the jobs canceled
// shift nothing. Bad input wraps ErrInvalid and cancels nothing.
func (s *Store) CancelTenantJobs(ctx context.Context, tenant string, sel CancelSelect) (int, string, error) {
	cur, err := checkCancelSelect(sel)
	if err != nil {
		return 0, "", fmt.Errorf("cancel jobs of tenant %q: %w", tenant, err)
	}
	listed, next, err := s.tenantJobs(ctx, tenant, JobsQuery{State: cur.State, Limit: sel.Limit, Cursor: cur.Jobs})
	if err != nil {
		return 0, "", fmt.Errorf("cancel jobs of tenant %q: %w", tenant, err)
	}
	canceled, gone, kept := 0, map[string]bool{}, (*jobsCursor)(nil)
	for _, l := range listed {
		if sel.Match != nil && !sel.Match(l.Job) {
			kept = &l.after
			continue
		}
		gone[l.ID] = true
		_, _, err := s.Cancel(ctx, l.ID)
		var conflict *ConflictError
		switch {
		case err == nil:
			canceled++
		case errors.As(err, &conflict), errors.Is(err, ErrNotFound): // left its state meanwhile
		default:
			return canceled, "", fmt.Errorf("cancel jobs of tenant %q: %w", tenant, err)
		}
	}
	if next == "" { // this state's walk is done
		if sel.State == "" && cur.State == ListQueued {
			return canceled, encodeCancelCursor(cancelCursor{State: ListDelayed}), nil
		}
		return canceled, "", nil
	}
	if after, _ := decodeJobsCursor(next); after.Part == "list" && gone[after.ID] {
		next = anchorAfterCancels(cur.Jobs, kept, after)
	}
	return canceled, encodeCancelCursor(cancelCursor{Select: sel.State, State: cur.State, Jobs: next}), nil
}

// anchorAfterCancels is the backlog cursor after a page whose last job,
// after, left the backlog: the last job the page kept there, else the
// call's own cursor when it was in the backlog (it named a job kept), else
// the backlog's start (every job the page saw there is gone). A backlog
// cursor must name a job still there (lua/tenant_jobs.lua: one not found
// starts the walk again at the head).
func anchorAfterCancels(from string, kept *jobsCursor, after jobsCursor) string {
	if kept != nil && kept.Part == "list" {
		return encodeJobsCursor(*kept)
	}
	if c, err := decodeJobsCursor(from); err == nil && c.Part == "list" {
		return from
	}
	return encodeJobsCursor(jobsCursor{State: after.State, Newest: after.Newest, Part: "list"})
}

// checkCancelSelect checks sel and decodes its cursor (the start: the
// first state walked).
func checkCancelSelect(sel CancelSelect) (cancelCursor, error) {
	var errs []error
	if sel.State != "" && sel.State != ListQueued && sel.State != ListDelayed {
		errs = append(errs, invalidf("state %q: want queued or delayed (running jobs cannot be canceled, dead ones are done)", sel.State))
	}
	if sel.Limit < 1 || sel.Limit > MaxTenantJobsPage {
		errs = append(errs, invalidf("limit %d: want 1 … %d", sel.Limit, MaxTenantJobsPage))
	}
	cur := cancelCursor{Select: sel.State, State: sel.State}
	if cur.State == "" {
		cur.State = ListQueued
	}
	if sel.Cursor != "" {
		cur = cancelCursor{}
		raw, err := base64.RawURLEncoding.DecodeString(sel.Cursor)
		if err == nil {
			err = json.Unmarshal(raw, &cur)
		}
		if err != nil || cur.Select != sel.State || (cur.State != ListQueued && cur.State != ListDelayed) {
			errs = append(errs, invalidf("cursor: not one this walk returned for this state"))
		}
	}
	return cur, errors.Join(errs...)
}

func encodeCancelCursor(c cancelCursor) string {
	raw, _ := json.Marshal(c) // cannot fail: strings
	return base64.RawURLEncoding.EncodeToString(raw)
}

// decodeJobsCursor is the jobsCursor of its opaque form.
func decodeJobsCursor(s string) (jobsCursor, error) {
	var c jobsCursor
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(raw, &c)
	}
	return c, err
}
