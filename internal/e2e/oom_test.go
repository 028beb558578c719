package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// Sizes of TestRedisMemoryFull.
const (
	oomJobs    = 1500     // webhooks enqueued
	oomPayload = 16 << 10 // bytes of each one's payload
	oomFill    = 12 << 20 // bytes of jobs that fit under the high-water mark
	oomRate    = 200.0    // the tenant's rate, jobs/s
	oomHW      = 0.9      // redis.memory_high_water (the default)
	oomWithin  = time.Minute
)

// TestRedisMemoryFull (issue #18): producers enqueue into a Redis whose
// maxmemory (noeviction) holds oomFill bytes of jobs under the high-water
// mark, faster than the tenant's rate (it is paused until the first 507,
// then resumed). Enqueue must answer 507 storage_full with Retry-After once
// the backlog reaches the mark, while delivery goes on (no gap of a second
// between arrivals after the resume) and frees memory
// (a delivered job's body is dropped), so enqueue accepts again by itself:
// every job is accepted in the end, with maxmemory untouched, and
// delivered exactly once; Redis never reaches its own limit.
//
// Before the high-water mark (and with it off) Redis's own limit refused
// the hand-off to asynq, asynq's dequeue, the workers' heartbeats, claims
// and finishes as well as enqueues: delivery stopped and nothing freed
// memory, so the deployment stayed refused until an operator acted.
func TestRedisMemoryFull(t *testing.T) {
	t.Parallel()
	red := redistest.NewPrivate(t)
	rdb := red.Client(t)
	const tenant = "m1"
	c := newCluster(t, options{redisURL: red.URL(), client: rdb, tenants: map[string]string{
		tenant: fmt.Sprintf("{rate: %.0f/s, burst: 1, concurrency: 50, admit: {rate: 100000/s, burst: 100000}}", oomRate)}})
	th := c.startThrottler()
	c.startWorker()
	first := c.enqueue(th, tenant, 1) // asynq's and Sluice's keys exist from here on
	c.recv.waitDistinct(t, first, 30*time.Second)

	base := redistest.UsedMemory(t, rdb)
	maxmemory := int64(float64(base+oomFill) / oomHW)
	if err := rdb.ConfigSet(context.Background(), "maxmemory", strconv.FormatInt(maxmemory, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	// The throttler's memory guard read INFO memory at the first enqueue,
	// before maxmemory was set, and trusts a reading for a second
	// (api.memoryReadEvery): until its next one it sees no limit and admits
	// everything — at ~800 enqueues/s the whole fill. Wait the reading out,
	// so the producers meet the guard as a deployment with maxmemory does.
	time.Sleep(1100 * time.Millisecond)
	mon := watchMemory(t, rdb)
	// The tenant is paused until the first 507, so the backlog reaches the
	// mark however slowly the producers go on a busy machine (at 4 at a
	// time they may not outpace the rate by much); delivery then resumes
	// while enqueue is still refused.
	if st := c.call(th, http.MethodPost, "/v1/tenants/"+tenant+"/pause", nil, nil); st != http.StatusOK {
		t.Fatalf("pause: %d", st)
	}
	p := &oomProducers{c: c, th: th, tenant: tenant, ids: map[int]string{}, full: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.run(t, oomJobs, oomWithin)
	}()
	select {
	case <-p.full:
	case <-done:
	}
	resumed := time.Now()
	if st := c.call(th, http.MethodPost, "/v1/tenants/"+tenant+"/resume", nil, nil); st != http.StatusOK {
		t.Fatalf("resume: %d", st)
	}
	<-done
	mon.stop()

	ids := p.accepted()
	if len(ids) != oomJobs {
		t.Fatalf("%d of %d jobs accepted in %s (maxmemory %d B, used %d B at the end): enqueue did not recover by itself",
			len(ids), oomJobs, oomWithin, maxmemory, redistest.UsedMemory(t, rdb))
	}
	c.recv.waitDistinct(t, ids, oomWithin)
	got := c.recv.arrivals(tenant)
	exactlyOnce(t, got, append(first, ids...))
	end := redistest.UsedMemory(t, rdb)

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fulls == 0 {
		t.Fatalf("no 507 in %d enqueues of %d B payloads with maxmemory %d B (peak used %d B): the test filled nothing",
			oomJobs, oomPayload, maxmemory, mon.peak)
	}
	for _, b := range p.bad {
		t.Errorf("enqueue answer breaks the contract: %s", b)
	}
	during, gap := deliveryWhileFull(got, p.firstFull, p.lastFull, resumed)
	t.Logf("maxmemory %d B (base %d B); %d × 507 over %s, the first after %d accepted; %d delivered from the first 507 to the last; "+
		"longest gap between arrivals %s; used_memory peak %d B, at the end %d B",
		maxmemory, base, p.fulls, p.lastFull.Sub(p.firstFull).Round(time.Millisecond), p.acceptedBeforeFull, during,
		gap.Round(time.Millisecond), mon.peak, end)
	if during == 0 {
		t.Errorf("nothing delivered from the first 507 to the last (%s): delivery must go on while enqueue is refused",
			p.lastFull.Sub(p.firstFull).Round(time.Millisecond))
	}
	if gap > time.Second {
		t.Errorf("delivery stalled: %s between two arrivals of a tenant at %.0f/s", gap.Round(time.Millisecond), oomRate)
	}
	if mon.peak >= maxmemory {
		t.Errorf("used_memory reached %d B, maxmemory %d B: the high-water mark (%.2f) let Redis's own limit be hit", mon.peak, maxmemory, oomHW)
	}
	if grown := end - base; grown > (mon.peak-base)/2 {
		t.Errorf("used_memory %d B over the base with every job delivered, peak %d B over it: delivery did not free the bodies",
			grown, mon.peak-base)
	}
}

// deliveryWhileFull counts the arrivals in [from, to] and finds the longest
// gap between two consecutive arrivals after resumed (the tenant was paused
// before).
func deliveryWhileFull(got []arrival, from, to, resumed time.Time) (during int, gap time.Duration) {
	for i, a := range got {
		if !a.at.Before(from) && !a.at.After(to) {
			during++
		}
		if i > 0 && !got[i-1].at.Before(resumed) {
			gap = max(gap, a.at.Sub(got[i-1].at))
		}
	}
	return during, gap
}

// memoryWatch samples used_memory every 20 ms and keeps the peak.
type memoryWatch struct {
	peak int64
	done chan struct{}
	wg   sync.WaitGroup
}

func watchMemory(t *testing.T, rdb redis.UniversalClient) *memoryWatch {
	w := &memoryWatch{done: make(chan struct{})}
	w.wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			info, err := rdb.Info(ctx, "memory").Result()
			cancel()
			if err != nil {
				continue
			}
			for line := range strings.Lines(info) {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
					if n, err := strconv.ParseInt(v, 10, 64); err == nil {
						w.peak = max(w.peak, n)
					}
				}
			}
		}
	})
	t.Cleanup(w.stop)
	return w
}

