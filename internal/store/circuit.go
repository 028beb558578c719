package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/tuning"
	"github.com/sluicehq/sluice/internal/wire"
)

// The destinations' circuits (docs/design.md §4.5). A destination is the
// scheme, host and port of a webhook or http job's URL ("https://api.example.com:443").
// After CircuitConfig.Failures consecutive timeouts or connection failures
// to it, its circuit opens for a backoff; the jobs sent to it meanwhile
// wait (FinishDeferred) without using an attempt; when the backoff ends one
// job, deployment-wide, is the probe: an answer closes the circuit, a
// timeout or connection failure opens it again for twice the backoff, up
// to the cap. The state of every destination that failed lives in one
// hash, <p>:{circuits}:c (lua/circuit.lua), shared by every worker; a
// destination that never failed has no entry and costs nothing. While it
// is open one held job, the scout, comes back at each backoff's end; the
// others are held long and brought back when it closes (WakeDeferred):
// each return of a held job costs its tenant a release.

// Defaults of CircuitConfig (their values: internal/tuning).
const (
	CircuitFailuresDefault   = tuning.CircuitFailuresDefault
	CircuitBackoffDefault    = tuning.CircuitBackoffDefault
	CircuitMaxBackoffDefault = tuning.CircuitMaxBackoffDefault
	MaxCircuitFailures       = tuning.MaxCircuitFailures
)

// MaxDestinationLen bounds a destination, in bytes.
const MaxDestinationLen = 300

// CircuitConfig is how circuits open and back off: the deployment's
// settings (wire.Settings circuit_*; CircuitConfigOf).
type CircuitConfig struct {
	// Failures is how many consecutive timeouts or connection failures
	// open a circuit, 1 … MaxCircuitFailures; default CircuitFailuresDefault.
	Failures int
	// Backoff is how long a circuit stays open after it opens; a failed
	// probe doubles it. Default CircuitBackoffDefault.
	Backoff time.Duration
	// MaxBackoff caps the doubled backoff, ≥ Backoff; default
	// CircuitMaxBackoffDefault (or Backoff when that is larger).
	MaxBackoff time.Duration
	// Disabled turns the circuits off (settings circuit_mode = wire.CircuitOff).
	Disabled bool
}

// CircuitConfigOf is the CircuitConfig of settings s.
func CircuitConfigOf(s wire.Settings) CircuitConfig {
	return CircuitConfig{Failures: s.CircuitFailures, Backoff: s.CircuitBackoff,
		MaxBackoff: s.CircuitMaxBackoff, Disabled: s.CircuitMode == wire.CircuitOff}.WithDefaults()
}

// WithDefaults fills c's zero fields.
func (c CircuitConfig) WithDefaults() CircuitConfig {
	if c.Failures == 0 {
		c.Failures = CircuitFailuresDefault
	}
	if c.Backoff == 0 {
		c.Backoff = CircuitBackoffDefault
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = max(c.Backoff, CircuitMaxBackoffDefault)
	}
	return c
}

func (c CircuitConfig) validate() error {
	switch {
	case c.Failures < 1 || c.Failures > MaxCircuitFailures:
		return invalidf("circuit failures %d: want 1 … %d", c.Failures, MaxCircuitFailures)
	case c.Backoff < time.Microsecond || c.MaxBackoff < c.Backoff || c.MaxBackoff > policy.MaxDuration:
		return invalidf("circuit backoff %s, max %s: want 1µs ≤ backoff ≤ max ≤ %s", c.Backoff, c.MaxBackoff, policy.MaxDuration)
	}
	return nil
}

// CircuitState is a circuit's state.
type CircuitState string

// Circuit states.
const (
	CircuitClosed   CircuitState = "closed"    // sending; Failures counts the consecutive failures so far
	CircuitOpen     CircuitState = "open"      // not sending until Until
	CircuitHalfOpen CircuitState = "half_open" // one probe out, until its deadline Until
)

