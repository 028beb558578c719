package worker

import (
	"context"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/webhook"
	"github.com/sluicehq/sluice/internal/wire"
)

// CircuitStore is what Circuits needs of *store.Store.
type CircuitStore interface {
	CircuitGate(ctx context.Context, destination, job, tenant string, probeLife time.Duration, cfg store.CircuitConfig) (store.Gate, error)
	CircuitRecord(ctx context.Context, destination, job string, failed bool, cfg store.CircuitConfig) (store.CircuitReport, error)
	Circuits(ctx context.Context) ([]store.Circuit, time.Time, error)
}

var _ CircuitStore = (*store.Store)(nil)

// CircuitRefreshDefault is how often Circuits re-reads the destinations
// that failed (one call of circuit.lua's list), at most: only while jobs
// are sent.
const CircuitRefreshDefault = 250 * time.Millisecond

// circuitCallTimeout bounds a circuit call made after an attempt (its
// context may have ended with the attempt's timeout).
const circuitCallTimeout = 2 * time.Second

// Circuits applies the destinations' circuits (docs/design.md §4.5,
// store.CircuitGate) to webhook and http jobs: Before a send it asks the
// shared state whether the job's destination takes it — only for a
// destination this process knows to have failed (its view: the
// destinations stored in <p>:circuits, re-read at most every Refresh
// while jobs are sent, and every reply of a gate or report), so a healthy
// destination costs no round trip —; After the send it records a timeout
// or a connection failure (every one) and an answer (when the destination
// is in the view, or the job was the probe). A nil *Circuits sends
// everything. Safe for concurrent use.
//
// So "consecutive" is as the workers see it: an answer breaks a run of
// failures when its worker knows of them (within Refresh); and a job sent
// by a worker that has not yet heard of an opening (within Refresh, or its
// own next failure) is sent. A Redis error fails open: the job is sent.
type Circuits struct {
	store    CircuitStore
	settings func() wire.Settings
	refresh  time.Duration
	log      *slog.Logger
	m        circuitMetrics

	mu      sync.Mutex
	view    map[string]store.CircuitState // destinations that failed
	fetched time.Time
	busy    atomic.Bool // a refresh is under way
}

// CircuitsConfig configures NewCircuits.
type CircuitsConfig struct {
	// Store holds the circuits; required.
	Store CircuitStore
	// Settings gives the deployment's settings (Worker.Settings: the
	// circuit's failures, backoff and cap, whether it is disabled, the
	// grace); nil: store.DefaultSettings().
	Settings func() wire.Settings
	// Refresh is CircuitRefreshDefault when zero.
	Refresh time.Duration
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger receives errors; nil discards them.
	Logger *slog.Logger
}

// NewCircuits returns the Circuits of cfg.
func NewCircuits(cfg CircuitsConfig) (*Circuits, error) {
	c := &Circuits{store: cfg.Store, settings: cfg.Settings, refresh: cfg.Refresh, log: cfg.Logger,
		view: map[string]store.CircuitState{}}
	if c.settings == nil {
		c.settings = store.DefaultSettings
	}
	if c.refresh <= 0 {
		c.refresh = CircuitRefreshDefault
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if c.m, err = newCircuitMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	return c, nil
}

// circuitTicket is what Before hands After: the job's destination and
// whether it is the probe.
type circuitTicket struct {
	dest  string
	probe bool
}

// Before decides whether cj, sent to u (its job's URL parsed; nil when
// it does not parse: no circuit), goes now: nil and a ticket
// for After, or the deferral to finish cj with (FinishDeferred: Pause until
// the circuit's backoff ends or its probe's deadline, Error the
// destination).
func (c *Circuits) Before(ctx context.Context, u *url.URL, cj store.ClaimedJob) (circuitTicket, *wire.AttemptOutcome) {
	if c == nil {
		return circuitTicket{}, nil
	}
	set := c.settings()
	dest, ok := webhook.DestinationOf(u)
	if !ok || set.CircuitMode == wire.CircuitOff {
		return circuitTicket{}, nil
	}
	c.maybeRefresh(ctx)
	if _, failed := c.known(dest); !failed {
		return circuitTicket{dest: dest}, nil
	}
	life := cj.Timeout + max(set.Grace, time.Second)
	if cj.Timeout <= 0 {
		life += TimeoutDefault
	}
	g, err := c.store.CircuitGate(ctx, dest, jobRef(cj), cj.Tenant, life, store.CircuitConfigOf(set))
	if err != nil {
		c.log.Warn("circuit gate failed; sending", "job", cj.ID, "destination", dest, "err", err)
		return circuitTicket{dest: dest}, nil
	}
	switch g.Decision {
	case store.GateProbe:
		c.note(dest, store.CircuitHalfOpen)
		c.m.probes.Inc()
		return circuitTicket{dest: dest, probe: true}, nil
	case store.GateWait:
		c.note(dest, store.CircuitOpen)
		c.m.deferred.Inc()
		return circuitTicket{}, &wire.AttemptOutcome{Kind: wire.FinishDeferred, Pause: g.Wait, Error: dest}
	}
	return circuitTicket{dest: dest}, nil
}

// After records o, the outcome of cj's send under ticket (Before's).
func (c *Circuits) After(ctx context.Context, ticket circuitTicket, cj store.ClaimedJob, o wire.AttemptOutcome) {
	if c == nil || ticket.dest == "" {
		return
	}
	failed := connectionFailure(o)
	_, known := c.known(ticket.dest)
	if !failed && !(o.Status > 0 && (known || ticket.probe)) {
		return // neither a failure nor news for a destination that failed
	}
	set := c.settings()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), circuitCallTimeout)
	defer cancel()
	r, err := c.store.CircuitRecord(ctx, ticket.dest, jobRef(cj), failed, store.CircuitConfigOf(set))
	if err != nil {
		// A failed wake-up leaves the held jobs to their own due time.
		c.log.Warn("circuit report failed", "job", cj.ID, "destination", ticket.dest, "err", err)
		if r.What == "" {
			return
		}
	}
	switch r.What {
	case "opened", "reopened":
		c.m.openings.Inc()
		c.log.Info("circuit open", "destination", ticket.dest, "until", r.Until, "job", cj.ID)
	case "closed":
		c.log.Info("circuit closed", "destination", ticket.dest, "job", cj.ID, "jobs_woken", r.Woken)
	}
	switch r.What {
	case "closed", "clean":
		c.forget(ticket.dest)
	default:
		c.note(ticket.dest, r.State)
	}
}

