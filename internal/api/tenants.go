package api

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/store"
)

// tenantView is the body of GET /v1/tenants/{tenant}: the effective policy
// in user units (no secrets: they are not in the store) and the tenant's
// state as its next decision would see it.
type tenantView struct {
	Tenant  string      `json:"tenant"`
	Version int64       `json:"version"` // of the tenant's overrides; 0: none
	Policy  policy.View `json:"policy"`
	// Backlog counts the jobs toward max_backlog (scheduled, queued,
	// released, retrying); BacklogBytes their body bytes.
	Backlog      int64 `json:"backlog"`
	BacklogBytes int64 `json:"backlog_bytes"`
	Queued       int64 `json:"queued"`
	QueuedTokens int64 `json:"queued_tokens"`
	Running      int64 `json:"running"`
	Released     int64 `json:"released"`
	// AdmitTokens is the admission bucket's whole tokens now.
	AdmitTokens int64 `json:"admit_tokens"`
	// NextEligibleAt is when the tenant's next job may leave; null when
	// nothing is queued or the tenant cannot send (paused, disabled, at cap).
	NextEligibleAt *string `json:"next_eligible_at"`
	PausedUntil    *string `json:"paused_until"` // null when not paused
	AdminPaused    bool    `json:"admin_paused"`
	// AdminPausedUntil ends an operator's timed pause; null when none.
	AdminPausedUntil *string `json:"admin_paused_until"`
	Disabled         bool    `json:"disabled"`
	DeadLetters      int64   `json:"dead_letters"`
	// EffectiveRate is the rate the tenant's jobs leave at now, tokens per
	// second: the policy rate times RateFactor (docs/design.md §4.2, adaptive).
	EffectiveRate float64 `json:"effective_rate"`
	// RateFactor is the adaptive rate factor as a fraction, 0 < f ≤ 1; 1
	// when the policy is not adaptive.
	RateFactor float64 `json:"rate_factor"`
	// Quota is the last quota the tenant's upstream reported (policy
	// pacing: headers); null when none was or it has reset.
	Quota *quotaView `json:"quota"`
	// PacedRate is the rate pacing by Quota holds the tenant to now, in
	// the quota's unit per second (requests or tokens); null when pacing
	// does not bind (no quota, a roomy one, reset past, pacing off).
	PacedRate *float64 `json:"paced_rate"`
	// OpenDestinations are the destinations the tenant's jobs wait for,
	// their circuits open (docs/design.md §4.5); GET /v1/tenants/{tenant}
	// and its live view only (absent from the listing).
	OpenDestinations *[]openDestinationView `json:"open_destinations,omitempty"`
	forecastView
}

// quotaView is a reported quota in the tenant view.
type quotaView struct {
	Remaining    int64   `json:"remaining"`
	Limit        *int64  `json:"limit"` // null when not reported
	ResetAt      *string `json:"reset_at"`
	Unit         string  `json:"unit"` // requests | tokens
	SourceHeader string  `json:"source_header"`
	// InFlight is what was sent since the report (and in flight at it),
	// counted against Remaining.
	InFlight int64 `json:"in_flight"`
}

// quotaViewOf is st's quota view and paced rate (nil when none).
func quotaViewOf(st store.TenantState) (*quotaView, *float64) {
	q := st.Quota
	if q == nil || !q.ResetAt.After(st.Now) {
		return nil, nil
	}
	v := quotaViewFrom(q)
	if rate, ok := st.PacedRate(); ok {
		return v, &rate
	}
	return v, nil
}

// quotaViewFrom is a tenant's or an upstream's reported quota's view.
func quotaViewFrom(q *store.Quota) *quotaView {
	v := &quotaView{Remaining: q.Remaining, ResetAt: timeString(q.ResetAt), Unit: q.Unit,
		SourceHeader: q.Source, InFlight: q.InFlight}
	if q.Limit > 0 {
		v.Limit = &q.Limit
	}
	return v
}

// policyResponse answers PUT /v1/tenants/{tenant}/policy.
type policyResponse struct {
	Tenant  string      `json:"tenant"`
	Version int64       `json:"version"`
	Policy  policy.View `json:"policy"` // effective, user units
}

// getTenant is GET /v1/tenants/{tenant}; its ETag is the policy version.
func (s *Server) getTenant(r *http.Request, c *call) (int, any, error) {
	tenant, err := tenantOf(r, c)
	if err != nil {
		return 0, nil, err
	}
	return s.tenantResponse(r, c, tenant)
}

// tenantResponse is the 200 tenant view with the policy version as ETag.
func (s *Server) tenantResponse(r *http.Request, c *call, tenant string) (int, any, error) {
	st, err := s.opts.Store.TenantState(r.Context(), tenant)
	if err != nil {
		return 0, nil, s.storeError(r, "tenant_state", err)
	}
	v := tenantViewOf(st)
	open, err := s.openDestinations(r, tenant, st.Now)
	if err != nil {
		return 0, nil, s.storeError(r, "tenant_state", err)
	}
	v.OpenDestinations = &open
	c.w.Header().Set("ETag", etag(st.Version))
	return http.StatusOK, v, nil
}