// Circuit is one destination's circuit as stored.
type Circuit struct {
	Destination string
	State       CircuitState
	// Failures is the consecutive timeouts and connection failures counted
	// (those of failed probes included).
	Failures int
	// Until is, while open, the backoff's end; while half-open, the probe's
	// deadline (another job may probe after it); zero when closed.
	Until time.Time
	// Backoff is the current backoff (the next failed probe doubles it);
	// zero while closed.
	Backoff time.Duration
	// Changed is when the state or the count last changed (Redis time).
	Changed time.Time
}

// GateDecision is what CircuitGate says of a job.
type GateDecision string

// Gate decisions.
const (
	GateSend  GateDecision = "send"  // closed: send
	GateProbe GateDecision = "probe" // the backoff ended: send, this job is the probe
	GateWait  GateDecision = "wait"  // open (or a probe is out): defer the job by Wait
)

// Gate is CircuitGate's answer.
type Gate struct {
	Decision GateDecision
	// Wait is, for GateWait, how long until the backoff ends (or the probe's
	// deadline), from the script's now: > 0.
	Wait time.Duration
}

// CircuitGate decides whether job ("<id>:<gen>") of tenant may be sent to
// destination now (Redis time). A closed circuit sends. From an open one's
// backoff end on, the first job asking is the probe — the circuit turns
// half-open until now + probeLife (the job's timeout and the grace: a probe
// whose worker died is replaced after it). Before, the job waits: the
// scout (the first job held since the last scout came back) until the
// backoff's end (half-open: the probe's deadline); any other job until
// then + probeLife + cfg.MaxBackoff, its tenant recorded to be woken
// (WakeDeferred) when the circuit closes.
func (s *Store) CircuitGate(ctx context.Context, destination, job, tenant string, probeLife time.Duration, cfg CircuitConfig) (Gate, error) {
	cfg = cfg.WithDefaults()
	err := checkCircuitArgs(destination, job)
	if err == nil {
		err = checkTenant(tenant)
	}
	if err == nil && (probeLife < time.Microsecond || probeLife > policy.MaxDuration) {
		err = invalidf("probe life %s", probeLife)
	}
	if err == nil {
		err = cfg.validate()
	}
	if err != nil {
		return Gate{}, fmt.Errorf("circuit gate of %q: %w", destination, err)
	}
	d, err := s.runCircuit(ctx, "gate", destination, job, probeLife.Microseconds(), tenant, cfg.MaxBackoff.Microseconds())
	if err != nil {
		return Gate{}, fmt.Errorf("circuit gate of %q: %w", destination, err)
	}
	g := Gate{Decision: GateDecision(d.Str(1))}
	switch g.Decision {
	case GateSend, GateProbe:
	case GateWait:
		g.Wait = redisscript.Micros(d.Int(2) - d.Int(3))
		if g.Wait <= 0 {
			d.Fail("wait %s: want > 0", g.Wait)
		}
	default:
		d.Fail("gate decision %q", g.Decision)
	}
	if err := d.Err(); err != nil {
		return Gate{}, fmt.Errorf("circuit gate of %q: %w", destination, err)
	}
	return g, nil
}

// CircuitReport is what CircuitRecord did with an outcome.
type CircuitReport struct {
	// What is counted (a failure below the threshold), opened (this
	// failure opened the circuit), reopened (the probe failed: open again,
	// the backoff doubled up to the cap), closed (the probe was answered),
	// clean (an answer while closed: the failures are forgotten) or
	// ignored (an outcome of a job sent before the circuit opened, or not
	// the current probe).
	What  string
	State CircuitState
	// Until is the backoff's end (open) or the probe's deadline
	// (half-open); zero when closed.
	Until time.Time
	// Woken counts the jobs brought back when the report closed the
	// circuit (WakeDeferred of every tenant holding some).
	Woken int
}

