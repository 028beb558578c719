package e2e

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestIdleTenantsLeaveNoKeysBehind: with retentions of 1s, a tenant whose
// jobs have all ended (succeeded — some under idempotency keys, from a
// batch item and from the header — and canceled) leaves no key under the
// test's prefix once the retention has passed, but the permanent ones: the
// meta hash, the shards' policy hashes and virtual clocks, the worker
// heartbeats and, while the throttler runs, the dispatch leases.
func TestIdleTenantsLeaveNoKeysBehind(t *testing.T) {
	t.Parallel()
	const tenant = "acme"
	c, th := startExpiring(t, tenant, "{succeeded: 1s, canceled: 1s, dead: 1s, idempotency: 1s}")

	jobs := make([]map[string]any, 5)
	for i := range jobs {
		jobs[i] = c.webhookJob(tenant, i)
		if i%2 == 0 {
			jobs[i]["idempotency_key"] = fmt.Sprintf("batch-%d", i)
		}
	}
	var batch struct {
		Results []struct{ ID string } `json:"results"`
	}
	if st := c.call(th, http.MethodPost, "/v1/tenants/"+tenant+"/jobs:batch", map[string]any{"jobs": jobs}, &batch); st != http.StatusAccepted {
		t.Fatalf("batch enqueue: status %d", st)
	}
	var ids []string
	for _, r := range batch.Results {
		ids = append(ids, r.ID)
	}
	ids = append(ids, c.enqueueOne(th, tenant, c.webhookJob(tenant, 5), "single-1"))
	later := c.webhookJob(tenant, 6)
	later["delay"] = "1h"
	canceled := c.enqueueOne(th, tenant, later, "")
	if st := c.call(th, http.MethodDelete, "/v1/jobs/"+canceled, nil, nil); st != http.StatusOK {
		t.Fatalf("cancel %s: status %d", canceled, st)
	}
	c.recv.waitDistinct(t, ids, 15*time.Second)
	c.waitSucceeded(th, ids, 10*time.Second)

	// What must go: the job records, the idempotency keys, the tenant.
	before := strings.Join(c.keysBut(permanentKeys(c.prefix)), "\n\t")
	for _, kind := range []string{":j:", ":idem:"} {
		if !strings.Contains(before, kind) {
			t.Fatalf("no %s key right after the jobs ended; the keys were:\n\t%s", kind, before)
		}
	}
	t.Logf("right after the jobs ended:\n\t%s", before)
	c.waitNoKeysBut(t, 15*time.Second, permanentKeys(c.prefix))
}

// permanentKeys matches the keys a deployment keeps for good under prefix:
// meta, per shard the policy hash, the virtual clock, the tenant index and
// its name set (their entries go with their tenant's state; a tenant with
// policy overrides, as these tests' tenant, stays listed), the index
// backfill's marker and the observation aggregates' counts (agg), the worker
// heartbeats (themselves expiring when no worker beats), and the dispatch
// leases and members (while a throttler runs), and the API keys made by
// API with every key's last use (one slot, {apikeys}: bounded by the keys'
// names; deleting a key by API removes its entries, a key dropped from the
// file keeps its last use).
func permanentKeys(prefix string) *regexp.Regexp {
	p := regexp.QuoteMeta(prefix)
	return regexp.MustCompile(`^` + p + `:(meta|workers|\{s\d+\}:(policy|vclock|tenants|tenant_names|tenants_backfilled|agg)|dispatch:lease:\d+|dispatch:members|\{apikeys\}:(k|used))$`)
}

// waitNoKeysBut polls until every key under the cluster's prefix matches
// keep, and fails listing the others with their types and TTLs.
func (c *cluster) waitNoKeysBut(t *testing.T, within time.Duration, keep *regexp.Regexp) {
	t.Helper()
	poll(t, within, func() (bool, string) {
		left := c.keysBut(keep)
		return len(left) == 0, fmt.Sprintf("%d keys left behind:\n\t%s", len(left), strings.Join(left, "\n\t"))
	})
}

