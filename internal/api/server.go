package api

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/secretbox"
	"github.com/sluicehq/sluice/internal/store"
)

// MaxBodyBytesDefault bounds a request body when Options.MaxBodyBytes is 0.
const MaxBodyBytesDefault = 1 << 20

// Route classes and what one call costs against the API's own limiter.
const (
	CostRead  = 1 // GET routes
	CostWrite = 1 // one job, a check, a cancel
	CostBatch = 10
)

// ReservedLimit is the name of the API's own limiter; it cannot be checked.
const ReservedLimit = config.APILimitName

// Options configure a Server. Redis, Registry and Logger are required.
type Options struct {
	// Keys are the API keys by the hex SHA-256 of the key
	// (config.AuthConfig.ByHash).
	Keys map[string]config.KeyConfig
	// APILimiter is the API's own limiter, keyed by API key name. Nil: none.
	APILimiter bucket.Allower
	APILimit   bucket.Limit
	// APIFailOpen lets requests through when the API limiter cannot reach
	// Redis (false: answer 503).
	APIFailOpen bool
	// Limits are the limits served by POST /v1/limits/{name}/check.
	Limits map[string]Limit
	// Redis is pinged by /readyz. Build it with ContextTimeoutEnabled (as
	// config.RedisConfig.Client does): otherwise go-redis ignores the
	// deadlines below while waiting on a socket.
	Redis redis.UniversalClient
	// RequestTimeout bounds the time one /v1 request waits on Redis: the
	// API limiter and the route's own calls together, counted from the
	// first Redis call of each (reading the body does not count). Past it
	// the request answers 503 unavailable with Retry-After; default
	// RequestTimeoutDefault (config.RedisConfig.RequestTimeout).
	RequestTimeout time.Duration
	// ReadyTimeout bounds /readyz's PING; default ReadyTimeoutDefault.
	ReadyTimeout time.Duration
	// Registry serves /metrics and receives the API's metrics.
	Registry *prometheus.Registry
	Logger   *slog.Logger
	// MaxBodyBytes bounds a JSON body (default MaxBodyBytesDefault).
	MaxBodyBytes int64
	// Store holds tenant backlogs, jobs and policies. Nil: the job and
	// tenant routes are not served (404).
	Store *store.Store
	// TaskQueues is the allow-list of asynq queues `task` jobs may name
	// (config.Config.TaskQueues).
	TaskQueues []string
	// TaskWorkerCache is how long the answer to "does this task queue have
	// a live sluicetask middleware?" is kept per queue (a task job for a
	// queue without one gets 422 no_task_worker); default
	// TaskWorkerCacheDefault, < 0 asks Redis on every enqueue.
	TaskWorkerCache time.Duration
	// EgressAllow opens address ranges the SSRF guard refuses: a job whose
	// URL host is a literal refused address outside them gets 422 at enqueue
	// (config.EgressConfig.Prefixes).
	EgressAllow []netip.Prefix
	// Defaults are the configuration's policy defaults; a PUT of a tenant's
	// policy is validated merged over them.
	Defaults policy.Overrides
	// Secrets seals webhook secrets by API (config.SecretsConfig.Keyring).
	// Nil: the secrets routes answer 503 secrets_disabled.
	Secrets *secretbox.Keyring
	// FileSigned reports whether the configuration file gives tenant
	// webhook secrets (policy.SigningKeys); a webhook job of any other
	// tenant is refused (422 no_webhook_secret) unless it holds a live
	// secret by API or its policy says unsigned. Nil: no tenant's.
	FileSigned func(tenant string) bool
	// MaxJobBytes bounds one job's body, MaxBatchBytes a batch request's
	// body (defaults config.MaxJobBytesDefault, config.MaxBatchBytesDefault).
	MaxJobBytes, MaxBatchBytes int64
	// ShardOwners reads the dispatcher holding each shard's lease (an id
	// per shard, "" when free; dispatch.ShardOwners), for GET /v1/summary.
	// Nil: the summary lists no throttlers.
	ShardOwners func(ctx context.Context) ([]string, error)
	// SummaryCache is the shortest time one GET /v1/summary read serves a
	// key's polls; default SummaryCacheDefault.
	SummaryCache time.Duration
	// SummaryWarm, when > 0, keeps the summary's base warm (Server.Start):
	// read at least this often, and served up to twice this old while the
	// next is read in the background, so a page opened is answered from
	// memory (SummaryWarmDefault for the console). 0: off — a request that
	// finds no fresh base waits for a read.
	SummaryWarm time.Duration
	// LiveStep is the shortest time between two reads of a tenant's state
	// for GET /v1/tenants/{tenant}/live; default LiveStepDefault.
	LiveStep time.Duration
	// UpstreamCache is how long enqueue uses one read of the registered
	// upstream names and of a tenant's default upstreams; default
	// UpstreamCacheDefault. A name not among those read is looked up again
	// before a job naming it is refused.
	UpstreamCache time.Duration
	// MemoryHighWater, when > 0, refuses new jobs (507 storage_full) while
	// the Redis master of their shard uses more than this share of its
	// maxmemory (memory.go; config.RedisConfig.MemoryHighWater). 0: off.
	MemoryHighWater float64
}

