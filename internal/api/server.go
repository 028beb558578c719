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

// routeClass says what a route costs against the API's own limiter
// (Options.APICosts).
type routeClass int

const (
	classRead  routeClass = iota // a GET: APICosts.Read
	classWrite                   // any other call: APICosts.Write
	classBatch                   // a batch: APICosts.BatchItem per item
)

// ReservedLimit is the name of the API's own limiter; it cannot be checked.
const ReservedLimit = config.APILimitName

// Options configure a Server. Redis, Registry and Logger are required.
type Options struct {
	// Keys are the configuration file's API keys by the hex SHA-256 of the
	// key (config.AuthConfig.ByHash); Server.SetKeys replaces them. With a
	// Store, the keys by API (POST /v1/keys) serve too, read from Redis by
	// Start and every KeyRefresh.
	Keys map[string]config.KeyConfig
	// KeyRefresh is how often the keys by API are checked for changes and
	// their last use written; default KeyRefreshDefault. A key revoked on
	// any throttler is refused by this one within KeyRefresh plus a read.
	KeyRefresh time.Duration
	// APILimiter is the API's own limiter, keyed by API key name. Nil: none.
	APILimiter bucket.Allower
	APILimit   bucket.Limit
	// APIFailOpen lets requests through when the API limiter cannot reach
	// Redis (false: answer 503).
	APIFailOpen bool
	// APICosts are the tokens a request takes from APILimiter by route
	// class (config limits.api.costs); zero fields take their defaults
	// (config.APICosts.WithDefaults).
	APICosts config.APICosts
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
	// Reload re-reads the configuration file and applies it
	// (POST /v1/admin/reload): the changes it made, each a line without a
	// secret, or a *ReloadRefusedError listing the file's problems (422).
	// Nil: the route answers 404 not_found. The runner that reloads calls
	// Server.Reload with the new Reloadable.
	Reload func(ctx context.Context) (changes []string, err error)
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
	opts Options
	keys *keyring
	// keyRefresh keeps keys' keys by API fresh (Start, Stop).
	keyRefresh *keyRefresher
	metrics    *Metrics
	mux        *routeMux
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
	// live holds what a configuration reload replaces (Reload); read it
	// with rt.
	reloadable atomic.Pointer[Reloadable]
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
	opts.APICosts = opts.APICosts.WithDefaults()
	opts.KeyRefresh = cmp.Or(max(opts.KeyRefresh, 0), KeyRefreshDefault)
	s := &Server{
		opts:    opts,
		keys:    newKeyring(opts.Keys),
		metrics: NewMetrics(opts.Registry),
		mux:     &routeMux{ServeMux: http.NewServeMux()},
		memory:  newMemoryGuard(opts.Redis, opts.MemoryHighWater, opts.Logger),
	}
	s.reloadable.Store(&Reloadable{APILimiter: opts.APILimiter, APILimit: opts.APILimit, APIFailOpen: opts.APIFailOpen,
		APICosts: opts.APICosts, Limits: opts.Limits, Defaults: opts.Defaults, FileSigned: opts.FileSigned})
	if s.opts.Store != nil {
		s.keyRefresh = &keyRefresher{kr: s.keys, st: s.opts.Store, period: opts.KeyRefresh, log: opts.Logger}
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

// Start starts the server's background work, with a Store: the refresh of
// the API keys by API (read once before Start returns; Options.KeyRefresh)
// and the summary's warmer when Options.SummaryWarm > 0. Stop ends it.
func (s *Server) Start(ctx context.Context) error {
	if s.opts.Store != nil {
		s.keyRefresh.Start(ctx)
		s.bases.Start(ctx)
	}
	return nil
}

// Stop ends what Start started and waits for it; idempotent.
func (s *Server) Stop() {
	s.bases.Stop()
	if s.keyRefresh != nil {
		s.keyRefresh.Stop()
	}
}

// Handler returns the server's root handler.
func (s *Server) Handler() http.Handler { return s.mux }

func (s *Server) routes() {
	s.mux.Handle("GET /healthz", s.plain(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}))
	s.mux.Handle("GET /readyz", s.plain(s.readyz))
	s.mux.Handle("GET /metrics", s.plain(promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{}).ServeHTTP))
	s.mux.Handle("GET /openapi.json", s.plain(serveOpenAPI))
	s.mux.Handle("POST /v1/limits/{name}/check", s.v1(classWrite, s.check))
	if s.opts.Store != nil {
		s.mux.Handle("POST /v1/tenants/{tenant}/jobs", s.v1(classWrite, s.enqueue))
		s.mux.Handle("POST /v1/tenants/{tenant}/jobs:batch", s.v1(classBatch, s.enqueueBatch))
		s.mux.Handle("GET /v1/tenants/{tenant}/jobs", s.v1(classRead, s.listTenantJobs))
		s.mux.Handle("POST /v1/tenants/{tenant}/jobs:cancel", s.v1(classWrite, s.cancelMany))
		s.mux.Handle("GET /v1/jobs/{id}", s.v1(classRead, s.getJob))
		s.mux.Handle("DELETE /v1/jobs/{id}", s.v1(classWrite, s.cancelJob))
		s.mux.Handle("GET /v1/tenants", s.v1(classRead, s.listTenants))
		s.mux.Handle("GET /v1/tenants/{tenant}", s.v1(classRead, s.getTenant))
		s.mux.Handle("PUT /v1/tenants/{tenant}/policy", s.v1(classWrite, s.putPolicy))
		s.mux.Handle("POST /v1/tenants/{tenant}/pause", s.v1(classWrite, s.pauseTenant))
		s.mux.Handle("POST /v1/tenants/{tenant}/resume", s.v1(classWrite, s.resumeTenant))
		s.mux.Handle("GET /v1/tenants/{tenant}/dead", s.v1(classRead, s.deadLetters))
		s.mux.Handle("POST /v1/jobs/{id}/replay", s.v1(classWrite, s.replayJob))
		s.mux.Handle("POST /v1/tenants/{tenant}/secrets", s.v1(classWrite, s.createSecret))
		s.mux.Handle("GET /v1/tenants/{tenant}/secrets", s.v1(classRead, s.listSecrets))
		s.mux.Handle("DELETE /v1/tenants/{tenant}/secrets/{id}", s.v1(classWrite, s.deleteSecret))
		s.mux.Handle("POST /v1/tenants/{tenant}/dead:replay", s.v1(classWrite, s.replayDead))
		s.mux.Handle("GET /v1/summary", s.v1(classRead, s.summary))
		s.mux.Handle("GET /v1/tenants/{tenant}/live", s.v1(classRead, s.live))
		s.mux.Handle("GET /v1/upstreams", s.v1(classRead, s.listUpstreams))
		s.mux.Handle("GET /v1/upstreams/{name}", s.v1(classRead, s.getUpstream))
		s.mux.Handle("PUT /v1/upstreams/{name}", s.v1(classWrite, s.putUpstream))
		s.mux.Handle("DELETE /v1/upstreams/{name}", s.v1(classWrite, s.deleteUpstream))
		s.mux.Handle("POST /v1/upstreams/{name}/pause", s.v1(classWrite, s.pauseUpstream))
		s.mux.Handle("POST /v1/upstreams/{name}/resume", s.v1(classWrite, s.resumeUpstream))
		s.mux.Handle("GET /v1/circuits", s.v1(classRead, s.listCircuits))
		s.mux.Handle("POST /v1/circuits:close", s.v1(classWrite, s.closeCircuit))
		s.mux.Handle("POST /v1/keys", s.v1(classWrite, s.createKey))
		s.mux.Handle("GET /v1/keys", s.v1(classRead, s.listKeys))
		s.mux.Handle("DELETE /v1/keys/{name}", s.v1(classWrite, s.deleteKey))
	}
	s.mux.Handle("POST /v1/admin/reload", s.v1(classWrite, s.reload))
	s.mux.Handle(catchAll, s.v1(classRead, s.noRoute))
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
	// api is the API limiter's decision, written after the route's own;
	// charged is set once the API limiter was asked (chargeItems).
	api     *bucket.Applied
	charged bool
	s       *Server
}

