package api

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/store"
)

// forecastView is the drain forecast in every tenant view (store.Forecast).
type forecastView struct {
	// OldestJobAgeS is how long the oldest queued job has waited, seconds;
	// null when none is queued.
	OldestJobAgeS *float64 `json:"oldest_job_age_s"`
	// DrainETAS is how long the backlog takes to leave at the effective
	// rate, pauses counted, seconds; null when disabled or paused without end.
	DrainETAS *float64 `json:"drain_eta_s"`
	// InflowPerS is the tokens admitted per second over the last minute.
	InflowPerS float64 `json:"inflow_per_s"`
	// Draining is false when inflow ≥ the effective rate or the tenant is
	// paused or disabled.
	Draining bool `json:"draining"`
}

// tenantViewOf is the tenant view of st.
func tenantViewOf(st store.TenantState) tenantView {
	v := tenantView{Tenant: st.Tenant, Version: st.Version, Policy: st.Policy.Policy().View(),
		Backlog: st.Backlog, BacklogBytes: st.Bytes, Queued: st.Queued, QueuedTokens: st.QueuedCost,
		Running: st.Running, Released: st.Released, AdmitTokens: st.AdmitTokens,
		NextEligibleAt: timeString(st.NextAt), AdminPaused: st.AdminPaused, Disabled: st.Disabled,
		DeadLetters: st.DeadLetters, EffectiveRate: st.EffectiveRate(),
		RateFactor: float64(st.RateFactor) / store.RateFactorFull}
	if st.AdminUntil.After(st.Now) {
		v.AdminPausedUntil = timeString(st.AdminUntil)
	}
	if st.PausedUntil.After(st.Now) {
		v.PausedUntil = timeString(st.PausedUntil)
	}
	v.Quota, v.PacedRate = quotaViewOf(st)
	f := st.Forecast()
	v.InflowPerS, v.Draining = f.InflowPerSecond, f.Draining
	if !st.OldestQueuedAt.IsZero() {
		v.OldestJobAgeS = seconds(f.OldestJobAge)
	}
	if f.DrainKnown {
		v.DrainETAS = seconds(f.DrainETA)
	}
	return v
}

func seconds(d time.Duration) *float64 {
	s := d.Seconds()
	return &s
}

// Bounds of GET /v1/tenants.
const (
	TenantsLimitDefault = 50
	MaxTenantsLimit     = 500
)

// tenantPage answers GET /v1/tenants.
type tenantPage struct {
	Tenants []tenantView `json:"tenants"`
	Cursor  *string      `json:"cursor"` // null on the last page
}

// tenantCursor is the opaque cursor: the sort, the name prefix and the last
// item's position.
type tenantCursor struct {
	Sort   string `json:"s"`
	Prefix string `json:"p,omitempty"`
	Tenant string `json:"t"`
	Key    int64  `json:"k"`
}

// tenantOrders are the sorts TenantKeys serves: each maps a tenant's key
// (store.TenantKey.Key) to its position, smaller first; ties go by tenant
// id, so the order is total. "name" is served by tenantsByName.
var tenantOrders = map[string]func(key int64) int64{
	"backlog": func(backlog int64) int64 { return -backlog },
	"oldest": func(created int64) int64 { // oldest first; none queued last
		if created < 0 {
			return 1 << 62
		}
		return created
	},
}

// tenantStates are the state filters: "" any, else the state it selects
// (store.TenantKey.State).
var tenantStates = map[string]string{
	"": "", "disabled": store.TenantDisabled, "paused": store.TenantPaused, "active": store.TenantActive,
}

// stateOf is st's state as store.TenantKey.State says it.
func stateOf(st store.TenantState) string {
	switch {
	case st.Disabled:
		return store.TenantDisabled
	case st.Paused():
		return store.TenantPaused
	}
	return store.TenantActive
}

// tenantsExamineMax bounds the tenants one sort=name page examines: a page
// whose filters (state, the key's tenant globs) select few tenants may hold
// fewer than limit tenants, with a cursor to go on.
const tenantsExamineMax = 10 * MaxTenantsLimit

