package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// emit sends 0, 1, 2, … on out at rate per second from now until ctx ends
// (in steps of 5 ms, so a step may carry several), then closes out. When
// the consumers fall behind, it blocks: the achieved rate is what they took.
func emit(ctx context.Context, rate float64, out chan<- int) {
	defer close(out)
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	next := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		due := int(time.Since(start).Seconds() * rate)
		for ; next < due; next++ {
			select {
			case out <- next:
			case <-ctx.Done():
				return
			}
		}
	}
}

// consume runs f on workers goroutines for every value from in, until in
// is closed, and waits for them.
func consume(workers int, in <-chan int, f func(i int)) {
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range in {
				f(i)
			}
		})
	}
	wg.Wait()
}

// loadClient is a keep-alive HTTP client with room for many concurrent
// producers to one host.
func loadClient(conns int) *http.Client {
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute, DisableCompression: true}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// answer is one API response: status, headers, body.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// request sends one API request with the bench key through c (a JSON body
// when body is not nil).
func (sl *sluice) request(ctx context.Context, c *http.Client, method, path string, body []byte, header map[string]string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, method, sl.api+path, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}, err
}

// metricValues reads the named series (go_goroutines, or with its labels:
// sluice_worker_claims_total{outcome="stale"}) of a Prometheus text page; a
// missing one is absent from the map.
func (sl *sluice) metricValues(ctx context.Context, url string, names ...string) map[string]float64 {
	out := map[string]float64{}
	for _, l := range sl.scrape(ctx, url, names) {
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		if f, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
			out[l[:i]] = f
		}
	}
	return out
}

// usedMemory is Redis's INFO memory used_memory, bytes (0 when unread).
func (e *env) usedMemory(ctx context.Context) int64 { return e.infoMemory(ctx, "used_memory") }

// loadAverage is /proc/loadavg's first three fields ("-" elsewhere).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "-"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "-"
	}
	return strings.Join(f[:3], " ")
}

// mb formats bytes as MB (10^6).
func mb(b float64) string { return strconv.FormatFloat(b/1e6, 'f', 1, 64) + " MB" }