// CircuitRecord records the outcome of job ("<id>:<gen>") sent to
// destination: failed for a timeout or a connection failure, false for any
// HTTP answer. See CircuitReport.What for its effects; cfg says when a
// circuit opens and how long. When the report closes the circuit, the
// jobs it held long come back now (WakeDeferred of each tenant); an error
// there is returned with the report.
func (s *Store) CircuitRecord(ctx context.Context, destination, job string, failed bool, cfg CircuitConfig) (CircuitReport, error) {
	cfg = cfg.WithDefaults()
	err := checkCircuitArgs(destination, job)
	if err == nil {
		err = cfg.validate()
	}
	if err != nil {
		return CircuitReport{}, fmt.Errorf("circuit report of %q: %w", destination, err)
	}
	d, err := s.runCircuit(ctx, "report", destination, job, boolInt(failed), cfg.Failures,
		cfg.Backoff.Microseconds(), cfg.MaxBackoff.Microseconds())
	if err != nil {
		return CircuitReport{}, fmt.Errorf("circuit report of %q: %w", destination, err)
	}
	r := CircuitReport{What: d.Str(1), State: circuitState(d, d.Int(2))}
	if u := d.Int(3); u > 0 {
		r.Until = redisscript.MicrosTime(u)
	}
	tenants := make([]string, 0, max(d.Len()-4, 0))
	for i := 4; i < d.Len(); i++ {
		tenants = append(tenants, d.Str(i))
	}
	if err := d.Err(); err != nil {
		return CircuitReport{}, fmt.Errorf("circuit report of %q: %w", destination, err)
	}
	r.Woken, err = s.wakeAll(ctx, tenants, destination)
	return r, err
}

// wakeAll runs WakeDeferred for each tenant; the first error is returned
// (the others still run), with the jobs brought back.
func (s *Store) wakeAll(ctx context.Context, tenants []string, destination string) (int, error) {
	var n int
	var first error
	for _, tn := range tenants {
		k, err := s.WakeDeferred(ctx, tn, destination)
		n += k
		if first == nil {
			first = err
		}
	}
	return n, first
}

// WakeDeferred brings tenant's jobs deferred for destination back now (the
// circuit closed): each still waiting for it in the delayed set is due now
// (lua/circuit_wake.lua), and the next pass puts it at the head of its
// lane. It returns how many.
func (s *Store) WakeDeferred(ctx context.Context, tenant, destination string) (int, error) {
	err := checkTenant(tenant)
	if err == nil {
		err = checkCircuitArgs(destination, "-")
	}
	if err != nil {
		return 0, fmt.Errorf("wake the jobs of %q for %q: %w", tenant, destination, err)
	}
	d, err := s.run(ctx, scriptCircuitWake, s.keys.shardOf(tenant), tenant, destination)
	if err != nil {
		return 0, fmt.Errorf("wake the jobs of %q for %q: %w", tenant, destination, err)
	}
	n := d.int(1)
	if err := d.Err(); err != nil {
		return 0, fmt.Errorf("wake the jobs of %q for %q: %w", tenant, destination, err)
	}
	return int(n), nil
}

// Circuits lists the destinations whose circuit is open, half-open or
// closed with failures counted, by destination, and Redis's now. Closed
// entries unchanged for an hour are dropped on the way.
func (s *Store) Circuits(ctx context.Context) ([]Circuit, time.Time, error) {
	d, err := s.runner.RunStatus(ctx, scriptCircuit, []string{s.keys.circuits()}, s.nowArg(), "list")
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("list circuits: %w", err)
	}
	now := redisscript.MicrosTime(d.Int(1))
	out := make([]Circuit, 0, (d.Len()-2)/2)
	for dest, v := range d.Fields(2) {
		c, ok := parseCircuit(dest, v)
		if !ok {
			d.Fail("circuit %q: %q", dest, v)
			break
		}
		out = append(out, c)
	}
	if err := d.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("list circuits: %w", err)
	}
	slices.SortFunc(out, func(a, b Circuit) int { return strings.Compare(a.Destination, b.Destination) })
	return out, now, nil
}