// connectionFailure reports whether o is a timeout or a failure to connect
// (DNS, TCP, TLS): what counts toward opening a circuit. Any HTTP answer
// — a 5xx too — is not one.
func connectionFailure(o wire.AttemptOutcome) bool {
	if o.Status != 0 || o.Kind != wire.FinishRetry {
		return false
	}
	switch o.Error {
	case webhook.ReasonTimeout, webhook.ReasonConnection, webhook.ReasonDNS, webhook.ReasonTLS:
		return true
	}
	return false
}

// jobRef names a claim of cj in the circuit's state: "<id>:<gen>".
func jobRef(cj store.ClaimedJob) string { return cj.ID + ":" + strconv.FormatInt(cj.Gen, 10) }

func (c *Circuits) known(dest string) (store.CircuitState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.view[dest]
	return st, ok
}

func (c *Circuits) note(dest string, st store.CircuitState) {
	c.mu.Lock()
	c.view[dest] = st
	c.mu.Unlock()
}

func (c *Circuits) forget(dest string) {
	c.mu.Lock()
	delete(c.view, dest)
	c.mu.Unlock()
}

// maybeRefresh re-reads the stored circuits when the view is older than
// refresh and no other refresh is under way (the others go on with the
// view they have), and sets the gauges.
func (c *Circuits) maybeRefresh(ctx context.Context) {
	c.mu.Lock()
	due := time.Since(c.fetched) >= c.refresh
	c.mu.Unlock()
	if !due || !c.busy.CompareAndSwap(false, true) {
		return
	}
	defer c.busy.Store(false)
	cs, _, err := c.store.Circuits(ctx)
	if err != nil {
		c.log.Warn("read circuits failed", "err", err)
		return
	}
	view := make(map[string]store.CircuitState, len(cs))
	count := map[store.CircuitState]int{}
	for _, x := range cs {
		view[x.Destination] = x.State
		count[x.State]++
	}
	c.mu.Lock()
	c.view, c.fetched = view, time.Now()
	c.mu.Unlock()
	for _, st := range []store.CircuitState{store.CircuitClosed, store.CircuitOpen, store.CircuitHalfOpen} {
		c.m.states.WithLabelValues(string(st)).Set(float64(count[st]))
	}
}

type circuitMetrics struct {
	deferred prometheus.Counter
	openings prometheus.Counter
	probes   prometheus.Counter
	states   *prometheus.GaugeVec
}

func newCircuitMetrics(reg prometheus.Registerer) (circuitMetrics, error) {
	m := circuitMetrics{
		deferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_circuit_deferred_total",
			Help: "Jobs this worker did not send because their destination's circuit was open (or its probe out): deferred without an attempt.",
		}),
		openings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_circuit_openings_total",
			Help: "Circuits this worker's reports opened: a destination's Nth consecutive timeout or connection failure, or a failed probe.",
		}),
		probes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_circuit_probes_total",
			Help: "Probes this worker sent: the one job sent to a destination when its circuit's backoff ended.",
		}),
		states: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_circuits",
			Help: "Destinations by circuit state as this worker last read them: open, half_open, closed (with failures counted). Deployment-wide: take the max over workers.",
		}, []string{"state"}),
	}
	for _, st := range []store.CircuitState{store.CircuitClosed, store.CircuitOpen, store.CircuitHalfOpen} {
		m.states.WithLabelValues(string(st)) // every state from the start, at 0
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.deferred, m.openings, m.probes, m.states} {
			if err := reg.Register(c); err != nil {
				return circuitMetrics{}, err
			}
		}
	}
	return m, nil
}