// listTenants is GET /v1/tenants?cursor=&limit=&sort=&state=&prefix=: a
// page of the views of every tenant with state in Redis that the key may
// see and whose id begins with prefix, in the sort's order, after the
// cursor's position; each tenant appears once along the cursors while
// nothing changes. name (the default): by id, in byte order, O(limit) per
// page (tenantsByName; a prefix narrows the names read, a lexicographic
// range of each shard's name set); backlog (largest first) and oldest
// (oldest queued job first): every tenant's key is read (tenantsByKey), the
// prefix filters them. Bad parameters: 400.
func (s *Server) listTenants(r *http.Request, c *call) (int, any, error) {
	q, err := parseTenantQuery(r)
	if err != nil {
		return 0, nil, err
	}
	page := tenantPage{Tenants: []tenantView{}}
	if len(c.key.Tenants) == 0 {
		return http.StatusOK, page, nil // the key sees no tenant
	}
	if q.sort == "name" {
		err = s.tenantsByName(r.Context(), q, c.key.AllowsTenant, &page)
	} else {
		err = s.tenantsByKey(r.Context(), q, c.key.AllowsTenant, &page)
	}
	if err != nil {
		return 0, nil, s.storeError(r, "list_tenants", err)
	}
	return http.StatusOK, page, nil
}

// tenantsByName fills page in name order: it reads the names after the
// cursor from every shard (store.TenantNames), the views of those the key
// may see (store.TenantViews, one script per shard), and keeps those the
// state filter selects, until the page is full, the names end, or
// tenantsExamineMax names were examined. Without a state filter, a page
// reads limit names per shard and limit views.
func (s *Server) tenantsByName(ctx context.Context, q tenantQuery, allowed func(string) bool, page *tenantPage) error {
	after, n := "", q.limit
	if q.after != nil {
		after = q.after.Tenant
	}
	for examined := 0; examined < tenantsExamineMax; n = min(4*n, store.MaxTenantNames) {
		n = min(n, tenantsExamineMax-examined)
		names, more, err := s.opts.Store.TenantNames(ctx, q.prefix, after, n)
		if err != nil {
			return err
		}
		views, err := s.opts.Store.TenantViews(ctx, slices.DeleteFunc(slices.Clone(names), func(tn string) bool { return !allowed(tn) }))
		if err != nil {
			return err
		}
		byName := make(map[string]store.TenantState, len(views))
		for _, st := range views {
			byName[st.Tenant] = st
		}
		for i, tn := range names {
			examined++
			after = tn
			if st, ok := byName[tn]; ok && (q.state == "" || stateOf(st) == tenantStates[q.state]) {
				page.Tenants = append(page.Tenants, tenantViewOf(st))
			}
			if len(page.Tenants) == q.limit {
				if more || i < len(names)-1 {
					page.Cursor = encodeTenantCursor(tenantCursor{Sort: q.sort, Prefix: q.prefix, Tenant: tn})
				}
				return nil
			}
		}
		if !more {
			return nil
		}
	}
	page.Cursor = encodeTenantCursor(tenantCursor{Sort: q.sort, Prefix: q.prefix, Tenant: after})
	return nil
}

// tenantsByKey fills page in the order of q.sort: it reads every tenant's
// key and state (store.TenantKeys), sorts those the key may see and the
// filter selects, and reads the views of the page's (store.TenantViews).
func (s *Server) tenantsByKey(ctx context.Context, q tenantQuery, allowed func(string) bool, page *tenantPage) error {
	keys, err := s.opts.Store.TenantKeys(ctx, q.sort)
	if err != nil {
		return err
	}
	pos, want := tenantOrders[q.sort], tenantStates[q.state]
	keys = slices.DeleteFunc(keys, func(k store.TenantKey) bool {
		return (want != "" && k.State != want) || !allowed(k.Tenant) || !strings.HasPrefix(k.Tenant, q.prefix) ||
			(q.after != nil && cmp.Or(cmp.Compare(pos(k.Key), q.after.Key), cmp.Compare(k.Tenant, q.after.Tenant)) <= 0)
	})
	slices.SortFunc(keys, func(a, b store.TenantKey) int {
		return cmp.Or(cmp.Compare(pos(a.Key), pos(b.Key)), cmp.Compare(a.Tenant, b.Tenant))
	})
	if len(keys) > q.limit {
		last := keys[q.limit-1]
		page.Cursor = encodeTenantCursor(tenantCursor{Sort: q.sort, Prefix: q.prefix, Tenant: last.Tenant, Key: pos(last.Key)})
		keys = keys[:q.limit]
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.Tenant
	}
	views, err := s.opts.Store.TenantViews(ctx, names)
	for _, st := range views {
		page.Tenants = append(page.Tenants, tenantViewOf(st))
	}
	return err
}

