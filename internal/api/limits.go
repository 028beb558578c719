package api

import (
	"errors"
	"net/http"

	"github.com/sluicehq/sluice/internal/bucket"
)

// MaxCheckKeyLen bounds the key of a check, in bytes.
const MaxCheckKeyLen = 256

// checkRequest is the body of POST /v1/limits/{name}/check.
type checkRequest struct {
	Key  string `json:"key"`
	Cost *int64 `json:"cost"`
}

// checkResponse is its answer, on 200 and on 429.
type checkResponse struct {
	Allowed      bool         `json:"allowed"`
	Limit        int64        `json:"limit"`
	Remaining    int64        `json:"remaining"`
	RetryAfterMS int64        `json:"retry_after_ms"`
	ResetAfterMS int64        `json:"reset_after_ms"`
	Error        *errorDetail `json:"error,omitempty"`
}

// check is rate limiting as a service: one decision of the named limit for a
// caller-chosen key.
func (s *Server) check(r *http.Request, c *call) (int, any, error) {
	name := r.PathValue("name")
	if name == ReservedLimit {
		return 0, nil, errorf(http.StatusForbidden, CodeForbidden, "limit %q is the API's own limiter and cannot be checked", name)
	}
	lim, ok := s.rt().Limits[name]
	if !ok {
		return 0, nil, errorf(http.StatusNotFound, CodeNotFound, "no limit named %q", name)
	}
	if !c.key.AllowsLimit(name) {
		return 0, nil, errorf(http.StatusForbidden, CodeForbidden, "API key %q may not check limit %q", c.key.Name, name)
	}
	var req checkRequest
	if err := decodeJSON(c.w, r, s.opts.MaxBodyBytes, &req); err != nil {
		return 0, nil, err
	}
	if err := validateCheck(req, lim.Limit); err != nil {
		return 0, nil, err
	}
	d, err := lim.Limiter.Allow(r.Context(), checkKey(lim, c.key.Name, req.Key), *req.Cost)
	if err != nil {
		return 0, nil, s.limiterError(name, err)
	}
	s.metrics.Decisions.WithLabelValues(name, outcome(d.Allowed)).Inc()
	c.applied = append(c.applied, bucket.Applied{Name: name, Limit: lim.Limit, Decision: d})
	resp := checkResponse{
		Allowed:      d.Allowed,
		Limit:        d.Limit,
		Remaining:    d.Remaining,
		RetryAfterMS: d.RetryAfter.Milliseconds(),
		ResetAfterMS: d.ResetAfter.Milliseconds(),
	}
	if !d.Allowed {
		resp.Error = &errorDetail{Code: CodeRateLimited, Message: "limit " + name + " exceeded for this key"}
		return http.StatusTooManyRequests, resp, nil
	}
	return http.StatusOK, resp, nil
}

// checkKey is the limiter key of a check of key by the API key named
// apiKey: key itself when the limit is shared, else "<apiKey>:<key>" (the
// name, never the secret; names hold no ':', so two API keys never meet).
func checkKey(l Limit, apiKey, key string) string {
	if l.Shared {
		return key
	}
	return apiKey + ":" + key
}

func validateCheck(req checkRequest, l bucket.Limit) error {
	switch {
	case req.Key == "":
		return errorf(http.StatusUnprocessableEntity, CodeInvalid, "key: required, 1 to %d bytes", MaxCheckKeyLen)
	case len(req.Key) > MaxCheckKeyLen:
		return errorf(http.StatusUnprocessableEntity, CodeInvalid, "key: %d bytes, at most %d", len(req.Key), MaxCheckKeyLen)
	case req.Cost == nil:
		return errorf(http.StatusUnprocessableEntity, CodeInvalid, "cost: required, a positive integer")
	case *req.Cost < 1:
		return errorf(http.StatusUnprocessableEntity, CodeInvalid, "cost: must be at least 1, got %d", *req.Cost)
	case *req.Cost > l.Capacity():
		return errorf(http.StatusUnprocessableEntity, CodeInvalid, "cost: %d exceeds the limit's capacity %d and could never be admitted", *req.Cost, l.Capacity())
	}
	return nil
}

// limiterError maps a limiter failure: bad input the validation missed is a
// 422; anything else is Redis being unavailable.
func (s *Server) limiterError(name string, err error) error {
	switch {
	case errors.Is(err, bucket.ErrCostExceedsCapacity), errors.Is(err, bucket.ErrInvalidCost), errors.Is(err, bucket.ErrInvalidKey):
		return errorf(http.StatusUnprocessableEntity, CodeInvalid, "%s", err.Error())
	}
	s.metrics.RedisErrors.WithLabelValues("check").Inc()
	s.opts.Logger.Warn("limit check failed", "limit", name, "err", err)
	return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "rate limiter unavailable", RetryAfter: 1}
}
