// The noisy part's requests: the quiet tenants' jobs, the noisy tenant's
// hammering and the checks of its 429s, the retry after Retry-After.

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// seedTenants enqueues one job for each tenant through POST …/jobs from
// the quiet producers, so that every tenant exists and has used the API
// before the measurement, and waits until those jobs were delivered.
func (sl *sluice) seedTenants(ctx context.Context, c *http.Client, name string, tenants []string) error {
	run := name + "-seed"
	rec := sl.e.rcv.startCounting(run)
	n := &quietCounts{tenants: map[string]bool{}, codes: map[string]int{}}
	err := parallel(ctx, len(tenants), sl.e.o.noisyProducers, func(i int) error {
		why := ""
		for range 5 { // a loaded machine may answer 503 (Redis slower than redis.request_timeout)
			var ok bool
			if ok, why = sl.quietJob(ctx, c, tenants[i], sl.e.rcv.url(run), i, n); ok {
				return nil
			}
		}
		return fmt.Errorf("seed: a job for %s was refused five times: %s", tenants[i], why)
	})
	if err != nil {
		return err
	}
	if !rec.waitRequests(ctx, len(tenants), time.Now().Add(3*time.Minute)) {
		got, _ := rec.count()
		return fmt.Errorf("seed: %d of %d jobs delivered within 3 minutes", got, len(tenants))
	}
	return nil
}

// quietJob enqueues job i for tenant through POST …/jobs and records the
// outcome and the round trip; it reports whether the job was accepted, and
// if not why.
func (sl *sluice) quietJob(ctx context.Context, c *http.Client, tenant, url string, i int, n *quietCounts) (bool, string) {
	body := fmt.Appendf(nil, `{"type":"webhook","url":%q,"event":"quiet","payload":{"i":%d}}`, url, i)
	n.sent.Add(1)
	t0 := time.Now()
	a, err := sl.request(ctx, c, http.MethodPost, "/v1/tenants/"+tenant+"/jobs", body, nil)
	d := time.Since(t0)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lat = append(n.lat, d)
	n.tenants[tenant] = true
	switch {
	case err != nil:
		n.errs.Add(1)
		n.codes["error: "+errClass(err)]++
		return false, err.Error()
	case a.status != http.StatusAccepted:
		n.refused.Add(1)
		n.codes[fmt.Sprintf("%d %s", a.status, errorCode(a.body))]++
		return false, fmt.Sprintf("%d %s", a.status, snippet(a.body))
	}
	n.accepted.Add(1)
	return true, ""
}

// hammer sends one job of cost 1 for the noisy tenant and checks a 429.
func (sl *sluice) hammer(ctx context.Context, c *http.Client, url string, i int, n *hammerCounts) {
	body := fmt.Appendf(nil, `{"type":"webhook","url":%q,"event":"noisy","payload":{"i":%d}}`, url, i)
	n.sent.Add(1)
	a, err := sl.request(ctx, c, http.MethodPost, "/v1/tenants/noisy/jobs", body, nil)
	switch {
	case err != nil:
		n.errs.Add(1)
		return
	case a.status == http.StatusAccepted:
		n.accepted.Add(1)
		return
	case a.status != http.StatusTooManyRequests:
		n.other.Add(1)
		return
	}
	n.limited.Add(1)
	ra := a.header.Get("Retry-After")
	problem := check429(a, 1, sl.e.o.noisyAdmit)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.retryAfter[ra]++
	if problem == "" {
		n.goodRetry.Add(1)
	} else if len(n.bad) < 5 {
		n.bad = append(n.bad, problem)
	}
}

// check429 checks a 429 to a job of cost against an admission bucket of
// rate per second: the error shape and code rate_limited, Retry-After a
// whole number of seconds in 1 … ⌈cost / rate⌉ (the seconds until cost
// tokens exist, README "Admission"), and the "admit" limit's t in RateLimit
// equal to it. It returns "" or what is wrong.
func check429(a answer, cost int, rate float64) string {
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(a.body, &body); err != nil || body.Error.Code != "rate_limited" || body.Error.Message == "" {
		return fmt.Sprintf("body %s", snippet(a.body))
	}
	ra, err := strconv.Atoi(a.header.Get("Retry-After"))
	most := int(math.Ceil(float64(cost) / rate))
	if err != nil || ra < 1 || ra > most {
		return fmt.Sprintf("Retry-After %q, want 1 … %d", a.header.Get("Retry-After"), most)
	}
	if t, ok := limitT(a.header.Get("RateLimit"), "admit"); !ok || t != ra {
		return fmt.Sprintf("RateLimit %q: the admit t is not Retry-After %d", a.header.Get("RateLimit"), ra)
	}
	return ""
}

// limitT reads the t parameter of the named item of a RateLimit header
// (`"admit";r=0;t=1, "api";r=5;t=60`).
func limitT(header, name string) (int, bool) {
	for _, item := range strings.Split(header, ",") {
		params := strings.Split(strings.TrimSpace(item), ";")
		if len(params) == 0 || params[0] != strconv.Quote(name) {
			continue
		}
		for _, p := range params[1:] {
			if v, ok := strings.CutPrefix(p, "t="); ok {
				n, err := strconv.Atoi(v)
				return n, err == nil
			}
		}
	}
	return 0, false
}

// probeRetryAfter, for costs 1, half the burst and the burst: sends jobs of
// that cost for the noisy tenant until one is refused, waits its
// Retry-After, and sends it again: it must be admitted. It returns one line
// per cost and how many were admitted.
func (sl *sluice) probeRetryAfter(ctx context.Context, c *http.Client, url string) ([]string, int) {
	burst := noisyBurst(sl.e.o)
	var lines []string
	ok := 0
	for _, cost := range slices.Compact([]int{1, max(1, burst/2), burst}) {
		body := fmt.Appendf(nil, `{"type":"webhook","url":%q,"event":"probe","cost":%d,"payload":{}}`, url, cost)
		line := fmt.Sprintf("cost %d: no 429 in 100 tries", cost)
		for range 100 {
			a, err := sl.request(ctx, c, http.MethodPost, "/v1/tenants/noisy/jobs", body, nil)
			if err != nil {
				line = fmt.Sprintf("cost %d: %v", cost, err)
				break
			}
			if a.status != http.StatusTooManyRequests {
				continue
			}
			if p := check429(a, cost, sl.e.o.noisyAdmit); p != "" {
				line = fmt.Sprintf("cost %d: %s", cost, p)
				break
			}
			ra, _ := strconv.Atoi(a.header.Get("Retry-After"))
			if sleepCtx(ctx, time.Duration(ra)*time.Second) != nil {
				return lines, ok
			}
			again, err := sl.request(ctx, c, http.MethodPost, "/v1/tenants/noisy/jobs", body, nil)
			if err == nil && again.status == http.StatusAccepted {
				ok++
				line = fmt.Sprintf("cost %d: Retry-After %d s → 202", cost, ra)
			} else {
				line = fmt.Sprintf("cost %d: Retry-After %d s → %d %s %v", cost, ra, again.status, snippet(again.body), errOrEmpty(err))
			}
			break
		}
		lines = append(lines, line)
	}
	return lines, ok
}
