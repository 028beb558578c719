package config

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/tuning"
	"github.com/sluicehq/sluice/internal/upstream"
)

// validate reports every problem with c (after WithDefaults) at once, each a
// *policy.FieldError named by its path in the file.
func (c *Config) validate() error {
	var p problems
	validateListen(&p, c.Listen)
	c.Redis.validate(&p)
	c.Auth.validate(&p, c.Limits)
	validatePolicies(&p, c.Defaults, c.Tenants)
	validateUpstreams(&p, c.Upstreams)
	validateLimits(&p, c.Limits)
	c.Dispatch.validate(&p, c.Worker.TaskCheckInterval)
	c.Throttle.validate(&p)
	c.Circuit.validate(&p)
	c.Retention.validate(&p)
	c.LimitsBytes.validate(&p)
	validateTaskQueues(&p, c.TaskQueues)
	if _, err := c.Egress.Prefixes(); err != nil {
		p.errs = append(p.errs, err)
	}
	c.Worker.validate(&p)
	c.Log.validate(&p)
	c.Secrets.validate(&p, len(c.Defaults.WebhookSecrets))
	c.Metrics.validate(&p)
	validateMetaUnits(&p, c)
	return errors.Join(p.errs...)
}

// validateMetaUnits refuses a positive duration of the meta hash below 1µs:
// the hash stores whole microseconds, so it would be stored as 0 — a setting
// left out (every process then uses its own) or a lead ParseMeta refuses.
func validateMetaUnits(p *problems, c *Config) {
	for _, f := range []struct {
		path string
		d    time.Duration
	}{
		{"dispatch.lead", c.Dispatch.Lead}, {"dispatch.min_lead", c.Dispatch.MinLead},
		{"dispatch.tolerance", c.Dispatch.Tolerance}, {"dispatch.grace", c.Dispatch.Grace},
		{"retention.succeeded", c.Retention.Succeeded}, {"retention.canceled", c.Retention.Canceled},
		{"retention.dead", c.Retention.Dead}, {"retention.idempotency", c.Retention.Idempotency},
		{"throttle.default_pause", c.Throttle.DefaultPause}, {"throttle.max_pause", c.Throttle.MaxPause},
		{"circuit.backoff", c.Circuit.Backoff}, {"circuit.max_backoff", c.Circuit.MaxBackoff},
	} {
		if f.d > 0 && f.d < time.Microsecond {
			p.add(f.path, "must be at least 1µs (Redis holds it in whole microseconds), got %s", dur(f.d))
		}
	}
}

// problems collects *policy.FieldError values.
type problems struct{ errs []error }

func (p *problems) add(path, format string, args ...any) {
	p.errs = append(p.errs, &policy.FieldError{Field: path, Err: fmt.Errorf(format, args...)})
}

// addErr adds err's problems under path (see policy.WithPrefix).
func (p *problems) addErr(path string, err error) {
	if err != nil {
		p.errs = append(p.errs, policy.WithPrefix(path, err))
	}
}

func (p *problems) positive(path string, d time.Duration) {
	if d <= 0 {
		p.add(path, "must be positive, got %s", dur(d))
	}
}

func (p *problems) atLeast(path string, v, lo int) {
	if v < lo {
		p.add(path, "must be at least %d, got %d", lo, v)
	}
}

// dur formats d the way the file writes it ("1h", not "1h0m0s").
func dur(d time.Duration) string { return policy.Duration(d).String() }

// validName reports whether s is 1–64 characters of [A-Za-z0-9_.-].
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}

const nameRule = "must be 1–64 characters of [A-Za-z0-9_.-]"

// pathKey is a map key as a path element: as is when it is a plain name,
// quoted otherwise.
func pathKey(k string) string {
	if validName(k) || policy.ValidTenantID(k) == nil {
		return k
	}
	return strconv.Quote(k)
}

func validateListen(p *problems, addr string) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		p.add("listen", "must be host:port, got %q", addr)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > math.MaxUint16 {
		p.add("listen", "port %q is not a number from 0 to 65535", port)
	}
}

