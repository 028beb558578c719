package api

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

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

// tenantCursor is the opaque cursor: the sort and the last item's position.
type tenantCursor struct {
	Sort   string `json:"s"`
	Tenant string `json:"t"`
	Key    int64  `json:"k"`
}

// tenantOrders are the sorts: each maps a view to its key, smaller first;
// ties go by tenant id, so the order is total.
var tenantOrders = map[string]func(store.TenantSummary) int64{
	"name":    func(store.TenantSummary) int64 { return 0 },
	"backlog": func(st store.TenantSummary) int64 { return -st.Backlog },
	"oldest": func(st store.TenantSummary) int64 { // oldest first; none queued last
		if st.OldestQueuedAt.IsZero() {
			return 1 << 62
		}
		return st.OldestQueuedAt.UnixMicro()
	},
}

// tenantStates are the state filters.
var tenantStates = map[string]func(store.TenantSummary) bool{
	"":         func(store.TenantSummary) bool { return true },
	"disabled": func(st store.TenantSummary) bool { return st.Disabled },
	"paused":   func(st store.TenantSummary) bool { return !st.Disabled && st.Paused() },
	"active":   func(st store.TenantSummary) bool { return !st.Disabled && !st.Paused() },
}

// listTenants is GET /v1/tenants?cursor=&limit=&sort=&state=: a page of the
// views of every tenant with state in Redis that the key may see, in the
// sort's order (name: by id; backlog: largest first; oldest: oldest queued
// job first), after the cursor's position. Each page reads a summary of
// every tenant (store.Tenants: a few Redis commands per tenant), then the
// full state of the page's (store.TenantState, one script each): each
// tenant appears once along the cursors while nothing changes. Bad
// parameters: 400.
func (s *Server) listTenants(r *http.Request, c *call) (int, any, error) {
	q, err := parseTenantQuery(r)
	if err != nil {
		return 0, nil, err
	}
	all, err := s.opts.Store.Tenants(r.Context())
	if err != nil {
		return 0, nil, s.storeError(r, "list_tenants", err)
	}
	key, keep := tenantOrders[q.sort], tenantStates[q.state]
	all = slices.DeleteFunc(all, func(st store.TenantSummary) bool {
		return !keep(st) || !c.key.AllowsTenant(st.Tenant)
	})
	order := func(a, b store.TenantSummary) int {
		return cmp.Or(cmp.Compare(key(a), key(b)), cmp.Compare(a.Tenant, b.Tenant))
	}
	slices.SortFunc(all, order)
	if q.after != nil {
		all = slices.DeleteFunc(all, func(st store.TenantSummary) bool {
			return cmp.Or(cmp.Compare(key(st), q.after.Key), cmp.Compare(st.Tenant, q.after.Tenant)) <= 0
		})
	}
	page := tenantPage{Tenants: []tenantView{}}
	for _, sum := range all[:min(q.limit, len(all))] {
		st, err := s.opts.Store.TenantState(r.Context(), sum.Tenant)
		if err != nil {
			return 0, nil, s.storeError(r, "tenant_state", err)
		}
		page.Tenants = append(page.Tenants, tenantViewOf(st))
	}
	if len(all) > q.limit {
		last := all[q.limit-1]
		raw, _ := json.Marshal(tenantCursor{Sort: q.sort, Tenant: last.Tenant, Key: key(last)})
		cur := base64.RawURLEncoding.EncodeToString(raw)
		page.Cursor = &cur
	}
	return http.StatusOK, page, nil
}

type tenantQuery struct {
	sort, state string
	limit       int
	after       *tenantCursor
}

// parseTenantQuery reads GET /v1/tenants' parameters; every problem is one 400.
func parseTenantQuery(r *http.Request) (tenantQuery, error) {
	v := r.URL.Query()
	q := tenantQuery{sort: cmp.Or(v.Get("sort"), "name"), state: v.Get("state"), limit: TenantsLimitDefault}
	var errs []error
	if _, ok := tenantOrders[q.sort]; !ok {
		errs = append(errs, errors.New("sort: want backlog, oldest or name"))
	}
	if _, ok := tenantStates[q.state]; !ok {
		errs = append(errs, errors.New("state: want paused, disabled or active"))
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
		if err != nil || cur.Sort != q.sort || cur.Tenant == "" {
			errs = append(errs, errors.New("cursor: not one this listing returned for this sort"))
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