// CloseCircuit closes destination's circuit by hand (its failures
// forgotten); false when it had none. The jobs it held long come back now
// (WakeDeferred); the scouts at their due times.
func (s *Store) CloseCircuit(ctx context.Context, destination string) (bool, error) {
	if err := checkCircuitArgs(destination, "-"); err != nil {
		return false, fmt.Errorf("close circuit %q: %w", destination, err)
	}
	d, err := s.runCircuit(ctx, "close", destination)
	if err != nil {
		return false, fmt.Errorf("close circuit %q: %w", destination, err)
	}
	n := d.Int(1)
	tenants := make([]string, 0, max(d.Len()-2, 0))
	for i := 2; i < d.Len(); i++ {
		tenants = append(tenants, d.Str(i))
	}
	if err := d.Err(); err != nil {
		return false, fmt.Errorf("close circuit %q: %w", destination, err)
	}
	if _, err := s.wakeAll(ctx, tenants, destination); err != nil {
		return n == 1, fmt.Errorf("close circuit %q: %w", destination, err)
	}
	return n == 1, nil
}

// TenantCircuit is a destination a tenant's jobs wait for: the due time
// of the last job of the tenant a circuit deferred to it.
type TenantCircuit struct {
	Destination string
	Until       time.Time
}

// TenantCircuits lists the destinations tenant has jobs deferred for that
// are still due after now (the key <p>:{sN}:t:<tenant>:circ finish.lua
// writes), by destination.
func (s *Store) TenantCircuits(ctx context.Context, tenant string, now time.Time) ([]TenantCircuit, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, fmt.Errorf("circuits of tenant %q: %w", tenant, err)
	}
	h, err := s.rdb.HGetAll(ctx, s.keys.tenantCircuits(tenant)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("circuits of tenant %q: %w", tenant, err)
	}
	out := []TenantCircuit{}
	for dest, v := range h {
		us, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("circuits of tenant %q: %w: %q → %q", tenant, ErrProtocol, dest, v)
		}
		if at := redisscript.MicrosTime(us); at.After(now) {
			out = append(out, TenantCircuit{Destination: dest, Until: at})
		}
	}
	slices.SortFunc(out, func(a, b TenantCircuit) int { return strings.Compare(a.Destination, b.Destination) })
	return out, nil
}

// runCircuit runs circuit.lua's op on destination with args after it.
func (s *Store) runCircuit(ctx context.Context, op, destination string, args ...any) (redisscript.Decoder, error) {
	return s.runner.RunStatus(ctx, scriptCircuit, []string{s.keys.circuits(), s.keys.circuitWaiters(destination)},
		append([]any{s.nowArg(), op, destination}, args...)...)
}

func checkCircuitArgs(destination, job string) error {
	switch {
	case destination == "" || len(destination) > MaxDestinationLen:
		return invalidf("destination %q: want 1 … %d bytes", destination, MaxDestinationLen)
	case job == "" || strings.ContainsAny(job, " \t\n"):
		return invalidf("job %q: want <id>:<gen>", job)
	}
	return nil
}

func circuitState(d redisscript.Decoder, st int64) CircuitState {
	switch st {
	case 0:
		return CircuitClosed
	case 1:
		return CircuitOpen
	case 2:
		return CircuitHalfOpen
	}
	d.Fail("circuit state %d", st)
	return ""
}

// parseCircuit reads a stored circuit (lua/circuit.lua's layout).
func parseCircuit(dest, v string) (Circuit, bool) {
	f := strings.Fields(v)
	if len(f) != 9 {
		return Circuit{}, false
	}
	var n [6]int64
	for i := range n {
		x, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || x < 0 {
			return Circuit{}, false
		}
		n[i] = x
	}
	c := Circuit{Destination: dest, Failures: int(n[0]), Backoff: redisscript.Micros(n[3]), Changed: redisscript.MicrosTime(n[5])}
	switch n[1] {
	case 0:
		c.State, c.Backoff = CircuitClosed, 0
	case 1:
		c.State, c.Until = CircuitOpen, redisscript.MicrosTime(n[2])
	case 2:
		c.State, c.Until = CircuitHalfOpen, redisscript.MicrosTime(n[4])
	default:
		return Circuit{}, false
	}
	return c, true
}