// encodeTenantCursor is the opaque form of c.
func encodeTenantCursor(c tenantCursor) *string {
	raw, _ := json.Marshal(c)
	cur := base64.RawURLEncoding.EncodeToString(raw)
	return &cur
}

type tenantQuery struct {
	sort, state, prefix string
	limit               int
	after               *tenantCursor
}

// parseTenantQuery reads GET /v1/tenants' parameters; every problem is one 400.
func parseTenantQuery(r *http.Request) (tenantQuery, error) {
	v := r.URL.Query()
	q := tenantQuery{sort: cmp.Or(v.Get("sort"), "name"), state: v.Get("state"), prefix: v.Get("prefix"), limit: TenantsLimitDefault}
	var errs []error
	if _, ok := tenantOrders[q.sort]; !ok && q.sort != "name" {
		errs = append(errs, errors.New("sort: want backlog, oldest or name"))
	}
	if _, ok := tenantStates[q.state]; !ok {
		errs = append(errs, errors.New("state: want paused, disabled or active"))
	}
	if policy.ValidTenantPrefix(q.prefix) != nil {
		errs = append(errs, errors.New("prefix: want up to "+strconv.Itoa(policy.MaxTenantIDLen)+" characters of [A-Za-z0-9._@-]"))
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxTenantsLimit {
			errs = append(errs, errors.New("limit: want 1 … "+strconv.Itoa(MaxTenantsLimit)))
		}
		q.limit = n
	}
	if c := v.Get("cursor"); c != "" {
		var cur tenantCursor
		raw, err := base64.RawURLEncoding.DecodeString(c)
		if err == nil {
			err = json.Unmarshal(raw, &cur)
		}
		if err != nil || cur.Sort != q.sort || cur.Prefix != q.prefix || cur.Tenant == "" {
			errs = append(errs, errors.New("cursor: not one this listing returned for this sort and prefix"))
		}
		q.after = &cur
	}
	if err := errors.Join(errs...); err != nil {
		return tenantQuery{}, errorf(http.StatusBadRequest, CodeMalformed, "%s", joinMessages(err))
	}
	return q, nil
}

// Bounds of POST /v1/tenants/{tenant}/dead:replay.
const ReplayLimitDefault = 100

// replayRequest is the optional body of POST /v1/tenants/{tenant}/dead:replay.
type replayRequest struct {
	Reason string  `json:"reason"` // "" = any (store.DeadReplay.Reason)
	Before *string `json:"before"` // RFC 3339; null = the walk's first call
	Limit  *int    `json:"limit"`  // 1 … store.MaxReplayDead; default ReplayLimitDefault
	Cursor string  `json:"cursor"` // "" starts a walk
}

// replayResponse answers POST /v1/tenants/{tenant}/dead:replay.
type replayResponse struct {
	Replayed int     `json:"replayed"`
	Cursor   *string `json:"cursor"` // null when the walk is done
}

// replayDead is POST /v1/tenants/{tenant}/dead:replay (admin keys): replays
// up to limit dead letters selected by reason and before, oldest death
// first (store.ReplayDead); repeat with the returned cursor until it is
// null. A walk replays each letter at most once. Bad input: 400, nothing
// replayed.
func (s *Server) replayDead(r *http.Request, c *call) (int, any, error) {
	tenant, err := s.adminTenant(r, c)
	if err != nil {
		return 0, nil, err
	}
	var req replayRequest
	if err := decodeOptionalJSON(c.w, r, s.opts.MaxBodyBytes, &req); err != nil {
		return 0, nil, err
	}
	sel := store.DeadReplay{Reason: req.Reason, Limit: ReplayLimitDefault, Cursor: req.Cursor}
	if req.Limit != nil {
		sel.Limit = *req.Limit
	}
	if req.Before != nil {
		if sel.Before, err = time.Parse(time.RFC3339Nano, *req.Before); err != nil {
			return 0, nil, errorf(http.StatusBadRequest, CodeMalformed, "before: not an RFC 3339 time: %q", *req.Before)
		}
	}
	n, next, err := s.opts.Store.ReplayDead(r.Context(), tenant, sel)
	if errors.Is(err, store.ErrInvalid) {
		return 0, nil, errorf(http.StatusBadRequest, CodeMalformed, "%s", err.Error())
	}
	if err != nil {
		return 0, nil, s.storeError(r, "replay_dead", err)
	}
	resp := replayResponse{Replayed: n}
	if next != "" {
		resp.Cursor = &next
	}
	return http.StatusOK, resp, nil
}
