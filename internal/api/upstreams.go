package api

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/upstream"
)

// Shared upstream quotas (issue #15): the registry routes. Any key reads
// them (an upstream belongs to no tenant); only admin keys write.

// Bounds of GET /v1/upstreams.
const (
	UpstreamsLimitDefault = 50
	MaxUpstreamsLimit     = 500
)

// upstreamView is one upstream as GET, PUT, pause and resume answer it.
type upstreamView struct {
	Name string `json:"name"`
	// Version is bumped by every PUT (and by a seed that changed it); the
	// ETag is "u<version>".
	Version int64 `json:"version"`
	// Source is who wrote the configuration last: "config" (the file) or
	// "api" (PUT).
	Source string `json:"source"`
	// Config is the configuration, defaults applied: what a PUT takes.
	Config upstream.View `json:"config"`
	Paused bool          `json:"paused"`
	// PausedUntil ends the pause in force; null when not paused or paused
	// until resumed.
	PausedUntil *string `json:"paused_until"`
	// PauseReason is "manual" (an operator) or "throttled" (a throttled
	// answer, pause_scope upstream); null when not paused.
	PauseReason *string `json:"pause_reason"`
	// Runtime is the coordinator's state (effective rate, tokens, waiting
	// jobs by tenant): quota.UpstreamRuntime, read by GET only; null in the
	// other answers and when it cannot be read — never invented here.
	Runtime *upstreamRuntimeView `json:"runtime"`
}

// upstreamRuntimeView is an upstream's state now (quota.UpstreamRuntime).
type upstreamRuntimeView struct {
	// EffectiveRate is the rate jobs leave at now, cost units per second
	// (the configured rate, cut when adaptive).
	EffectiveRate float64 `json:"effective_rate"`
	// Tokens are the cost units that may leave now.
	Tokens int64 `json:"tokens"`
	// WaitingByTenant counts the jobs waiting on the upstream, by tenant
	// (only the tenants the key may see).
	WaitingByTenant map[string]int64 `json:"waiting_by_tenant"`
	// Running is the jobs naming the upstream running under its
	// concurrency now (0 for an upstream without one).
	Running int64 `json:"running"`
	// Quota is the last quota the upstream's answers reported, while it
	// paces the upstream (pause_scope upstream, pacing headers) and has
	// not reset; null otherwise. Its in_flight is what the coordinator
	// handed out since the reporting request was sent.
	Quota *quotaView `json:"quota"`
	// PacedRate is the rate pacing by Quota holds the upstream to now, in
	// cost units per second (0: nothing left before the reset); null when
	// pacing does not bind.
	PacedRate *float64 `json:"paced_rate"`
}

// upstreamViewOf is rec's view.
func upstreamViewOf(rec quota.UpstreamRecord) upstreamView {
	v := upstreamView{Name: rec.Name, Version: rec.Version, Source: rec.Source, Config: rec.Config.View(),
		Paused: !rec.PausedUntil.IsZero()}
	if v.Paused {
		reason := rec.PauseReason
		v.PauseReason = &reason
		if !rec.PausedUntilResume() {
			v.PausedUntil = timeString(rec.PausedUntil)
		}
	}
	return v
}

// upstreamPage answers GET /v1/upstreams.
type upstreamPage struct {
	Upstreams []upstreamView `json:"upstreams"`
	Cursor    *string        `json:"cursor"` // null on the last page
}

// upstreamPauseRequest is the optional body of POST
// /v1/upstreams/{name}/pause.
type upstreamPauseRequest struct {
	// For is how long the pause lasts (a Go duration, "30s"); absent:
	// until resumed.
	For *string `json:"for"`
}

// upstreamOf returns the path's {name}: 422 when it is not a valid
// upstream name.
func upstreamOf(r *http.Request) (string, error) {
	name := r.PathValue("name")
	if err := upstream.ValidName(name); err != nil {
		return "", errorf(http.StatusUnprocessableEntity, CodeInvalid, "name: %s", err.Error())
	}
	return name, nil
}