// Limit is one checkable limit: the limiter and its parameters (for headers).
type Limit struct {
	Limiter bucket.Allower
	Limit   bucket.Limit
	// Shared makes every API key checking a key string use one bucket
	// (config scope shared); false (scope api_key, the default) gives each
	// API key its own (see checkKey).
	Shared bool
}

// Server is the HTTP API. It is safe for concurrent use.
type Server struct {
	opts    Options
	keys    keyring
	metrics *Metrics
	mux     *routeMux
	// apiFailing is set while the API limiter cannot reach Redis, so the
	// fail-open log line is written once per episode.
	apiFailing atomic.Bool
	// taskWorkers caches which task queues have a live middleware.
	taskWorkers *store.LiveCache
	// summaries caches GET /v1/summary per key; lives holds the series of
	// GET /v1/tenants/{tenant}/live.
	summaries summaryCache
	bases     *summaryBases
	lives     liveSet
	// upstreams and policyUpstreams serve enqueue's upstream resolution.
	upstreams       *quota.UpstreamCache
	policyUpstreams *policyUpstreams
	// memory refuses new jobs above Options.MemoryHighWater.
	memory *memoryGuard
}

// New builds the server and registers its routes and metrics.
func New(opts Options) (*Server, error) {
	if opts.Redis == nil || opts.Registry == nil || opts.Logger == nil {
		return nil, errors.New("api: Options.Redis, Registry and Logger are required")
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = MaxBodyBytesDefault
	}
	if opts.MaxJobBytes <= 0 {
		opts.MaxJobBytes = int64(config.MaxJobBytesDefault)
	}
	if opts.MaxBatchBytes <= 0 {
		opts.MaxBatchBytes = int64(config.MaxBatchBytesDefault)
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = RequestTimeoutDefault
	}
	if opts.SummaryCache <= 0 {
		opts.SummaryCache = SummaryCacheDefault
	}
	if opts.LiveStep <= 0 {
		opts.LiveStep = LiveStepDefault
	}
	if opts.UpstreamCache <= 0 {
		opts.UpstreamCache = UpstreamCacheDefault
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = ReadyTimeoutDefault
	}
	s := &Server{
		opts:    opts,
		keys:    keyring(opts.Keys),
		metrics: NewMetrics(opts.Registry),
		mux:     &routeMux{ServeMux: http.NewServeMux()},
		memory:  newMemoryGuard(opts.Redis, opts.MemoryHighWater, opts.Logger),
	}
	if s.opts.Store != nil {
		s.taskWorkers = store.NewLiveCache(s.opts.Store.TaskQueueLive, cmp.Or(opts.TaskWorkerCache, TaskWorkerCacheDefault))
		s.upstreams = newUpstreamSettings(s.opts.Store, opts.UpstreamCache)
		s.policyUpstreams = &policyUpstreams{store: s.opts.Store, ttl: opts.UpstreamCache, clock: time.Now}
	}
	s.bases = &summaryBases{read: s.readBase, fresh: opts.SummaryCache, warm: max(opts.SummaryWarm, 0),
		timeout: max(opts.RequestTimeout, SummaryReadTimeout), now: time.Now,
		failed: func(err error) { opts.Logger.Warn("summary read failed", "err", err) }}
	s.routes()
	return s, nil
}

// Start starts the server's background work: the summary's warmer when
// Options.SummaryWarm > 0 (nothing else). It returns at once; Stop ends it.
func (s *Server) Start(ctx context.Context) error {
	if s.opts.Store != nil {
		s.bases.Start(ctx)
	}
	return nil
}

// Stop ends what Start started and waits for it; idempotent.
func (s *Server) Stop() { s.bases.Stop() }

// Handler returns the server's root handler.
func (s *Server) Handler() http.Handler { return s.mux }