func (r RedisConfig) validate(p *problems) {
	hostPorts(p, "redis.addrs", r.Addrs)
	hostPorts(p, "redis.sentinel.addrs", r.Sentinel.Addrs)
	if !r.twoDeployments(p) { // else the URL is read as the wrong kind
		if err := r.checkURL(); err != nil {
			p.add("redis.url", "%w", err)
		}
	}
	if r.Sentinel.set() && r.Sentinel.MasterName == "" {
		p.add("redis.sentinel.master_name", "must be set with redis.sentinel.addrs")
	}
	if r.Sentinel.set() && len(r.Sentinel.Addrs) == 0 {
		p.add("redis.sentinel.addrs", "must list at least one sentinel host:port")
	}
	if !validName(r.Prefix) {
		p.add("redis.prefix", "%s, got %q", nameRule, r.Prefix)
	}
	if r.Shards < 1 || r.Shards > tuning.MaxShards {
		p.add("redis.shards", "must be from 1 to %d, got %d", tuning.MaxShards, r.Shards)
	}
	if r.RequestTimeout <= 0 || r.RequestTimeout > MaxRequestTimeout {
		p.add("redis.request_timeout", "must be positive and at most %s, got %s", dur(MaxRequestTimeout), dur(r.RequestTimeout))
	}
	r.validateWait(p)
	if hw := r.HighWater(); hw < 0 || hw >= 1 || math.IsNaN(hw) {
		p.add("redis.memory_high_water", "must be 0 (off) or above 0 and below 1 (a share of maxmemory), got %v", hw)
	}
}

// validateWait checks redis.wait_replicas and redis.wait_timeout.
func (r RedisConfig) validateWait(p *problems) {
	if r.WaitReplicas < 0 || r.WaitReplicas > tuning.MaxWaitReplicas {
		p.add("redis.wait_replicas", "must be from 0 to %d, got %d", tuning.MaxWaitReplicas, r.WaitReplicas)
	}
	if r.WaitTimeout < time.Millisecond || r.WaitTimeout > tuning.MaxWaitTimeout {
		p.add("redis.wait_timeout", "must be from 1ms to %s, got %s", dur(tuning.MaxWaitTimeout), dur(r.WaitTimeout))
	} else if r.RequestTimeout > 0 && r.WaitTimeout >= r.RequestTimeout {
		p.add("redis.wait_timeout", "must be below redis.request_timeout (%s: the enqueue and its WAIT share it), got %s", dur(r.RequestTimeout), dur(r.WaitTimeout))
	}
}

// twoDeployments adds a problem, and reports true, when r names two
// deployments (Sentinel and Cluster) or names one in two places.
func (r RedisConfig) twoDeployments(p *problems) bool {
	_, form := urlForm(r.URL)
	cluster := len(r.Addrs) > 0 || r.Cluster
	switch {
	case r.Sentinel.set() && cluster:
		p.add("redis.sentinel", "set with redis.addrs or redis.cluster: Sentinel and Cluster exclude each other")
	case r.Sentinel.set() && form != RedisSingle:
		p.add("redis.sentinel", "set with a redis+%s:// redis.url: give the deployment in one place", form)
	case form == RedisSentinel && cluster:
		p.add("redis.url", "a redis+sentinel:// URL with redis.addrs or redis.cluster set: Sentinel and Cluster exclude each other")
	case form == RedisCluster && len(r.Addrs) > 0:
		p.add("redis.addrs", "set with a redis+cluster:// redis.url: give the seeds in one place")
	default:
		return false
	}
	return true
}

// hostPorts adds a problem for each address of addrs that is not host:port.
func hostPorts(p *problems, path string, addrs []string) {
	for i, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			p.add(fmt.Sprintf("%s[%d]", path, i), "must be host:port, got %q", a)
		}
	}
}

// validatePolicies checks each set field of the defaults and of every
// tenant's overrides, then, where those pass, the merged policies (which
// catches a min_backoff from one layer above a max_backoff from another).
func validatePolicies(p *problems, defaults policy.Overrides, tenants map[string]policy.Overrides) {
	defaultsOK := defaults.Validate() == nil
	p.addErr("defaults", defaults.Validate())
	if defaultsOK {
		p.addErr("defaults", policy.Resolve(defaults).Validate())
	}
	for _, id := range slices.Sorted(maps.Keys(tenants)) {
		path := "tenants." + pathKey(id)
		if err := policy.ValidTenantID(id); err != nil {
			p.add(path, "%w", err)
		}
		o := tenants[id]
		if err := o.Validate(); err != nil {
			p.addErr(path, err)
			continue
		}
		if defaultsOK {
			p.addErr(path, policy.Resolve(defaults, o).Validate())
		}
	}
}

