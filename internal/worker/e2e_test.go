package worker_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/worker"
)

// TestDeliversEveryJobOnceAtTheTenantsRate: 60 jobs for one tenant at
// r = 50/s, b = 1 reach a real receiver exactly once each, and no window of
// the arrivals holds more than b + r·Δ + 1 of them.
func TestDeliversEveryJobOnceAtTheTenantsRate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 4)
	h.policy("acme", store.Overrides{RateUS: ptr(20_000), Burst: ptr(1), Concurrency: ptr(20)})
	h.startWorker(20, nil)
	ids := h.enqueue("acme", 60)
	began := time.Now()
	h.startDispatcher(nil)

	got := h.recv.waitFor(t, "acme", 60, 10*time.Second)
	took := got[len(got)-1].at.Sub(got[0].at)
	exactlyOnce(t, got, ids)
	checkRate(t, got, 50, 1, h.sendError(got))
	h.noStall(t)
	// 59 intervals of T = 20ms: 1.18s. A claim that misses ε goes back to
	// the head lane and costs its slot; a starved machine (-race, parallel
	// packages on 2 cores) misses several in a row. Only a gross undershoot
	// fails here; the precision is logged (without -race: p99 ≈ 0.8 ms).
	missed := h.counter("sluice_worker_claims_total", "outcome=returned")
	if took < 1150*time.Millisecond || took > 3*time.Second {
		t.Errorf("60 jobs at 50/s took %s from first to last (%v claims missed ε), want ≈ 1.18s", took, missed)
	}
	t.Logf("first arrival %s after start; 60 jobs over %s; inter-arrival error p99 %s; %v claims missed ε",
		got[0].at.Sub(began), took, spacingError(got, 20*time.Millisecond), missed)
}

// TestConcurrencyCapIsNeverExceeded: a tenant with concurrency 2 and a slow
// endpoint never has more than 2 requests open at once, whatever its rate.
func TestConcurrencyCapIsNeverExceeded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	h.recv.behave = func(string) (int, time.Duration) { return http.StatusOK, 40 * time.Millisecond }
	h.policy("slow", store.Overrides{RateUS: ptr(2_000), Burst: ptr(5), Concurrency: ptr(2)})
	h.startWorker(20, nil)
	ids := h.enqueue("slow", 12)
	h.startDispatcher(nil)

	got := h.recv.waitFor(t, "slow", 12, 10*time.Second)
	exactlyOnce(t, got, ids)
	h.noStall(t)
	if n := h.recv.maxConcurrent("slow"); n != 2 {
		t.Fatalf("at most %d requests open at once, want exactly the cap 2", n)
	}
}

// TestFailingEndpointIsRetriedOnTheCurveWithinTheRate: an endpoint that
// always answers 500 sees each job max_attempts times, spaced by the retry
// curve (min_backoff doubled per retry, ±10 %), never faster than the
// tenant's rate; then the jobs are dead. (ε is 10 ms: a claim that misses a
// 2 ms ε under -race goes back to the head lane and blurs the curve.)
func TestFailingEndpointIsRetriedOnTheCurveWithinTheRate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	h.recv.behave = func(string) (int, time.Duration) { return http.StatusInternalServerError, 0 }
	h.policy("flaky", store.Overrides{
		RateUS: ptr(50_000), Burst: ptr(1), Concurrency: ptr(10), // 20/s
		MaxAttempts: ptr(4), MinBackoffUS: ptr(100_000), MaxBackoffUS: ptr(10_000_000), MaxDoublings: ptr(5),
		Adaptive: ptr(0), // the bare curve: each 500 would cut an adaptive tenant's rate (docs/design.md §4.2)
	})
	h.startWorker(10, nil, func(c *worker.Config) { c.Settings.Tolerance = 10 * time.Millisecond })
	ids := h.enqueue("flaky", 3)
	h.startDispatcher(nil)

	got := h.recv.waitFor(t, "flaky", 12, 10*time.Second)
	// Retries' slots are not kept: ε_r = 0; the +1 absorbs 50ms of jitter.
	checkRate(t, got, 20, 1, 0)
	waitState(t, h, ids, store.StateDead) // every finish recorded
	for _, id := range ids {
		var at []time.Time
		for _, a := range got {
			if a.id == id {
				at = append(at, a.at)
			}
		}
		log := h.jobOf(id).Attempts
		if len(at) != 4 || len(log) != 4 {
			t.Fatalf("job %s: %d requests, %d attempts logged; want 4", id, len(at), len(log))
		}
		for k := 1; k < len(at); k++ {
			backoff := time.Duration(100<<(k-1)) * time.Millisecond
			gap := at[k].Sub(at[k-1])
			// Never earlier than the curve allows (backoff − 10 % jitter).
			if gap < backoff*9/10 {
				t.Errorf("job %s: retry %d came %s after attempt %d, before the backoff %s − 10%%", id, k, gap, k, backoff)
			}
			// And not much later, unless a claim missed ε in between (its
			// job went back to the head lane: two more generations).
			if log[k].Gen == log[k-1].Gen+1 && gap > backoff*11/10+store.LeadDefault+150*time.Millisecond {
				t.Errorf("job %s: retry %d came %s after attempt %d, want ≈ %s; attempt log %+v", id, k, gap, k, backoff, log)
			}
		}
	}
	h.noStall(t)
}

