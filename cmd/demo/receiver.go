package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// maxDeliveryBytes bounds a delivery body the receiver reads.
const maxDeliveryBytes = 1 << 20

// receiver is the demo's webhook endpoint, POST /hooks/{tenant}. It checks
// every delivery's Standard Webhooks signature against the tenant's secrets
// with the official library (an implementation independent of Sluice's
// signer): a bad or missing signature is answered 401, a good one 204. It
// records the first arrival of each webhook-id whose payload carries the
// demo's run id; duplicates (at-least-once delivery) and deliveries of other
// runs (jobs of an earlier demo still queued) are acknowledged and counted.
// Safe for concurrent use.
type receiver struct {
	run     string
	secrets func(tenant string) []*standardwebhooks.Webhook

	mu      sync.Mutex
	tenants map[string]*tally
	seen    map[string]struct{} // webhook-ids of this run
	want    map[string]int      // jobs expected per tenant, set by expect
	done    chan struct{}       // closed when every expected job has arrived
	echo    io.Writer           // when not nil, every delivery of another run is printed
	now     func() time.Time    // the arrival clock; time.Now
}

// tally is what the receiver saw for one tenant.
type tally struct {
	arrivals []time.Time // first arrival of each delivery of this run, in order
	dups     int         // repeated webhook-ids of this run
	other    int         // verified deliveries of another run (or of no run)
	badSig   int         // refused: signature missing or wrong
}

// event is the part of a delivery body the receiver reads: the envelope
// webhook.EventBody writes, with the demo's payload as data.
type event struct {
	Type string  `json:"type"`
	Data payload `json:"data"`
}

// payload is the demo jobs' payload.
type payload struct {
	Run string `json:"run"`
	N   int    `json:"n"`
}

func newReceiver(run string, secrets func(string) []*standardwebhooks.Webhook) *receiver {
	return &receiver{run: run, secrets: secrets, tenants: map[string]*tally{},
		seen: map[string]struct{}{}, now: time.Now}
}

// Handler serves POST /hooks/{tenant}.
func (rc *receiver) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hooks/{tenant}", rc.serve)
	return mux
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	at := rc.now()
	tenant := r.PathValue("tenant")
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxDeliveryBytes))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := verify(rc.secrets(tenant), body, r.Header); err != nil {
		rc.refused(tenant, err)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var ev event
	_ = json.Unmarshal(body, &ev) // a body that is not the demo's counts as another run's
	rc.record(tenant, r.Header.Get(standardwebhooks.HeaderWebhookID), ev, at)
	w.WriteHeader(http.StatusNoContent)
}

// verify accepts a delivery signed by any of hooks' keys (several during a
// rotation); with no keys the tenant's deliveries are unsigned and accepted.
func verify(hooks []*standardwebhooks.Webhook, body []byte, h http.Header) error {
	if len(hooks) == 0 {
		return nil
	}
	var err error
	for _, wh := range hooks {
		if err = wh.Verify(body, h); err == nil {
			return nil
		}
	}
	return fmt.Errorf("signature check: %w", err)
}

func (rc *receiver) tally(tenant string) *tally {
	t := rc.tenants[tenant]
	if t == nil {
		t = &tally{}
		rc.tenants[tenant] = t
	}
	return t
}

func (rc *receiver) record(tenant, id string, ev event, at time.Time) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	t := rc.tally(tenant)
	if ev.Data.Run != rc.run || id == "" {
		t.other++
		if rc.echo != nil {
			fmt.Fprintf(rc.echo, "%s  %-10s %-32s %-20s signature ok\n",
				at.Format("15:04:05.000"), tenant, id, ev.Type)
		}
		return
	}
	if _, dup := rc.seen[id]; dup {
		t.dups++
		return
	}
	rc.seen[id] = struct{}{}
	t.arrivals = append(t.arrivals, at)
	rc.checkDone()
}

// expect sets how many jobs of this run each tenant is to receive; the
// returned channel is closed once they all have arrived.
func (rc *receiver) expect(shares []share) <-chan struct{} {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.want = make(map[string]int, len(shares))
	for _, s := range shares {
		rc.want[s.Tenant] += s.Jobs
	}
	rc.done = make(chan struct{})
	rc.checkDone()
	return rc.done
}

// checkDone closes done when every expected tenant is complete; rc.mu held.
func (rc *receiver) checkDone() {
	if rc.done == nil || rc.want == nil {
		return
	}
	for tenant, n := range rc.want {
		if len(rc.tally(tenant).arrivals) < n {
			return
		}
	}
	close(rc.done)
	rc.want = nil
}

func (rc *receiver) refused(tenant string, err error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.tally(tenant).badSig++
	if rc.echo != nil {
		fmt.Fprintf(rc.echo, "%s  %-10s refused: %v\n", rc.now().Format("15:04:05.000"), tenant, err)
	}
}

// echoTo makes the receiver print every later delivery of another run (and
// every refusal) to w, one line each; nil stops it.
func (rc *receiver) echoTo(w io.Writer) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.echo = w
}

// snapshot is a copy of one tenant's tally with arrivals as offsets from
// origin, sorted.
type snapshot struct {
	Arrivals []time.Duration
	Dups     int
	Other    int
	BadSig   int
}

// snapshot returns the tally of every tenant in tenants.
func (rc *receiver) snapshot(tenants []string, origin time.Time) map[string]snapshot {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make(map[string]snapshot, len(tenants))
	for _, name := range tenants {
		t := rc.tally(name)
		s := snapshot{Arrivals: make([]time.Duration, len(t.arrivals)), Dups: t.dups, Other: t.other, BadSig: t.badSig}
		for i, at := range t.arrivals {
			s.Arrivals[i] = at.Sub(origin)
		}
		slices.Sort(s.Arrivals)
		out[name] = s
	}
	return out
}
