package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"
)

// standIn is a stand-in API on loopback that enforces one fixed-window
// quota and reports it on every answer, in one of three header shapes,
// answering 429 (with the same headers) past it. A request costs 1, or
// for a tokens quota the "tokens" of the webhook's data.
type standIn struct {
	srv     *httptest.Server
	shape   string // "x-ratelimit" | "openai-tokens" | "github"
	limit   int64  // per window
	window  time.Duration
	latency time.Duration

	mu      sync.Mutex
	start   time.Time // the current window's start
	used    int64
	arrived []arrival
}

// arrival is one request the upstream answered.
type arrival struct {
	at    time.Time
	units int64
	ok    bool
}

// newUpstream starts an upstream whose first window starts at start with
// used of its quota already used.
func newUpstream(shape string, limit int64, window, latency time.Duration, start time.Time, used int64) *standIn {
	u := &standIn{shape: shape, limit: limit, window: window, latency: latency, start: start, used: used}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	return u
}

func (u *standIn) serve(w http.ResponseWriter, r *http.Request) {
	units := int64(1)
	if u.shape == "openai-tokens" {
		var body struct {
			Data struct {
				Tokens int64 `json:"tokens"`
			} `json:"data"`
		}
		raw, _ := io.ReadAll(r.Body)
		if json.Unmarshal(raw, &body) == nil && body.Data.Tokens > 0 {
			units = body.Data.Tokens
		}
	}
	now := time.Now()
	u.mu.Lock()
	for !now.Before(u.start.Add(u.window)) {
		u.start, u.used = u.start.Add(u.window), 0
	}
	ok := u.used+units <= u.limit
	if ok {
		u.used += units
	}
	remaining, reset := u.limit-u.used, u.start.Add(u.window)
	u.arrived = append(u.arrived, arrival{at: now, units: units, ok: ok})
	u.mu.Unlock()
	h := w.Header()
	switch u.shape {
	case "x-ratelimit":
		h.Set("X-RateLimit-Limit", strconv.FormatInt(u.limit, 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(remaining, 10))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10)) // windows are whole seconds
	case "github":
		h.Set("X-RateLimit-Limit", strconv.FormatInt(u.limit, 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(remaining, 10))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
		h.Set("X-RateLimit-Resource", "core")
	case "openai-tokens":
		h.Set("X-Ratelimit-Limit-Tokens", strconv.FormatInt(u.limit, 10))
		h.Set("X-Ratelimit-Remaining-Tokens", strconv.FormatInt(remaining, 10))
		h.Set("X-Ratelimit-Reset-Tokens", fmt.Sprintf("%dms", reset.Sub(now).Milliseconds()+1))
		h.Set("X-Tokens-Used", strconv.FormatInt(units, 10))
	}
	select {
	case <-time.After(u.latency):
	case <-r.Context().Done():
	}
	if ok {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusTooManyRequests)
	}
}

// snapshot returns the answered requests so far.
func (u *standIn) snapshot() []arrival {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]arrival(nil), u.arrived...)
}