// TestNoisyTenantDoesNotDelayAQuietOne: while one tenant has a deep backlog
// sending at 100/s, another tenant's jobs get their slots at once (the first
// within D of the enqueue, then every T); the first leaves when a worker
// picks it up, the others within a few ms of their planned distance from it.
func TestNoisyTenantDoesNotDelayAQuietOne(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 4)
	h.policy("noisy", store.Overrides{RateUS: ptr(10_000), Burst: ptr(1), Concurrency: ptr(50), AdmitUS: ptr(1), AdmitBurst: ptr(5_000)})
	h.policy("quiet", store.Overrides{RateUS: ptr(50_000), Burst: ptr(1), Concurrency: ptr(5)})
	h.startWorker(50, nil)
	h.enqueue("noisy", 3_000)
	h.startDispatcher(nil)
	h.recv.waitFor(t, "noisy", 20, 5*time.Second) // the noisy tenant is sending

	enqueued := h.clock.Now()
	ids := h.enqueue("quiet", 10)
	got := h.recv.waitFor(t, "quiet", 10, 5*time.Second)
	exactlyOnce(t, got, ids)
	var slots []time.Time
	for _, a := range got {
		slots = append(slots, h.jobOf(a.id).Slot)
	}
	// The first job's slot is due at once, so it leaves when a worker picks
	// it up; the others keep their planned distances from it (the send
	// schedule carries the pickup's lateness, claim.lua).
	late := make([]time.Duration, len(got))
	for i, a := range got {
		late[i] = a.redis.Sub(got[0].redis) - slots[i].Sub(slots[0])
	}
	checkRate(t, got, 20, 1, h.sendError(got))
	slices.SortFunc(slots, time.Time.Compare)
	// Fairness: the noisy backlog (30 s of work) does not push the quiet
	// tenant's slots back: the first is min lead L after the next pass, then
	// one per T; a claim that misses ε on a starved machine costs a slot.
	missed := h.counter("sluice_worker_claims_total", "outcome=returned")
	wait, span := slots[0].Sub(enqueued), slots[9].Sub(slots[0])
	t.Logf("quiet tenant: first slot %s after enqueue, 10 slots over %s; %v claims missed ε", wait, span, missed)
	if wait > time.Second || span > 2*time.Second {
		t.Errorf("quiet tenant's first slot %s after its enqueue, 10 slots over %s: behind the noisy backlog", wait, span)
	}
	h.noStall(t)
	// Precision at the receiver, on its estimate of Redis's clock. Without
	// -race the median is ≈ 0.3 ms; the race detector slows everything.
	first := got[0].redis.Sub(enqueued)
	if first > time.Second {
		t.Errorf("quiet tenant's first arrival %s after its enqueue: behind the noisy backlog", first)
	}
	slices.Sort(late)
	med, worst := late[len(late)/2], late[len(late)-1]
	t.Logf("quiet tenant: first arrival %s after enqueue; later arrivals off their planned distance from it %v (noisy arrivals so far: %d)",
		first, late, len(h.recv.arrivals("noisy")))
	// Isolation, not precision: the noisy backlog is 30 s of work, so a quiet
	// job that waited behind it would be seconds off. How close to their
	// planned distances the quiet arrivals come is a timing claim (≈ 0.3 ms
	// median on a quiet machine; a claim delayed on a busy one carries its
	// lateness to the jobs after it) measured by scripts/bench-dispatch
	// (part 4), not asserted here; nor is "never early" (the reference, the
	// first arrival, carries its own request's jitter, such as a new
	// connection): checkRate above holds every window to the rate.
	if worst > time.Second || late[0] < -time.Second {
		t.Fatalf("quiet tenant's arrivals were %s … %s (median %s) off their planned distances: behind the noisy backlog",
			late[0], worst, med)
	}
}

// TestTwoDispatchersDeliverEachJobOnce: two dispatchers on the same shards,
// with and without leases, never deliver a job twice. Worker concurrency
// (30) exceeds total rate × D (150/s × 0.1 s): no job waits for a worker.
func TestTwoDispatchersDeliverEachJobOnce(t *testing.T) {
	t.Parallel()
	for _, leases := range []bool{true, false} {
		t.Run(fmt.Sprintf("leases=%v", leases), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, 4)
			var ids []string
			for _, tn := range []string{"a", "b", "c"} {
				h.policy(tn, store.Overrides{RateUS: ptr(20_000), Burst: ptr(2), Concurrency: ptr(10)})
				ids = append(ids, h.enqueue(tn, 30)...)
			}
			h.startWorker(30, nil)
			for range 2 {
				h.startDispatcher(func(c *dispatch.Config) { c.DisableLeases = !leases })
			}
			got := h.recv.waitFor(t, "", len(ids), 10*time.Second)
			for _, tn := range []string{"a", "b", "c"} {
				got := h.recv.arrivals(tn)
				checkRate(t, got, 50, 2, h.sendError(got))
			}
			waitState(t, h, ids, store.StateSucceeded)
			exactlyOnce(t, h.recv.arrivals(""), ids)
			h.noStall(t)
			t.Logf("%d jobs over %s; %v claims missed ε", len(got), got[len(got)-1].at.Sub(got[0].at),
				h.counter("sluice_worker_claims_total", "outcome=returned"))
		})
	}
}

// waitState polls until every job is in state.
func waitState(t *testing.T, h *harness, ids []string, state store.State) {
	t.Helper()
	for _, id := range ids {
		redistest.Poll(t, 5*time.Second, fmt.Sprintf("job %s in state %s", id, state), func() bool {
			j, err := h.st.GetJob(h.ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return j.State == state
		})
	}
}

// spacingError is the p99 of |inter-arrival − T|.
func spacingError(got []arrival, T time.Duration) time.Duration {
	var errs []time.Duration
	for i := 1; i < len(got); i++ {
		d := got[i].at.Sub(got[i-1].at) - T
		errs = append(errs, max(d, -d))
	}
	slices.Sort(errs)
	if len(errs) == 0 {
		return 0
	}
	return errs[len(errs)*99/100]
}