// keysBut lists the keys under the cluster's prefix that keep does not
// match, each with its type and TTL, sorted.
func (c *cluster) keysBut(keep *regexp.Regexp) []string {
	c.t.Helper()
	ctx := context.Background()
	keys, err := redistest.Keys(ctx, c.rdb, c.prefix+":*")
	if err != nil {
		c.t.Fatal(err)
	}
	slices.Sort(keys)
	var left []string
	for _, k := range keys {
		if keep.MatchString(k) {
			continue
		}
		ttl, err := c.rdb.PTTL(ctx, k).Result()
		if err != nil {
			c.t.Fatal(err)
		}
		typ, _ := c.rdb.Type(ctx, k).Result()
		left = append(left, fmt.Sprintf("%s (%s, TTL %s)", k, typ, ttlString(ttl)))
	}
	return left
}

// ttlString shows a PTTL answer: none, gone, or the duration.
func ttlString(d time.Duration) string {
	switch d {
	case -1:
		return "none"
	case -2:
		return "gone"
	}
	return d.String()
}

// enqueueOne posts one job through p's single-job route, under an
// Idempotency-Key header when idemKey is not "", and returns its id.
func (c *cluster) enqueueOne(p *proc, tenant string, job map[string]any, idemKey string) string {
	c.t.Helper()
	var ref struct{ ID string }
	st := c.callWith(p, http.MethodPost, "/v1/tenants/"+tenant+"/jobs", job, &ref, map[string]string{"Idempotency-Key": idemKey}, nil)
	if st != http.StatusAccepted || ref.ID == "" {
		c.t.Fatalf("enqueue one job for %s: status %d, id %q", tenant, st, ref.ID)
	}
	return ref.ID
}

// TestIdleTenantsDeadLettersExpire: a dead letter is kept for
// retention.dead (1s here), then its record and the tenant's dead set go
// even when the tenant stays idle.
func TestIdleTenantsDeadLettersExpire(t *testing.T) {
	t.Parallel()
	const tenant = "acme"
	c, th := startExpiring(t, tenant, "{succeeded: 1s, canceled: 1s, dead: 1s, idempotency: 1s}")
	bad := c.webhookJob(tenant, 0)
	bad["url"] = c.recv.url(tenant) + "?status=400" // permanent: dead at once
	id := c.enqueueOne(th, tenant, bad, "dead-1")
	poll(t, 10*time.Second, func() (bool, string) {
		var j jobState
		c.call(th, http.MethodGet, "/v1/jobs/"+id, nil, &j)
		return j.State == "dead", fmt.Sprintf("job %s is %q, want dead", id, j.State)
	})
	c.waitNoKeysBut(t, 15*time.Second, permanentKeys(c.prefix))
}

// TestIdempotencyKeyOutlivesTheJobRecord: retention.idempotency (1h here)
// keeps an idempotency key past its job's end even when the job's record
// goes sooner (retention.succeeded 1s): the same request sent again after
// the record has expired is answered as a replay of the original job
// (Idempotent-Replayed: true, the same id), not enqueued and delivered a
// second time.
func TestIdempotencyKeyOutlivesTheJobRecord(t *testing.T) {
	t.Parallel()
	const tenant = "acme"
	c, th := startExpiring(t, tenant, "{succeeded: 1s, idempotency: 1h}")
	job := c.webhookJob(tenant, 0)
	id := c.enqueueOne(th, tenant, job, "pay-42")
	c.waitSucceeded(th, []string{id}, 10*time.Second)
	poll(t, 10*time.Second, func() (bool, string) {
		st := c.call(th, http.MethodGet, "/v1/jobs/"+id, nil, nil)
		return st == http.StatusNotFound, fmt.Sprintf("GET /v1/jobs/%s: %d, want 404 once retention.succeeded has passed", id, st)
	})
	var again struct{ ID string }
	var replayed string
	st := c.callWith(th, http.MethodPost, "/v1/tenants/"+tenant+"/jobs", job, &again,
		map[string]string{"Idempotency-Key": "pay-42"}, func(h http.Header) { replayed = h.Get("Idempotent-Replayed") })
	if st != http.StatusAccepted || again.ID != id || replayed != "true" {
		t.Fatalf("the same request under the same key within retention.idempotency: status %d, id %q, Idempotent-Replayed %q; want 202, %q, true",
			st, again.ID, replayed, id)
	}
}

// startExpiring runs a throttler and a worker for tenant (50/s, burst 5)
// with the given retention section.
func startExpiring(t *testing.T, tenant, retention string) (*cluster, *proc) {
	t.Helper()
	c := newCluster(t, options{
		tenants:  map[string]string{tenant: "{rate: 50/s, burst: 5}"},
		sections: map[string]string{"retention": retention},
	})
	th := c.startThrottler()
	c.startWorker()
	return c, th
}
