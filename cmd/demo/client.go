package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/bucket"
)

// apiClient calls the throttler's HTTP API (docs/design.md §6) with one API key.
type apiClient struct {
	base string // "http://127.0.0.1:8080", no trailing slash
	key  string
	hc   *http.Client
}

// apiError is a non-2xx answer of the API.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Code, e.Message)
}

// do sends in (when not nil) as JSON and decodes a 2xx answer into out
// (when not nil); any other status is an *apiError.
func (c *apiClient) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: encode body: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(raw, &e) // a body that is not an API error leaves the fields empty
		return fmt.Errorf("%s %s: %w", method, path, &apiError{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message})
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

// waitReady polls GET /readyz every 100 ms until it answers 200, ctx ends
// or within has passed.
func (c *apiClient) waitReady(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/readyz", nil)
		if err != nil {
			return fmt.Errorf("wait for the throttler: %w", err)
		}
		resp, err := c.hc.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /readyz: HTTP %d", resp.StatusCode)
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the throttler at %s: %w (last: %w)", c.base, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// webhookJob is the body of one webhook job (docs/design.md §6).
type webhookJob struct {
	Type    string  `json:"type"` // "webhook"
	URL     string  `json:"url"`
	Event   string  `json:"event"`
	Payload payload `json:"payload"`
}

// batchItemResult is one item of a batch answer.
type batchItemResult struct {
	Status int `json:"status"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// errRefused reports batch items the API did not accept.
var errRefused = errors.New("jobs refused")

// enqueue sends jobs to tenant with POST /v1/tenants/{tenant}/jobs:batch,
// at most maxBatch per request. It fails when any item is refused.
func (c *apiClient) enqueue(ctx context.Context, tenant string, jobs []webhookJob) error {
	const maxBatch = 1000
	for len(jobs) > 0 {
		n := min(len(jobs), maxBatch)
		var out struct {
			Results []batchItemResult `json:"results"`
		}
		path := "/v1/tenants/" + url.PathEscape(tenant) + "/jobs:batch"
		if err := c.do(ctx, http.MethodPost, path, map[string]any{"jobs": jobs[:n]}, &out); err != nil {
			return fmt.Errorf("enqueue jobs for tenant %q: %w", tenant, err)
		}
		for _, r := range out.Results {
			if r.Status != http.StatusAccepted {
				msg := ""
				if r.Error != nil {
					msg = r.Error.Code + ": " + r.Error.Message
				}
				return fmt.Errorf("enqueue jobs for tenant %q: %w: HTTP %d %s", tenant, errRefused, r.Status, msg)
			}
		}
		jobs = jobs[n:]
	}
	return nil
}

// tenantState is the part of GET /v1/tenants/{tenant} the demo shows.
type tenantState struct {
	Policy struct {
		Rate        apiRate `json:"rate"`
		Burst       int64   `json:"burst"`
		Concurrency int64   `json:"concurrency"`
	} `json:"policy"`
	Backlog     int64   `json:"backlog"`
	Running     int64   `json:"running"`
	PausedUntil *string `json:"paused_until"`
	AdminPaused bool    `json:"admin_paused"`
	Disabled    bool    `json:"disabled"`
	DeadLetters int64   `json:"dead_letters"`
}

// limit is the tenant's delivery limit.
func (s tenantState) limit() limit {
	return limit{Rate: s.Policy.Rate.PerSecond, Burst: max(s.Policy.Burst, 1)}
}

// tenant returns GET /v1/tenants/{tenant}.
func (c *apiClient) tenant(ctx context.Context, tenant string) (tenantState, error) {
	var s tenantState
	if err := c.do(ctx, http.MethodGet, "/v1/tenants/"+url.PathEscape(tenant), nil, &s); err != nil {
		return tenantState{}, fmt.Errorf("state of tenant %q: %w", tenant, err)
	}
	return s, nil
}

// apiRate is a rate as the API shows it: "50/s" (also N/m, N/h), or a
// number of tokens per second when no such text is exact.
type apiRate struct {
	Text      string  // as shown: "50/s", or the number formatted
	PerSecond float64 // > 0 for a valid rate
}

// UnmarshalJSON implements json.Unmarshaler.
func (r *apiRate) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		rate, err := bucket.ParseRate(s)
		if err != nil {
			return err
		}
		*r = apiRate{Text: rate.String(), PerSecond: rate.PerSecond()}
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("rate: want \"N/s\" or a number, got %s", b)
	}
	*r = apiRate{Text: fmt.Sprintf("%.3g/s", f), PerSecond: f}
	return nil
}

// Claim outcomes of the worker (sluice_worker_claims_total) that forfeit a
// job's slot: a claim at the tenant's concurrency cap (or while it is
// paused) is returned unsent. (A late claim forfeits nothing: it goes out
// when the tenant's send schedule allows.)
var forfeitingOutcomes = []string{"returned"}

// forfeitedSlots reads the worker's /metrics at url and returns the sum of
// sluice_worker_claims_total over forfeitingOutcomes.
func forfeitedSlots(ctx context.Context, hc *http.Client, url string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, fmt.Errorf("worker metrics: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("worker metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("worker metrics: GET %s: HTTP %d", url, resp.StatusCode)
	}
	text, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, fmt.Errorf("worker metrics: %w", err)
	}
	var sum int64
	for line := range strings.Lines(string(text)) {
		for _, o := range forfeitingOutcomes {
			v, ok := strings.CutPrefix(line, `sluice_worker_claims_total{outcome="`+o+`"} `)
			if !ok {
				continue
			}
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, fmt.Errorf("worker metrics: %q: %w", line, err)
			}
			sum += int64(f)
		}
	}
	return sum, nil
}
