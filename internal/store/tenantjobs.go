package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// Bounds of TenantJobs.
const (
	// MaxTenantJobsPage is the most jobs one TenantJobs page holds.
	MaxTenantJobsPage = 1000
	// TenantJobsExamineFactor bounds the members one page examines:
	// limit times this. The delayed and lease sets are the shard's, shared
	// by its tenants: a page passes the other tenants' members it meets.
	TenantJobsExamineFactor = 10
)

// The states TenantJobs lists: where a job waits.
const (
	ListQueued  = "queued"  // in the backlog, the head lane or an upstream lane
	ListDelayed = "delayed" // scheduled or retrying
	ListRunning = "running" // released to a worker, or running
	ListDead    = "dead"    // a dead letter
)

// JobsQuery selects the page TenantJobs returns.
type JobsQuery struct {
	// State is ListQueued, ListDelayed, ListRunning or ListDead.
	State string
	// Newest walks newest first: the last queued first, the furthest due
	// or lease deadline first, the latest death first. Default oldest
	// first: the next to leave first.
	Newest bool
	// Cursor is the previous page's next cursor; "" starts a walk. A cursor
	// serves only the state and order it was made for.
	Cursor string
	// Limit is the most jobs the page holds: 1 … MaxTenantJobsPage.
	Limit int
}

// jobsCursor is the opaque TenantJobs cursor: the state and order it was
// made for and the script's position (lua/tenant_jobs.lua).
type jobsCursor struct {
	State  string `json:"s"`
	Newest bool   `json:"n,omitempty"`
	Part   string `json:"p"`
	Num    int64  `json:"k"`
	ID     string `json:"i,omitempty"`
}

// TenantJobs returns a page of tenant's jobs in state q.State, in q's
// order, after q.Cursor, and the next page's cursor ("" when the walk is
// done), in one script on the tenant's shard (lua/tenant_jobs.lua: every
// key it reads carries the shard's hash tag). A page costs O(limit) Redis
// work for the tenant's own sets (dead set, backlog, lanes); the delayed
// and lease sets are the shard's, so a page of those examines at most
// limit × TenantJobsExamineFactor members and may hold fewer than limit
// jobs with a cursor to go on. A job that stays in its state shows once
// along a walk's cursors — except that a backlog walk, oldest first, starts
// again at the backlog's head when more than limit jobs left it between two
// pages: a job may show twice, none is skipped. Bad input wraps ErrInvalid.
func (s *Store) TenantJobs(ctx context.Context, tenant string, q JobsQuery) ([]Job, string, error) {
	listed, next, err := s.tenantJobs(ctx, tenant, q)
	jobs := make([]Job, len(listed))
	for i, l := range listed {
		jobs[i] = l.Job
	}
	return jobs, next, err
}

// listedJob is a job TenantJobs listed and the cursor that goes on right
// after it.
type listedJob struct {
	Job
	after jobsCursor
}

// tenantJobs is TenantJobs with each job's position.
func (s *Store) tenantJobs(ctx context.Context, tenant string, q JobsQuery) ([]listedJob, string, error) {
	cur, err := s.checkJobsQuery(tenant, q)
	if err != nil {
		return nil, "", fmt.Errorf("jobs of tenant %q: %w", tenant, err)
	}
	order := "oldest"
	if q.Newest {
		order = "newest"
	}
	d, err := s.run(ctx, scriptTenantJobs, s.keys.shardOf(tenant), tenant, q.State, order, q.Limit,
		q.Limit*TenantJobsExamineFactor, cur.Part, cur.Num, cur.ID)
	if err != nil {
		return nil, "", fmt.Errorf("jobs of tenant %q: %w", tenant, err)
	}
	jobs := make([]listedJob, 0, max(d.Len()-4, 0))
	var errs []error
	for i := 4; i < d.Len(); i++ {
		item := d.list(i)
		j, err := parseJobItem(item)
		if err != nil {
			errs = append(errs, err)
		}
		jobs = append(jobs, listedJob{Job: j, after: jobsCursor{State: q.State, Newest: q.Newest, Part: item.str(2), Num: item.int(3), ID: item.str(0)}})
	}
	next := ""
	if part := d.str(1); part != "" {
		next = encodeJobsCursor(jobsCursor{State: q.State, Newest: q.Newest, Part: part, Num: d.int(2), ID: d.str(3)})
	}
	if err := errors.Join(d.Err(), errors.Join(errs...)); err != nil {
		return nil, "", fmt.Errorf("jobs of tenant %q: %w", tenant, err)
	}
	return jobs, next, nil
}

// checkJobsQuery checks tenant and q and decodes q's cursor.
func (s *Store) checkJobsQuery(tenant string, q JobsQuery) (jobsCursor, error) {
	if err := checkTenant(tenant); err != nil {
		return jobsCursor{}, err
	}
	var errs []error
	switch q.State {
	case ListQueued, ListDelayed, ListRunning, ListDead:
	default:
		errs = append(errs, invalidf("state %q: want queued, delayed, running or dead", q.State))
	}
	if q.Limit < 1 || q.Limit > MaxTenantJobsPage {
		errs = append(errs, invalidf("limit %d: want 1 … %d", q.Limit, MaxTenantJobsPage))
	}
	var cur jobsCursor
	if q.Cursor != "" {
		var err error
		cur, err = decodeJobsCursor(q.Cursor)
		if err != nil || cur.State != q.State || cur.Newest != q.Newest || cur.Part == "" {
			errs = append(errs, invalidf("cursor: not one this listing returned for this state and order"))
		}
	}
	return cur, errors.Join(errs...)
}

// encodeJobsCursor is the opaque form of c.
func encodeJobsCursor(c jobsCursor) string {
	raw, _ := json.Marshal(c) // cannot fail: strings, an int and a bool
	return base64.RawURLEncoding.EncodeToString(raw)
}