// validateUpstreams checks every upstream's name and configuration
// (defaults applied).
func validateUpstreams(p *problems, ups map[string]upstream.Config) {
	for _, name := range slices.Sorted(maps.Keys(ups)) {
		path := "upstreams." + pathKey(name)
		if err := upstream.ValidName(name); err != nil {
			p.add(path, "%w", err)
		}
		if err, ok := ups[name].WithDefaults().Validate().(interface{ Unwrap() []error }); ok {
			for _, e := range err.Unwrap() {
				var fe *upstream.FieldError
				if errors.As(e, &fe) {
					p.add(path+"."+fe.Field, "%w", fe.Err)
				}
			}
		}
	}
}

func (d DispatchConfig) validate(p *problems, taskCheckInterval time.Duration) {
	p.positive("dispatch.lead", d.Lead)
	p.positive("dispatch.min_lead", d.MinLead)
	p.positive("dispatch.tolerance", d.Tolerance)
	p.positive("dispatch.grace", d.Grace)
	if d.MinLead > 0 && d.Lead > 0 && d.Lead < 2*d.MinLead {
		p.add("dispatch.lead", "must be at least 2 × dispatch.min_lead (%s), got %s", dur(2*d.MinLead), dur(d.Lead))
	}
	if taskCheckInterval > 0 && d.MinLead > 0 && d.MinLead < taskCheckInterval*3/2 {
		p.add("dispatch.min_lead", "must be at least 1.5 × worker.task_check_interval (%s), got %s", dur(taskCheckInterval*3/2), dur(d.MinLead))
	}
	if d.Tolerance > 0 && d.Grace > 0 && d.Grace < d.Tolerance {
		p.add("dispatch.grace", "must be at least dispatch.tolerance (%s), got %s", dur(d.Tolerance), dur(d.Grace))
	}
	p.atLeast("dispatch.max_promotions", d.MaxPromotions, 1)
	p.atLeast("dispatch.max_tenants", d.MaxTenants, 1)
	if d.BatchMax < 1 || d.BatchMax > tuning.BatchMaxLimit {
		p.add("dispatch.batch_max", "must be 1 … %d, got %d", tuning.BatchMaxLimit, d.BatchMax)
	}
	p.positive("dispatch.batch_span", d.BatchSpan)
	p.positive("dispatch.max_sleep", d.MaxSleep)
	if d.Planner != PlannerLua && d.Planner != PlannerGo {
		p.add("dispatch.planner", "must be %q or %q, got %q", PlannerLua, PlannerGo, d.Planner)
	}
}

func (t ThrottleConfig) validate(p *problems) {
	p.positive("throttle.default_pause", t.DefaultPause)
	p.positive("throttle.max_pause", t.MaxPause)
	if t.DefaultPause > 0 && t.MaxPause > 0 && t.MaxPause < t.DefaultPause {
		p.add("throttle.max_pause", "must be at least throttle.default_pause (%s), got %s", dur(t.DefaultPause), dur(t.MaxPause))
	}
	if !(t.AdaptiveFloor > 0 && t.AdaptiveFloor <= 1) {
		p.add("throttle.adaptive_floor", "must be above 0 and at most 1, got %v", t.AdaptiveFloor)
	}
}

func (c CircuitConfig) validate(p *problems) {
	if c.Failures < 1 || c.Failures > tuning.MaxCircuitFailures {
		p.add("circuit.failures", "must be 1 … %d, got %d", tuning.MaxCircuitFailures, c.Failures)
	}
	p.positive("circuit.backoff", c.Backoff)
	p.positive("circuit.max_backoff", c.MaxBackoff)
	if c.Backoff > 0 && c.MaxBackoff > 0 && c.MaxBackoff < c.Backoff {
		p.add("circuit.max_backoff", "must be at least circuit.backoff (%s), got %s", dur(c.Backoff), dur(c.MaxBackoff))
	}
	if c.MaxBackoff > policy.MaxDuration {
		p.add("circuit.max_backoff", "must be at most %s, got %s", dur(policy.MaxDuration), dur(c.MaxBackoff))
	}
}