func (s *Server) routes() {
	s.mux.Handle("GET /healthz", s.plain(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}))
	s.mux.Handle("GET /readyz", s.plain(s.readyz))
	s.mux.Handle("GET /metrics", s.plain(promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{}).ServeHTTP))
	s.mux.Handle("GET /openapi.json", s.plain(serveOpenAPI))
	s.mux.Handle("POST /v1/limits/{name}/check", s.v1(CostWrite, s.check))
	if s.opts.Store != nil {
		s.mux.Handle("POST /v1/tenants/{tenant}/jobs", s.v1(CostWrite, s.enqueue))
		s.mux.Handle("POST /v1/tenants/{tenant}/jobs:batch", s.v1(CostBatch, s.enqueueBatch))
		s.mux.Handle("GET /v1/jobs/{id}", s.v1(CostRead, s.getJob))
		s.mux.Handle("DELETE /v1/jobs/{id}", s.v1(CostWrite, s.cancelJob))
		s.mux.Handle("GET /v1/tenants", s.v1(CostRead, s.listTenants))
		s.mux.Handle("GET /v1/tenants/{tenant}", s.v1(CostRead, s.getTenant))
		s.mux.Handle("PUT /v1/tenants/{tenant}/policy", s.v1(CostWrite, s.putPolicy))
		s.mux.Handle("POST /v1/tenants/{tenant}/pause", s.v1(CostWrite, s.pauseTenant))
		s.mux.Handle("POST /v1/tenants/{tenant}/resume", s.v1(CostWrite, s.resumeTenant))
		s.mux.Handle("GET /v1/tenants/{tenant}/dead", s.v1(CostRead, s.deadLetters))
		s.mux.Handle("POST /v1/jobs/{id}/replay", s.v1(CostWrite, s.replayJob))
		s.mux.Handle("POST /v1/tenants/{tenant}/secrets", s.v1(CostWrite, s.createSecret))
		s.mux.Handle("GET /v1/tenants/{tenant}/secrets", s.v1(CostRead, s.listSecrets))
		s.mux.Handle("DELETE /v1/tenants/{tenant}/secrets/{id}", s.v1(CostWrite, s.deleteSecret))
		s.mux.Handle("POST /v1/tenants/{tenant}/dead:replay", s.v1(CostWrite, s.replayDead))
		s.mux.Handle("GET /v1/summary", s.v1(CostRead, s.summary))
		s.mux.Handle("GET /v1/tenants/{tenant}/live", s.v1(CostRead, s.live))
		s.mux.Handle("GET /v1/upstreams", s.v1(CostRead, s.listUpstreams))
		s.mux.Handle("GET /v1/upstreams/{name}", s.v1(CostRead, s.getUpstream))
		s.mux.Handle("PUT /v1/upstreams/{name}", s.v1(CostWrite, s.putUpstream))
		s.mux.Handle("DELETE /v1/upstreams/{name}", s.v1(CostWrite, s.deleteUpstream))
		s.mux.Handle("POST /v1/upstreams/{name}/pause", s.v1(CostWrite, s.pauseUpstream))
		s.mux.Handle("POST /v1/upstreams/{name}/resume", s.v1(CostWrite, s.resumeUpstream))
	}
	s.mux.Handle(catchAll, s.v1(CostRead, s.noRoute))
}

// catchAll is the pattern of every /v1 request no route serves.
const catchAll = "/v1/"

// noRoute answers a /v1 request no route serves: 405 method_not_allowed
// with Allow when routes serve its path with other methods, else 404.
func (s *Server) noRoute(r *http.Request, c *call) (int, any, error) {
	if allow := s.mux.allowed(r); len(allow) > 0 {
		c.w.Header().Set("Allow", strings.Join(allow, ", "))
		return 0, nil, errorf(http.StatusMethodNotAllowed, CodeMethodNotAllowed,
			"%s is not served on this path; it takes %s", r.Method, strings.Join(allow, ", "))
	}
	return 0, nil, errorf(http.StatusNotFound, CodeNotFound, "no such route")
}

// readyz is GET /readyz: 200 when Redis answers PING within
// Options.ReadyTimeout — on a Cluster every master of a fresh slot map
// (one dead master makes its slots unusable, and a PING to a random node
// would flap) —, else 503 unavailable with Retry-After: 1.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.ReadyTimeout)
	defer cancel()
	if err := pingAll(ctx, s.opts.Redis); err != nil {
		s.metrics.RedisErrors.WithLabelValues("ping").Inc()
		writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "Redis is not reachable", RetryAfter: 1})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// pingAll pings rdb: every master of a Cluster (ForEachMaster reloads the
