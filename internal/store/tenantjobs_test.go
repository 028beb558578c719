package store

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// walkJobs walks TenantJobs of tenant in q's state and order, limit at a
// time, failing on a page over the limit or a repeat; it returns the ids
// in walk order.
func (e *env) walkJobs(tenant string, q JobsQuery) []string {
	e.t.Helper()
	var ids []string
	for pages := 0; ; pages++ {
		jobs, next, err := e.store.TenantJobs(e.ctx, tenant, q)
		if err != nil || len(jobs) > q.Limit || pages > 100 {
			e.t.Fatalf("%+v: %d jobs, %v (page %d)", q, len(jobs), err, pages)
		}
		for _, j := range jobs {
			if slices.Contains(ids, j.ID) || j.Tenant != tenant {
				e.t.Fatalf("%+v: job %s of %q listed again or not the tenant's", q, j.ID, j.Tenant)
			}
			ids = append(ids, j.ID)
		}
		if next == "" {
			return ids
		}
		q.Cursor = next
	}
}

func reversed(s []string) []string {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}

// Each state lists the tenant's jobs in it, every one once along the
// cursors, in the walk's order both ways: queued (head lane first, then
// the backlog), delayed and running (shared sets: the other tenant's jobs
// passed), dead; bad queries wrap ErrInvalid.
func TestTenantJobsByState(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	dead := e.deadLetters("acme", 3, wire.FinishPermanent)
	for range 3 {
		e.enqueueOne("busy", item(`{}`))
	}
	running := e.inFlight("busy", 3)
	var queued []string
	for range 7 {
		queued = append(queued, e.enqueueOne("acme", item(`{}`)).ID)
	}
	head := queued[5]
	e.toHeadLane("acme", head, 1) // given back: first to go
	queued = append([]string{head}, slices.Delete(queued, 5, 6)...)
	var delayed []string
	for i := range 5 {
		it := item(`{}`)
		it.Delay = time.Duration(i+1) * time.Minute
		delayed = append(delayed, e.enqueueOne("acme", it).ID)
		e.enqueueOne("other", it) // between them in the shared delayed set
	}

	for _, tc := range []struct {
		tenant, state string
		want          []string
	}{
		{"acme", ListQueued, queued}, {"acme", ListDelayed, delayed}, {"acme", ListDead, dead},
		{"busy", ListRunning, []string{running[0].ID, running[1].ID, running[2].ID}},
		{"acme", ListRunning, nil},
	} {
		for _, limit := range []int{1, 2, 100} {
			if got := e.walkJobs(tc.tenant, JobsQuery{State: tc.state, Limit: limit}); !slices.Equal(got, tc.want) {
				t.Errorf("%s oldest, limit %d: %q, want %q", tc.state, limit, got, tc.want)
			}
			if got := e.walkJobs(tc.tenant, JobsQuery{State: tc.state, Newest: true, Limit: limit}); !slices.Equal(got, reversed(tc.want)) {
				t.Errorf("%s newest, limit %d: %q, want %q", tc.state, limit, got, reversed(tc.want))
			}
		}
	}

	// The backlog moves between pages: jobs sent and canceled shift
	// nothing the walk has not passed.
	jobs, next, err := e.store.TenantJobs(e.ctx, "acme", JobsQuery{State: ListQueued, Limit: 3})
	if err != nil || len(jobs) != 3 || next == "" {
		t.Fatalf("first page: %d jobs, %q, %v", len(jobs), next, err)
	}
	e.cancel(queued[1])
	e.cancel(queued[4])
	rest := e.walkJobs("acme", JobsQuery{State: ListQueued, Limit: 2, Cursor: next})
	if want := []string{queued[3], queued[5], queued[6]}; !slices.Equal(rest, want) {
		t.Fatalf("after two cancels: %q, want %q", rest, want)
	}

	_, cur, _ := e.store.TenantJobs(e.ctx, "acme", JobsQuery{State: ListDead, Limit: 1})
	for _, q := range []JobsQuery{{State: "gone", Limit: 1}, {State: ListDead, Limit: 0},
		{State: ListDead, Limit: MaxTenantJobsPage + 1}, {State: ListDead, Limit: 1, Cursor: "%%"},
		{State: ListQueued, Limit: 1, Cursor: cur}, {State: ListDead, Newest: true, Limit: 1, Cursor: cur}} {
		if _, _, err := e.store.TenantJobs(e.ctx, "acme", q); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", q, err)
		}
	}
}

// CancelTenantJobs cancels what Match selects, limit jobs listed a call,
// queued then delayed, the jobs kept in their order; each canceled job
// that asked for a callback has it queued; a repeated call cancels nothing
// again; bad input cancels nothing.
func TestCancelTenantJobs(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	var keep, drop []string
	for i := range 10 {
		it := item(`{}`)
		if i%2 == 0 {
			it.Callback = "https://example.com/cb"
			drop = append(drop, e.enqueueOne("acme", it).ID)
		} else {
			keep = append(keep, e.enqueueOne("acme", it).ID)
		}
	}
	for range 3 {
		it := item(`{}`)
		it.Delay = time.Hour
		drop = append(drop, e.enqueueOne("acme", it).ID)
	}
	match := func(j Job) bool { return slices.Contains(drop, j.ID) }
	total, calls := 0, 0
	for cursor := ""; ; calls++ {
		n, next, err := e.store.CancelTenantJobs(e.ctx, "acme", CancelSelect{Match: match, Limit: 3, Cursor: cursor})
		if err != nil || n > 3 || calls > 20 {
			t.Fatalf("call %d: %d canceled, %v", calls, n, err)
		}
		total += n
		if next == "" {
			break
		}
		cursor = next
	}
	if total != len(drop) {
		t.Fatalf("canceled %d, want %d", total, len(drop))
	}
	for _, id := range drop {
		if j := e.job(id); j.State != StateCanceled {
			t.Fatalf("job %s is %s, want canceled", id, j.State)
		}
	}
	if got := e.walkJobs("acme", JobsQuery{State: ListQueued, Limit: 100}); !slices.Equal(got, keep) {
		t.Fatalf("queued after: %q, want %q", got, keep)
	}
	if due := e.rdb.ZCard(e.ctx, e.store.keys.callbacks(0)).Val(); due != 5 {
		t.Fatalf("%d callbacks queued, want the 5 jobs that asked", due)
	}
	if n, _, err := e.store.CancelTenantJobs(e.ctx, "acme", CancelSelect{Match: match, Limit: 100}); err != nil || n != 0 {
		t.Fatalf("repeated: %d canceled, %v; want none", n, err)
	}
	for _, sel := range []CancelSelect{{State: ListRunning, Limit: 1}, {State: ListDead, Limit: 1}, {Limit: 0},
		{State: ListDelayed, Limit: 1, Cursor: "e30"}} {
		if n, _, err := e.store.CancelTenantJobs(e.ctx, "acme", sel); !errors.Is(err, ErrInvalid) || n != 0 {
			t.Errorf("%+v: %d, %v; want ErrInvalid", sel, n, err)
		}
	}
}
