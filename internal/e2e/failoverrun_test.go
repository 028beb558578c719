package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// ack is one acknowledged (202) enqueue of a failover run.
type ack struct {
	id, tenant string
	at         time.Time
}

// ackLog is what the enqueuers of a failover run saw; safe for concurrent
// use.
type ackLog struct {
	mu      sync.Mutex
	acks    []ack
	missed  int // jobs never acknowledged (given up, or not tried after)
	replTmo int // 503 replication_timeout answers
}

func (l *ackLog) add(a ack) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acks = append(l.acks, a)
}

func (l *ackLog) acked() []ack {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]ack(nil), l.acks...)
}

func (l *ackLog) notAcked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.missed
}

func (l *ackLog) replTimeouts() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.replTmo
}

// enqueueAll enqueues failoverJobs webhooks over failoverTenants through
// p, one request per job with its own Idempotency-Key, each tenant at
// failoverEnqueue requests per second. A job's request is retried every
// 100ms until it is answered 202; a tenant whose job is not acknowledged
// within failoverGiveUp stops (its remaining jobs count as not
// acknowledged).
func (c *cluster) enqueueAll(p *proc, log *ackLog) {
	var wg sync.WaitGroup
	for k, tenant := range failoverTenants {
		n := failoverJobs / len(failoverTenants)
		if k < failoverJobs%len(failoverTenants) {
			n++
		}
		wg.Go(func() {
			pace := time.NewTicker(time.Second / failoverEnqueue)
			defer pace.Stop()
			for i := range n {
				<-pace.C
				if !c.enqueueRetrying(p, tenant, i, log) {
					log.mu.Lock()
					log.missed += n - i
					log.mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
}

// enqueueRetrying posts job i of tenant until it is acknowledged (true)
// or failoverGiveUp has passed (false).
func (c *cluster) enqueueRetrying(p *proc, tenant string, i int, log *ackLog) bool {
	body, err := json.Marshal(c.webhookJob(tenant, i))
	if err != nil {
		panic(err)
	}
	key := fmt.Sprintf("%s-%d", tenant, i)
	giveUp := time.Now().Add(failoverGiveUp)
	retry := time.NewTicker(100 * time.Millisecond)
	defer retry.Stop()
	for {
		id, code := c.postJob(p, tenant, key, body)
		if id != "" {
			log.add(ack{id: id, tenant: tenant, at: time.Now()})
			return true
		}
		if code == "replication_timeout" {
			log.mu.Lock()
			log.replTmo++
			log.mu.Unlock()
		}
		if time.Now().After(giveUp) {
			return false
		}
		<-retry.C
	}
}

// postJob posts one job under key; it returns the id of a 202, else the
// error code (or the transport error) of the answer.
func (c *cluster) postJob(p *proc, tenant, key string, body []byte) (id, code string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url()+"/v1/tenants/"+tenant+"/jobs", bytes.NewReader(body))
	if err != nil {
		return "", err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+adminKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.http.Do(req)
	if err != nil {
		return "", err.Error()
	}
	defer resp.Body.Close()
	var out struct {
		ID    string `json:"id"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", fmt.Sprintf("%d: %v", resp.StatusCode, err)
	}
	if resp.StatusCode == http.StatusAccepted && out.ID != "" {
		return out.ID, ""
	}
	return "", out.Error.Code
}

// failoverFindings is what checkFailover measured.
type failoverFindings struct {
	lost   []string // acknowledged, gone from Redis, never delivered
	window int      // acknowledged in the lossWindow before the kill
	dups   int      // jobs that arrived more than once
}

// checkFailover finds the acknowledged jobs the failover lost (no record
// on the new master, never delivered), waits for every other one to
// arrive, and checks that only attempts begun before readyAt (in flight
// during the outage) arrived twice, and nothing foreign arrived.
func (c *cluster) checkFailover(p *proc, log *ackLog, killedAt, readyAt time.Time) failoverFindings {
	c.t.Helper()
	var f failoverFindings
	arrived := count(c.recv.arrivals(""))
	var want []string
	for _, a := range log.acked() {
		if !a.at.After(killedAt) && a.at.After(killedAt.Add(-lossWindow)) {
			f.window++
		}
		if arrived[a.id] == 0 && a.at.Before(readyAt) && c.call(p, http.MethodGet, "/v1/jobs/"+a.id, nil, nil) == http.StatusNotFound {
			f.lost = append(f.lost, a.id)
			continue
		}
		want = append(want, a.id)
	}
	c.recv.waitDistinct(c.t, want, 60*time.Second)
	first := map[string]time.Time{}
	for _, a := range c.recv.arrivals("") {
		if _, ok := first[a.id]; !ok {
			first[a.id] = a.at
		}
	}
	for id, k := range count(c.recv.arrivals("")) {
		if k > 1 {
			f.dups++
			if first[id].After(readyAt) {
				c.t.Errorf("job %s arrived %d times, its first attempt after Sluice was ready again", id, k)
			}
		}
	}
	return f
}