func (r RetentionConfig) validate(p *problems) {
	p.positive("retention.succeeded", r.Succeeded)
	p.positive("retention.canceled", r.Canceled)
	p.positive("retention.dead", r.Dead)
	p.atLeast("retention.dead_max_per_tenant", r.DeadMaxPerTenant, 1)
	p.atLeast("retention.attempt_log", r.AttemptLog, 1)
	p.positive("retention.idempotency", r.Idempotency)
}

func (l LimitsBytesConfig) validate(p *problems) {
	if l.MaxJobBytes <= 0 {
		p.add("limits_bytes.max_job_bytes", "must be positive, got %d", int64(l.MaxJobBytes))
	}
	if l.MaxBatchBytes <= 0 {
		p.add("limits_bytes.max_batch_bytes", "must be positive, got %d", int64(l.MaxBatchBytes))
	} else if l.MaxJobBytes > 0 && l.MaxBatchBytes < l.MaxJobBytes {
		p.add("limits_bytes.max_batch_bytes", "must be at least limits_bytes.max_job_bytes (%s), got %s", l.MaxJobBytes, l.MaxBatchBytes)
	}
}

func validateTaskQueues(p *problems, queues []string) {
	for i, q := range queues {
		path := fmt.Sprintf("task_queues[%d]", i)
		switch {
		case q == "":
			p.add(path, "must not be empty")
		case strings.ContainsAny(q, "{}"):
			p.add(path, "must not contain braces, got %q", q)
		}
		if j := slices.Index(queues, q); j < i {
			p.add(path, "duplicate of task_queues[%d] (%q)", j, q)
		}
	}
}

// Prefixes parses Allow into masked prefixes. The error lists every entry
// that is not a CIDR prefix (a bare address needs /32 or /128), each a
// *policy.FieldError named egress.allow[i].
func (e EgressConfig) Prefixes() ([]netip.Prefix, error) {
	var p problems
	out := make([]netip.Prefix, 0, len(e.Allow))
	for i, s := range e.Allow {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			p.add(fmt.Sprintf("egress.allow[%d]", i), "%q is not a CIDR prefix such as 10.0.0.0/8 or fd00::/8", s)
			continue
		}
		out = append(out, pfx.Masked())
	}
	if err := errors.Join(p.errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func (w WorkerConfig) validate(p *problems) {
	p.atLeast("worker.concurrency", w.Concurrency, 1)
	p.positive("worker.task_check_interval", w.TaskCheckInterval)
	p.positive("worker.shutdown_timeout", w.ShutdownTimeout)
	p.positive("worker.idle_poll", w.IdlePoll)
	if w.Fetchers < 1 || w.Fetchers > max(w.Concurrency, 1) {
		p.add("worker.fetchers", "must be between 1 and worker.concurrency (%d), got %d", w.Concurrency, w.Fetchers)
	}
}

var logLevels = map[string]slog.Level{
	"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError,
}

func (l LogConfig) validate(p *problems) {
	if l.Format != "text" && l.Format != "json" {
		p.add("log.format", "must be text or json, got %q", l.Format)
	}
	if _, ok := logLevels[l.Level]; !ok {
		p.add("log.level", "must be debug, info, warn or error, got %q", l.Level)
	}
	if _, ok := logLevels[l.Asynq]; !ok {
		p.add("log.asynq", "must be debug, info, warn or error, got %q", l.Asynq)
	}
}

// SlogLevel returns Level as a slog.Level (info for an invalid Level).
func (l LogConfig) SlogLevel() slog.Level { return logLevels[l.Level] }

// AsynqSlogLevel returns Asynq as a slog.Level: LogAsynqDefault's when
// unset, info for an invalid value.
func (l LogConfig) AsynqSlogLevel() slog.Level {
	if l.Asynq == "" {
		return logLevels[LogAsynqDefault]
	}
	return logLevels[l.Asynq]
}