// adminUpstream checks the key is an admin key and returns the path's
// upstream name.
func adminUpstream(r *http.Request, c *call) (string, error) {
	if !c.key.Admin {
		return "", errorf(http.StatusForbidden, CodeForbidden, "API key %q is not an admin key", c.key.Name)
	}
	return upstreamOf(r)
}

// adminUpstreamWrite is adminUpstream and the request's If-Match, checked
// (400 when malformed).
func adminUpstreamWrite(r *http.Request, c *call) (name, ifMatch string, err error) {
	if name, err = adminUpstream(r, c); err != nil {
		return "", "", err
	}
	ifMatch = r.Header.Get("If-Match")
	if _, err := quota.ParseUpstreamIfMatch(ifMatch); err != nil {
		return "", "", errorf(http.StatusBadRequest, CodeMalformed, `If-Match: want an upstream version such as "u3", got %q`, ifMatch)
	}
	return name, ifMatch, nil
}

// upstreamResponse reads name and answers status with its view and ETag;
// 404 when it does not exist.
func (s *Server) upstreamResponse(r *http.Request, c *call, status int, name string) (int, any, error) {
	rec, err := s.opts.Store.Upstream(r.Context(), name)
	if err != nil {
		return 0, nil, s.upstreamError(r, "get_upstream", name, err)
	}
	c.w.Header().Set("ETag", quota.UpstreamETag(rec.Version))
	return status, upstreamViewOf(rec), nil
}

// upstreamError maps a store error about upstream name: no such upstream
// → 404, else as storeError.
func (s *Server) upstreamError(r *http.Request, op, name string, err error) error {
	if errors.Is(err, quota.ErrUpstreamNotFound) {
		return errorf(http.StatusNotFound, CodeNotFound, "no upstream %q", name)
	}
	return s.storeError(r, op, err)
}

// getUpstream is GET /v1/upstreams/{name}: 200 with the upstream and its
// version as ETag; 404 when there is none.
func (s *Server) getUpstream(r *http.Request, c *call) (int, any, error) {
	name, err := upstreamOf(r)
	if err != nil {
		return 0, nil, err
	}
	status, body, err := s.upstreamResponse(r, c, http.StatusOK, name)
	if v, ok := body.(upstreamView); ok && err == nil {
		v.Runtime = s.upstreamRuntime(r, c, name)
		body = v
	}
	return status, body, err
}

// upstreamRuntime reads name's state now (quota.UpstreamRuntime: one read
// of the upstream, one bounded script per shard), the waiting jobs limited
// to the tenants c's key may see; nil (logged) when it cannot be read.
func (s *Server) upstreamRuntime(r *http.Request, c *call, name string) *upstreamRuntimeView {
	rt, err := s.opts.Store.UpstreamRuntime(r.Context(), name)
	if err != nil || rt.EffectiveIntervalUS < 1 {
		s.opts.Logger.WarnContext(r.Context(), "read upstream runtime", "upstream", name, "err", err)
		return nil
	}
	waiting := map[string]int64{}
	for tn, n := range rt.WaitingByTenant {
		if c.key.AllowsTenant(tn) {
			waiting[tn] = n
		}
	}
	v := &upstreamRuntimeView{EffectiveRate: 1e6 / float64(rt.EffectiveIntervalUS), Tokens: rt.Tokens,
		WaitingByTenant: waiting, Running: rt.Running}
	if rt.Quota != nil {
		v.Quota = quotaViewFrom(rt.Quota)
	}
	if rt.Paced {
		rate := rt.PacedRate
		v.PacedRate = &rate
	}
	return v
}

