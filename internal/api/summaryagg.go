package api

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/store"
)

// seesAll reports whether the key of c may see every tenant (a "*" glob):
// its summary is the deployment's, read from the shards' aggregates
// (summaryAll) instead of a walk of every tenant.
func seesAll(c *call) bool { return slices.Contains(c.key.Tenants, "*") }

// summaryAll is GET /v1/summary for a key that sees every tenant: the
// totals from the shards' aggregates (store.Observe: one script a shard,
// whatever the tenant count), the deployment-wide reads, and the
// attention and busiest tenants read in full (store.TenantViews). One
// computation per key serves its polls for Options.SummaryCache or
// SummaryCostFactor times its duration, whichever is longer.
func (s *Server) summaryAll(r *http.Request, c *call) (int, any, error) {
	e := s.summaries.entry(c.key.Name)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.base == nil && !e.expires.IsZero() && s.bases.now().Before(e.expires) {
		return http.StatusOK, e.view, nil
	}
	start := time.Now()
	v, op, err := s.readSummaryAll(r.Context(), c)
	if err != nil {
		return 0, nil, s.storeError(r, op, err)
	}
	e.view, e.base = v, nil
	e.expires = s.bases.now().Add(max(s.opts.SummaryCache, SummaryCostFactor*time.Since(start)))
	return http.StatusOK, v, nil
}

// readSummaryAll reads summaryAll's view; on failure, the store call's
// name (op) with its error.
func (s *Server) readSummaryAll(ctx context.Context, c *call) (summaryView, string, error) {
	obs, err := s.opts.Store.Observe(ctx, store.ObserveOptions{Top: max(BusiestMax, attentionRead), Attention: attentionRead})
	if err != nil {
		return summaryView{}, "observe", err
	}
	v := summaryView{Tenants: int(obs.Tenants), Backlog: obs.Backlog, Running: obs.Running,
		DeadLetters: obs.DeadLetters, Paused: int(obs.Paused), Disabled: int(obs.Disabled), At: *timeString(obs.Now)}
	v.Key = keyView{Name: c.key.Name, Admin: c.key.Admin, Tenants: append([]string{}, c.key.Tenants...)}
	b, err := s.readDeployment(ctx)
	if re := (*summaryReadError)(nil); errors.As(err, &re) {
		return summaryView{}, re.op, re.err
	}
	v.InFlight, v.Workers, v.WorkerCapacity = b.inFlight, b.workers, b.capacity
	v.Throttlers, v.Unowned, v.DeliveriesPerS = b.throttlers, b.unowned, b.deliveriesPerS
	if v.Attention, v.Busiest, err = s.attentionAndBusiest(ctx, obs); err != nil {
		return summaryView{}, "tenant_state", err
	}
	return v, "", nil
}

// attentionAndBusiest reads in full the disabled and paused tenants the
// observation named and its largest backlogs (one script a shard): the
// attention list is those disabled, paused or not draining, oldest queued
// job first, at most AttentionMax; busiest the BusiestMax largest
// backlogs. Of the tenants holding a backlog, only the largest
// attentionRead are looked at for not draining.
func (s *Server) attentionAndBusiest(ctx context.Context, obs store.Observation) (attention, busiest []tenantView, err error) {
	names := append(append([]string{}, obs.DisabledTenants...), obs.PausedTenants...)
	for _, tb := range obs.Top {
		if tb.Backlog > 0 {
			names = append(names, tb.Tenant)
		}
	}
	slices.Sort(names)
	states, err := s.opts.Store.TenantViews(ctx, slices.Compact(names))
	if err != nil {
		return nil, nil, err
	}
	byName := map[string]tenantView{}
	var needs []store.TenantState
	for _, st := range states {
		v := tenantViewOf(st)
		byName[st.Tenant] = v
		if v.Disabled || !v.Draining {
			needs = append(needs, st)
		}
	}
	pos := tenantOrders["oldest"]
	slices.SortFunc(needs, func(a, b store.TenantState) int {
		return cmp.Or(cmp.Compare(pos(summaryKey("oldest", summaryOf(a))), pos(summaryKey("oldest", summaryOf(b)))),
			cmp.Compare(a.Tenant, b.Tenant))
	})
	attention = []tenantView{}
	for _, st := range needs[:min(len(needs), AttentionMax)] {
		attention = append(attention, byName[st.Tenant])
	}
	busiest = []tenantView{}
	for _, tb := range obs.Top {
		if v, ok := byName[tb.Tenant]; ok && tb.Backlog > 0 && len(busiest) < BusiestMax {
			busiest = append(busiest, v)
		}
	}
	return attention, busiest, nil
}

// summaryOf is the part of st summaryKey sorts by.
func summaryOf(st store.TenantState) store.TenantSummary {
	return store.TenantSummary{Tenant: st.Tenant, Backlog: st.Backlog, OldestQueuedAt: st.OldestQueuedAt}
}