// slot map first, so a promoted replica replaces a dead master), else the
// one Redis (a Sentinel client's current primary).
func pingAll(ctx context.Context, rdb redis.UniversalClient) error {
	return redisscript.ForEachMaster(ctx, rdb, func(ctx context.Context, c redis.UniversalClient) error { return c.Ping(ctx).Err() })
}

// call is what a /v1 handler knows about its request beyond *http.Request.
type call struct {
	key     *config.KeyConfig
	applied []bucket.Applied // limits decided on the way, written as headers
	w       http.ResponseWriter
}

// handler is a /v1 route: it returns a status and a JSON body, or an error.
type handler func(r *http.Request, c *call) (int, any, error)

// plain wraps a non-/v1 route with latency metrics.
func (s *Server) plain(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		h(rec, r)
		s.metrics.Latency.WithLabelValues(r.Pattern, strconv.Itoa(rec.status)).Observe(time.Since(start).Seconds())
	})
}

// v1 wraps a /v1 route: authenticate, charge the API limiter cost tokens,
// run h, then write the rate-limit headers of every limit that applied and
// the body or error. The limiter and h share one Redis budget,
// Options.RequestTimeout (see redisBudget).
func (s *Server) v1(cost int64, h handler) http.Handler {
	return s.plain(func(w http.ResponseWriter, r *http.Request) {
		c := &call{w: w}
		status, body, err := s.serveV1(r, c, cost, h)
		bucket.WriteHeaders(w.Header(), c.applied)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				s.opts.Logger.ErrorContext(r.Context(), "request failed", "route", r.Pattern, "err", err)
			}
			writeError(w, err)
			return
		}
		writeJSON(w, status, body)
	})
}

func (s *Server) serveV1(r *http.Request, c *call, cost int64, h handler) (int, any, error) {
	key, err := s.keys.authenticate(r)
	if err != nil {
		return 0, nil, err
	}
	c.key = key
	start := time.Now()
	actx, cancel := context.WithTimeout(r.Context(), s.opts.RequestTimeout)
	apiApplied, err := s.chargeAPI(actx, key, cost)
	cancel()
	if err != nil {
		if apiApplied != nil {
			c.applied = append(c.applied, *apiApplied)
		}
		return 0, nil, err
	}
	budget := newRedisBudget(r.Context(), s.opts.RequestTimeout-time.Since(start))
	defer budget.stop()
	status, body, err := h(r.WithContext(budget), c)
	if apiApplied != nil { // the route's own limits first, then the API's
		c.applied = append(c.applied, *apiApplied)
	}
	return status, body, err
}

// chargeAPI applies the API's own limiter. It returns the applied limit for
// the headers (nil when there is no limiter or it failed open) and, when the
// request may not proceed, a 429 (with the applied limit) or a 503.
func (s *Server) chargeAPI(ctx context.Context, key *config.KeyConfig, cost int64) (*bucket.Applied, error) {
	if s.opts.APILimiter == nil {
		return nil, nil
	}
	d, err := s.opts.APILimiter.Allow(ctx, key.Name, min(cost, s.opts.APILimit.Capacity()))
	if err != nil {
		s.metrics.RedisErrors.WithLabelValues("api_limit").Inc()
		if !s.opts.APIFailOpen {
			return nil, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "rate limiter unavailable", RetryAfter: 1}
		}
		s.metrics.FailOpen.Inc()
		if !s.apiFailing.Swap(true) {
			s.opts.Logger.WarnContext(ctx, "API limiter failing open: Redis unreachable", "err", err)
		}
		return nil, nil
	}
	if s.apiFailing.Swap(false) {
		s.opts.Logger.InfoContext(ctx, "API limiter recovered")
	}
	s.metrics.Decisions.WithLabelValues(ReservedLimit, outcome(d.Allowed)).Inc()
	a := &bucket.Applied{Name: ReservedLimit, Limit: s.opts.APILimit, Decision: d}
	if !d.Allowed {
		return a, errorf(http.StatusTooManyRequests, CodeRateLimited, "API key %q exceeded the %q limit", key.Name, ReservedLimit)
	}
	return a, nil
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// routeMux is the server's ServeMux, recording each pattern registered so a
// test can compare the routes served with the OpenAPI document.
type routeMux struct {
	*http.ServeMux
	patterns []string
}

func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

// allowed lists the methods routes other than catchAll serve r's path with.
func (m *routeMux) allowed(r *http.Request) []string {
	var out []string
	for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.WithContext(r.Context()) // a shallow copy
		probe.Method = method
		if _, pattern := m.Handler(probe); pattern != "" && pattern != catchAll {
			out = append(out, method)
		}
	}
	return out
}