// putUpstream is PUT /v1/upstreams/{name} (admin keys): the body
// (upstream.Config JSON: rate, burst, concurrency, adaptive, pause_scope,
// cost_header, pacing; unset fields take their defaults) replaces the upstream's
// configuration; its pause and state are kept. Optional If-Match: the
// version ("u3", or 3; 0 = the upstream must not exist yet; * = any); a
// stale one is 412, a malformed one 400. 422 lists every problem of the
// configuration. 201 when it created the upstream, else 200, with the
// upstream and its new version as ETag.
func (s *Server) putUpstream(r *http.Request, c *call) (int, any, error) {
	name, ifMatch, err := adminUpstreamWrite(r, c)
	if err != nil {
		return 0, nil, err
	}
	raw, err := readJSONBody(c.w, r, s.opts.MaxBodyBytes)
	if err != nil {
		return 0, nil, err
	}
	cfg, err := upstream.DecodeJSON(bytes.NewReader(raw))
	if err != nil {
		return 0, nil, invalidJSON(err)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return 0, nil, errorf(http.StatusUnprocessableEntity, CodeInvalid, "invalid upstream: %s", joinMessages(err))
	}
	version, err := s.opts.Store.PutUpstream(r.Context(), name, cfg, quota.SourceAPI, ifMatch)
	if err != nil {
		return 0, nil, s.upstreamWriteError(r, "put_upstream", name, err)
	}
	s.upstreams.Forget(name)
	status := http.StatusOK
	if version == 1 {
		status = http.StatusCreated
	}
	return s.upstreamResponse(r, c, status, name)
}

// upstreamWriteError maps a store error of a write to upstream name: a
// stale If-Match → 412, in use → 409, no such upstream → 404, else as
// storeError.
func (s *Server) upstreamWriteError(r *http.Request, op, name string, err error) error {
	var stale *quota.VersionMismatchError
	var inUse *quota.UpstreamInUseError
	switch {
	case errors.As(err, &stale):
		return errorf(http.StatusPreconditionFailed, CodePreconditionFailed,
			"If-Match: upstream %q is at version %s, not %s", name, quota.UpstreamETag(stale.Current), quota.UpstreamETag(stale.Want))
	case errors.As(err, &inUse):
		var waiting int64
		for _, n := range inUse.Waiting {
			waiting += n
		}
		return errorf(http.StatusConflict, CodeUpstreamInUse,
			"upstream %q is in use: %d jobs wait on it, %d run under its concurrency; cancel them or let them finish, then delete it (GET /v1/upstreams/%s shows them)",
			name, waiting, inUse.Running, name)
	}
	return s.upstreamError(r, op, name, err)
}

// deleteUpstream is DELETE /v1/upstreams/{name} (admin keys): removes the
// upstream (its configuration, schedule, pause and concurrency leases).
// Optional If-Match as for PUT (412 when stale, 400 when malformed). 409
// upstream_in_use while jobs wait on it (queued in lanes naming it: the
// runtime's waiting_by_tenant) or run under its concurrency (its running);
// 404 for an unknown one; 204 when deleted. New jobs naming it are then
// refused (422 unknown_upstream) within UpstreamCache (a second) by every
// API process, at once by this one.
func (s *Server) deleteUpstream(r *http.Request, c *call) (int, any, error) {
	name, ifMatch, err := adminUpstreamWrite(r, c)
	if err != nil {
		return 0, nil, err
	}
	if err := s.opts.Store.DeleteUpstream(r.Context(), name, ifMatch); err != nil {
		return 0, nil, s.upstreamWriteError(r, "delete_upstream", name, err)
	}
	s.upstreams.Forget(name)
	return http.StatusNoContent, nil, nil
}

// listUpstreams is GET /v1/upstreams?cursor=&limit=: a page of upstreams
// by name (byte order) after the cursor, UpstreamsLimitDefault a page (at
// most MaxUpstreamsLimit); each upstream appears once along the cursors
// while nothing changes. Bad parameters: 400.
func (s *Server) listUpstreams(r *http.Request, _ *call) (int, any, error) {
	after, limit, err := parseUpstreamQuery(r)
	if err != nil {
		return 0, nil, err
	}
	names, err := s.opts.Store.UpstreamNames(r.Context(), after, limit+1)
	if err != nil {
		return 0, nil, s.storeError(r, "list_upstreams", err)
	}
	page := upstreamPage{Upstreams: []upstreamView{}}
	if len(names) > limit {
		names = names[:limit]
		cur := base64.RawURLEncoding.EncodeToString([]byte(names[limit-1]))
		page.Cursor = &cur
	}
	recs, err := s.opts.Store.Upstreams(r.Context(), names)
	if err != nil {
		return 0, nil, s.storeError(r, "list_upstreams", err)
	}
	for _, rec := range recs {
		page.Upstreams = append(page.Upstreams, upstreamViewOf(rec))
	}
	return http.StatusOK, page, nil
}

