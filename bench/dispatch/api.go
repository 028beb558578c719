package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/store"
)

// batchReply is the part of a batch answer this program reads (docs/design.md §6).
type batchReply struct {
	Results []struct {
		Status int    `json:"status"`
		ID     string `json:"id"`
		Error  *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	} `json:"results"`
}

// enqueueHTTP enqueues jobs for tenant through POST
// /v1/tenants/{tenant}/jobs:batch, in batches of at most 1000, and returns
// the job ids in order. Any refused item is an error.
func (sl *sluice) enqueueHTTP(ctx context.Context, tenant string, jobs [][]byte) ([]string, error) {
	var ids []string
	for start := 0; start < len(jobs); start += store.MaxBatch {
		part := jobs[start:min(start+store.MaxBatch, len(jobs))]
		body := append([]byte(`{"jobs":[`), bytes.Join(part, []byte(","))...)
		body = append(body, "]}"...)
		status, reply, err := sl.call(ctx, http.MethodPost, "/v1/tenants/"+tenant+"/jobs:batch", body)
		if err != nil {
			return ids, err
		}
		if status != http.StatusAccepted {
			return ids, fmt.Errorf("enqueue batch for %s: %d %s", tenant, status, snippet(reply))
		}
		var br batchReply
		if err := json.Unmarshal(reply, &br); err != nil {
			return ids, fmt.Errorf("enqueue batch for %s: %w", tenant, err)
		}
		for _, r := range br.Results {
			if r.Status != http.StatusAccepted || r.ID == "" {
				return ids, fmt.Errorf("enqueue batch for %s: item refused: %d %+v", tenant, r.Status, r.Error)
			}
			ids = append(ids, r.ID)
		}
	}
	return ids, nil
}

// enqueueStore enqueues perTenant copies of items[0] for each tenant through
// the dispatch Store (the enqueue script the API runs), workers at once.
func (e *env) enqueueStore(ctx context.Context, tenants []string, items []store.Item, workers int) error {
	return parallel(ctx, len(tenants), workers, func(i int) error {
		_, err := e.enqueueTenant(ctx, tenants[i], items)
		return err
	})
}

// parallel runs f(0), …, f(n−1) on workers goroutines. A goroutine stops
// at its first error, every one at ctx's end; the first error (or ctx's)
// is returned.
func parallel(ctx context.Context, n, workers int, f func(i int) error) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range workers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n) && ctx.Err() == nil; i = next.Add(1) - 1 {
				if err := f(int(i)); err != nil {
					mu.Lock()
					first = cmpErr(first, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return cmpErr(first, ctx.Err())
}

// enqueueTenant enqueues items for tenant through Store.Enqueue and
// returns the jobs' ids; a refused item is an error.
func (e *env) enqueueTenant(ctx context.Context, tenant string, items []store.Item) ([]string, error) {
	ids := make([]string, 0, len(items))
	for start := 0; start < len(items); start += store.MaxBatch {
		res, err := e.st.Enqueue(ctx, tenant, items[start:min(start+store.MaxBatch, len(items))])
		if err != nil {
			return ids, err
		}
		for _, r := range res {
			if r.Outcome != store.Accepted {
				return ids, fmt.Errorf("enqueue for %s: refused: %s %s", tenant, r.Code, r.Detail)
			}
			ids = append(ids, r.ID)
		}
	}
	return ids, nil
}

// oneJob sends one webhook job of tenant to the receiver's run through the
// API and waits up to within for it to arrive; it returns the run's
// recording.
func oneJob(ctx context.Context, e *env, sl *sluice, tenant, run string, within time.Duration) (*recording, error) {
	rec := e.rcv.start(run)
	ids, err := sl.enqueueHTTP(ctx, tenant, [][]byte{e.webhookJob(run, 0)})
	if err != nil {
		return nil, err
	}
	if !rec.waitDistinct(ctx, 1, time.Now().Add(within)) {
		return nil, fmt.Errorf("the first job %s did not arrive (%w); diagnosis:\n%s",
			ids[0], errTimeout, sl.diagnose(ctx, []string{tenant}, ids))
	}
	return rec, nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// call sends one API request with the bench key.
func (sl *sluice) call(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, sl.api+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := sl.e.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(resp.Body)
	return resp.StatusCode, reply, err
}

// diagnose describes why a run fell short: GET /v1/tenants/{t} for each
// tenant, GET /v1/jobs/{id} of a few jobs that never arrived, and the warning
// and error lines of both logs.
func (sl *sluice) diagnose(ctx context.Context, tenants []string, missing []string) string {
	var b strings.Builder
	for _, t := range tenants {
		status, reply, err := sl.call(ctx, http.MethodGet, "/v1/tenants/"+t, nil)
		fmt.Fprintf(&b, "  GET /v1/tenants/%s → %d %s %v\n", t, status, snippet(reply), errOrEmpty(err))
	}
	for _, id := range missing[:min(3, len(missing))] {
		status, reply, err := sl.call(ctx, http.MethodGet, "/v1/jobs/"+id, nil)
		fmt.Fprintf(&b, "  GET /v1/jobs/%s → %d %s %v\n", id, status, snippet(reply), errOrEmpty(err))
	}
	b.WriteString(sl.problems(10))
	counters := []string{"sluice_dispatch_released_total", "sluice_dispatch_passes_total", "sluice_dispatch_pass_seconds_sum",
		"sluice_dispatch_swept_total", "sluice_dispatch_enqueue_errors_total", "sluice_dispatch_pass_errors_total",
		"sluice_worker_claims_total", "sluice_worker_attempts_total", "sluice_worker_waiting", "sluice_worker_finish_errors_total"}
	for _, base := range []string{sl.api, sl.metrics} {
		if base != "" {
			for _, l := range sl.scrape(ctx, base+"/metrics", counters) {
				fmt.Fprintf(&b, "  %s\n", l)
			}
		}
	}
	b.WriteString(sl.e.redisSummary(ctx, sl.rs0, sl.started))
	return b.String()
}

// scrape returns the lines of a Prometheus text page that start with one of
// names.
func (sl *sluice) scrape(ctx context.Context, url string, names []string) []string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return []string{err.Error()}
	}
	resp, err := sl.e.http.Do(req)
	if err != nil {
		return []string{err.Error()}
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	var out []string
	for _, l := range strings.Split(string(page), "\n") {
		for _, n := range names {
			if strings.HasPrefix(l, n) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func snippet(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 600 {
		return string(b[:600]) + "…"
	}
	return string(b)
}

// missingIDs are the ids that rec has not seen.
func missingIDs(rec *recording, ids []string) []string {
	seen := map[string]bool{}
	for _, a := range rec.snapshot() {
		seen[a.id] = true
	}
	var out []string
	for _, id := range ids {
		if !seen[id] {
			out = append(out, id)
		}
	}
	return out
}