// stop ends the sampling; peak is final afterwards. Idempotent.
func (w *memoryWatch) stop() {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	w.wg.Wait()
}

// oomProducers enqueue jobs 0…n-1 of oomPayload bytes, four at a time, each
// under its Idempotency-Key until a 202, waiting min(Retry-After, 100 ms)
// after a 507 or 503, and check every answer.
type oomProducers struct {
	c      *cluster
	th     *proc
	tenant string

	mu                 sync.Mutex
	ids                map[int]string // job index → id, once accepted
	fulls              int            // 507 storage_full answers
	firstFull          time.Time
	lastFull           time.Time
	acceptedBeforeFull int
	full               chan struct{} // closed at the first 507
	bad                []string
}

// run enqueues n jobs, returning when all are accepted or within passed.
func (p *oomProducers) run(t *testing.T, n int, within time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	next := make(chan int)
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	for range 4 {
		wg.Go(func() {
			for i := range next {
				p.produce(ctx, client, i)
			}
		})
	}
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
}

func (p *oomProducers) produce(ctx context.Context, client *http.Client, i int) {
	job := p.c.webhookJob(p.tenant, i)
	job["payload"] = map[string]any{"i": i, "pad": strings.Repeat("x", oomPayload)}
	body, _ := json.Marshal(job)
	for ctx.Err() == nil {
		wait, ok := p.try(ctx, client, i, body)
		if ok {
			return
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
}

// try sends job i once: it reports whether it was accepted, else how long
// to wait.
func (p *oomProducers) try(ctx context.Context, client *http.Client, i int, body []byte) (time.Duration, bool) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.th.url()+"/v1/tenants/"+p.tenant+"/jobs", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", fmt.Sprint("oom-", i))
	resp, err := client.Do(req)
	if err != nil {
		return 100 * time.Millisecond, false
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out struct {
		ID    string                         `json:"id"`
		Error struct{ Code, Message string } `json:"error"`
	}
	jsonErr := json.Unmarshal(raw, &out)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch resp.StatusCode {
	case http.StatusAccepted:
		p.ids[i] = out.ID
		return 0, true
	case http.StatusInsufficientStorage, http.StatusServiceUnavailable:
		ra, raErr := strconv.Atoi(resp.Header.Get("Retry-After"))
		if jsonErr != nil || out.Error.Message == "" || raErr != nil || ra < 1 ||
			(resp.StatusCode == http.StatusInsufficientStorage) != (out.Error.Code == "storage_full") {
			p.bad = append(p.bad, fmt.Sprintf("job %d: %d Retry-After %q %s", i, resp.StatusCode, resp.Header.Get("Retry-After"), raw))
		}
		if resp.StatusCode == http.StatusInsufficientStorage {
			p.fulls++
			p.lastFull = time.Now()
			if p.firstFull.IsZero() {
				p.firstFull, p.acceptedBeforeFull = time.Now(), len(p.ids)
				close(p.full)
			}
		}
		return min(time.Duration(max(ra, 1))*time.Second, 100*time.Millisecond), false
	default:
		p.bad = append(p.bad, fmt.Sprintf("job %d: %d %s", i, resp.StatusCode, raw))
		return time.Second, false
	}
}

// accepted is the accepted jobs' ids in index order.
func (p *oomProducers) accepted() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]string, 0, len(p.ids))
	for _, i := range slices.Sorted(maps.Keys(p.ids)) {
		ids = append(ids, p.ids[i])
	}
	return ids
}