// putPolicy is PUT /v1/tenants/{tenant}/policy (admin keys): the body
// replaces the tenant's overrides (policy.Overrides JSON). Optional If-Match:
// the version ("3" or 3; 0 = the tenant has no overrides yet; * = any); a
// stale one is a 409. Every problem of the merged policy is listed in one
// 422. webhook_secrets are refused (422): see POST /v1/tenants/{t}/secrets.
// 200 with the new version (also as the ETag) and the effective policy.
func (s *Server) putPolicy(r *http.Request, c *call) (int, any, error) {
	if !c.key.Admin {
		return 0, nil, errorf(http.StatusForbidden, CodeForbidden, "API key %q is not an admin key", c.key.Name)
	}
	tenant, err := tenantOf(r, c)
	if err != nil {
		return 0, nil, err
	}
	ifVersion, err := ifMatch(r.Header)
	if err != nil {
		return 0, nil, err
	}
	o, err := s.readPolicy(c.w, r)
	if err != nil {
		return 0, nil, err
	}
	ov := store.OverridesOf(o)
	version, err := s.opts.Store.PutTenantPolicy(r.Context(), tenant, ov, ifVersion)
	var stale *store.VersionMismatchError
	switch {
	case errors.As(err, &stale):
		return 0, nil, errorf(http.StatusConflict, CodeConflict, "If-Match: the policy of tenant %q is at version %d, not %d", tenant, stale.Current, stale.Want)
	case err != nil:
		return 0, nil, s.storeError(r, "put_policy", err)
	}
	rec, err := s.opts.Store.TenantPolicy(r.Context(), tenant)
	if err != nil {
		return 0, nil, s.storeError(r, "get_policy", err)
	}
	effective := ov.Apply(rec.Defaults.Apply(store.DefaultParams()))
	c.w.Header().Set("ETag", etag(version))
	return http.StatusOK, policyResponse{Tenant: tenant, Version: version, Policy: effective.Policy().View()}, nil
}

// readPolicy reads and validates a policy body: 415, 413, 400 as for every
// body; 422 for an unknown field or a bad value, and for every problem of
// the overrides merged over Options.Defaults (policy.Policy.Validate, whose
// bounds are the store's), all listed in one message.
func (s *Server) readPolicy(w http.ResponseWriter, r *http.Request) (policy.Overrides, error) {
	raw, err := readJSONBody(w, r, s.opts.MaxBodyBytes)
	if err != nil {
		return policy.Overrides{}, err
	}
	o, err := policy.DecodeJSON(bytes.NewReader(raw))
	if err != nil {
		return policy.Overrides{}, invalidJSON(err)
	}
	merged := policy.Resolve(s.rt().Defaults, o)
	errs := []error{merged.Validate()}
	if o.WebhookSecrets != nil {
		errs = append(errs, &policy.FieldError{Field: "webhook_secrets", Err: errors.New(
			"not part of the policy: create secrets with POST /v1/tenants/{tenant}/secrets, or configure them in the configuration file (tenants.<id>.webhook_secrets)")})
	}
	if err := errors.Join(errs...); err != nil {
		return policy.Overrides{}, errorf(http.StatusUnprocessableEntity, CodeInvalid, "invalid policy: %s", joinMessages(err))
	}
	return o, nil
}

// ifMatch reads the If-Match header as a policy version: absent or "*" is
// store.AnyVersion; otherwise a non-negative integer, quoted or not (400
// otherwise; weak tags never match).
func ifMatch(h http.Header) (int64, error) {
	v := strings.TrimSpace(h.Get("If-Match"))
	if v == "" || v == "*" {
		return store.AnyVersion, nil
	}
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, errorf(http.StatusBadRequest, CodeMalformed, `If-Match: want a policy version such as "3", got %q`, h.Get("If-Match"))
	}
	return n, nil
}

func etag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

// tenantOf returns the path's {tenant}: 422 when it is not a valid tenant
// id, 403 when c's key may not act on it.
func tenantOf(r *http.Request, c *call) (string, error) {
	tenant := r.PathValue("tenant")
	if err := policy.ValidTenantID(tenant); err != nil {
		return "", errorf(http.StatusUnprocessableEntity, CodeInvalid, "tenant: %s", err.Error())
	}
	if !c.key.AllowsTenant(tenant) {
		return "", errorf(http.StatusForbidden, CodeForbidden, "API key %q may not act on tenant %q", c.key.Name, tenant)
	}
	return tenant, nil
}

// storeError maps a Store error: no such job → 404; bad input the API's
// checks missed → 422; a reply of the wrong shape → 500 (a bug, logged by
// the caller's wrapper); anything else is Redis failing → redisFailure
// (507 when out of memory, else 503; Retry-After), counted under op and
// logged.
func (s *Server) storeError(r *http.Request, op string, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errorf(http.StatusNotFound, CodeNotFound, "no job %q", r.PathValue("id"))
	case errors.Is(err, store.ErrInvalid):
		return errorf(http.StatusUnprocessableEntity, CodeInvalid, "%s", err.Error())
	case errors.Is(err, store.ErrProtocol):
		return err
	}
	return s.redisFailure(r, op, err)
}