// parseUpstreamQuery reads GET /v1/upstreams' parameters: the name after
// which the page starts ("" = the first page) and the limit.
func parseUpstreamQuery(r *http.Request) (after string, limit int, err error) {
	q := r.URL.Query()
	limit = UpstreamsLimitDefault
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxUpstreamsLimit {
			return "", 0, errorf(http.StatusBadRequest, CodeMalformed, "limit: want 1 … %d, got %q", MaxUpstreamsLimit, l)
		}
		limit = n
	}
	if c := q.Get("cursor"); c != "" {
		raw, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil || upstream.ValidName(string(raw)) != nil {
			return "", 0, errorf(http.StatusBadRequest, CodeMalformed, "cursor: not one this listing returned")
		}
		after = string(raw)
	}
	return after, limit, nil
}

// MinUpstreamPause is the shortest `for` of POST /v1/upstreams/{name}/pause:
// a shorter pause would end before it took effect on the dispatchers, and
// the pause's end is compared with Redis's clock, which may be ahead of the
// throttler's by a few milliseconds.
const MinUpstreamPause = time.Second

// pauseUpstream is POST /v1/upstreams/{name}/pause (admin keys): no job
// naming the upstream leaves, for any tenant, for `for` (a Go duration of
// MinUpstreamPause … policy.MaxDuration) or, without a body, until resumed.
// A pause never shortens one in force. 200 with the upstream; 404; 422 for
// a bad `for`.
func (s *Server) pauseUpstream(r *http.Request, c *call) (int, any, error) {
	name, err := adminUpstream(r, c)
	if err != nil {
		return 0, nil, err
	}
	var req upstreamPauseRequest
	if err := decodeOptionalJSON(c.w, r, s.opts.MaxBodyBytes, &req); err != nil {
		return 0, nil, err
	}
	var until time.Time
	if req.For != nil {
		d, err := time.ParseDuration(*req.For)
		if err != nil || d < MinUpstreamPause || d > policy.MaxDuration {
			return 0, nil, errorf(http.StatusUnprocessableEntity, CodeInvalid,
				"for: want a duration (\"30s\") of %s … %s, got %q; omit the body to pause until resumed",
				policy.Duration(MinUpstreamPause), policy.Duration(policy.MaxDuration), *req.For)
		}
		until = time.Now().Add(d)
	}
	err = s.opts.Store.PauseUpstream(r.Context(), name, until, quota.PauseManual)
	if errors.Is(err, quota.ErrInvalid) { // until not after Redis's clock: this host's clock is behind
		return 0, nil, errorf(http.StatusUnprocessableEntity, CodeInvalid,
			"for: %q ends before now by Redis's clock (this throttler's clock is behind it); give a longer pause", *req.For)
	}
	if err != nil {
		return 0, nil, s.upstreamError(r, "pause_upstream", name, err)
	}
	return s.upstreamResponse(r, c, http.StatusOK, name)
}

// resumeUpstream is POST /v1/upstreams/{name}/resume (admin keys): ends
// the upstream's pause, manual or throttled. 200 with the upstream; 404.
func (s *Server) resumeUpstream(r *http.Request, c *call) (int, any, error) {
	name, err := adminUpstream(r, c)
	if err != nil {
		return 0, nil, err
	}
	if err := s.opts.Store.ResumeUpstream(r.Context(), name); err != nil {
		return 0, nil, s.upstreamError(r, "resume_upstream", name, err)
	}
	return s.upstreamResponse(r, c, http.StatusOK, name)
}