// chargeItems charges a batch route's n items against the API's own
// limiter (APICosts.BatchItem each, at most the limit's capacity). A batch
// handler calls it once it has counted its items, before any other Redis
// call; one that returns without calling it is charged one item.
func (c *call) chargeItems(ctx context.Context, n int) error {
	c.charged = true
	applied, err := c.s.chargeAPI(ctx, c.key, c.s.rt().APICosts.BatchItem*int64(max(n, 1)))
	c.api = applied
	return err
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

// v1 wraps a /v1 route: authenticate, charge the API limiter what the
// route's class costs (a batch: once the handler counted its items, see
// call.chargeItems), run h, then write the rate-limit headers of every
// limit that applied and the body or error. The limiter and h share one
// Redis budget, Options.RequestTimeout (see redisBudget).
func (s *Server) v1(class routeClass, h handler) http.Handler {
	return s.plain(func(w http.ResponseWriter, r *http.Request) {
		c := &call{w: w, s: s}
		status, body, err := s.serveV1(r, c, class, h)
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

func (s *Server) serveV1(r *http.Request, c *call, class routeClass, h handler) (int, any, error) {
	key, err := s.keys.authenticate(r)
	if err != nil {
		return 0, nil, err
	}
	c.key = key
	start := time.Now()
	if class != classBatch {
		cost := s.rt().APICosts.Write
		if class == classRead {
			cost = s.rt().APICosts.Read
		}
		actx, cancel := context.WithTimeout(r.Context(), s.opts.RequestTimeout)
		c.api, err = s.chargeAPI(actx, key, cost)
		c.charged = true
		cancel()
		if err != nil {
			return 0, nil, c.withAPI(err)
		}
	}
	budget := newRedisBudget(r.Context(), s.opts.RequestTimeout-time.Since(start))
	defer budget.stop()
	status, body, err := h(r.WithContext(budget), c)
	if !c.charged { // a batch refused before it was counted: one item
		if errCharge := c.chargeItems(budget, 1); errCharge != nil {
			err = errCharge
		}
	}
	return status, body, c.withAPI(err)
}

// withAPI appends the API limiter's decision to the applied limits (the
// route's own first, then the API's) and returns err.
func (c *call) withAPI(err error) error {
	if c.api != nil {
		c.applied = append(c.applied, *c.api)
	}
	return err
}

// chargeAPI applies the API's own limiter. It returns the applied limit for
// the headers (nil when there is no limiter or it failed open) and, when the
// request may not proceed, a 429 (with the applied limit) or a 503.
func (s *Server) chargeAPI(ctx context.Context, key *config.KeyConfig, cost int64) (*bucket.Applied, error) {
	rt := s.rt()
	if rt.APILimiter == nil {
		return nil, nil
	}
	d, err := rt.APILimiter.Allow(ctx, key.Name, min(cost, rt.APILimit.Capacity()))
	if err != nil {
		s.metrics.RedisErrors.WithLabelValues("api_limit").Inc()
		if !rt.APIFailOpen {
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
	a := &bucket.Applied{Name: ReservedLimit, Limit: rt.APILimit, Decision: d}
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
