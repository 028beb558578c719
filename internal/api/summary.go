package api

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/store"
)

// Bounds of GET /v1/summary.
const (
	// SummaryCacheDefault is Options.SummaryCache: the shortest time one
	// read of the summary's base (summaryBases) and one key's summary
	// serve polls: 20 consoles polling every second cost one read. The
	// time grows to SummaryCostFactor times the last read's duration, so
	// the reads of a large deployment take at most 1/SummaryCostFactor of
	// the time.
	SummaryCacheDefault = time.Second
	SummaryCostFactor   = 20
	// AttentionMax is the most tenants the summary lists as needing
	// attention; attentionRead the most candidates it reads in full.
	AttentionMax  = 10
	attentionRead = 3 * AttentionMax
	// BusiestMax is how many of the largest backlogs the summary lists.
	BusiestMax = 5
	// DeliveriesWindow is the span the summary's deliveries per second
	// average over: the whole seconds before the read's (store.Finished).
	DeliveriesWindow = 10 * time.Second
)

// summaryView answers GET /v1/summary: the deployment's totals over the
// tenants the key may see, and the tenants that need attention first.
type summaryView struct {
	At string `json:"at"` // when it was read (Redis time)
	// Key is the calling key: its name, whether it is an admin key and the
	// tenant globs it may see (the console hides what it may not do).
	Key         keyView `json:"key"`
	Tenants     int     `json:"tenants"`
	Backlog     int64   `json:"backlog"`
	Running     int64   `json:"running"`
	DeadLetters int64   `json:"dead_letters"`
	Paused      int     `json:"paused"`
	Disabled    int     `json:"disabled"`
	// InFlight is released plus running jobs of every tenant (all keys).
	InFlight int `json:"in_flight"`
	// DeliveriesPerS is the jobs of every tenant (all keys) that ended by
	// an attempt — delivered, or dead-lettered by their last attempt — per
	// second over the DeliveriesWindow before the read, counted in Redis by
	// every finish whichever throttler or worker made it (store.Finished).
	DeliveriesPerS float64 `json:"deliveries_per_s"`
	// Workers and WorkerCapacity: the live workers and their concurrency.
	Workers        int `json:"workers"`
	WorkerCapacity int `json:"worker_capacity"`
	// Throttlers are the dispatchers holding shard leases, each with its
	// shards; Unowned lists the shards no one holds now.
	Throttlers []throttlerView `json:"throttlers"`
	Unowned    []int           `json:"unowned_shards"`
	// Attention: up to AttentionMax tenants that are disabled, paused or not
	// draining (inflow ≥ effective rate), oldest queued job first.
	Attention []tenantView `json:"attention"`
	// Busiest: the BusiestMax largest backlogs, largest first.
	Busiest []tenantView `json:"busiest"`
}

// keyView is an API key as the summary shows it (never its secret).
type keyView struct {
	Name    string   `json:"name"`
	Admin   bool     `json:"admin"`
	Tenants []string `json:"tenants"`
}

// throttlerView is one dispatcher: its lease token's first 8 hex digits.
type throttlerView struct {
	ID     string `json:"id"`
	Shards []int  `json:"shards"`
}

// summaryCache holds one computed summary per API key name.
type summaryCache struct {
	mu      sync.Mutex
	entries map[string]*summaryEntry
}

type summaryEntry struct {
	mu      sync.Mutex // held while computing: concurrent polls wait for one read
	view    summaryView
	base    *summaryBase // the base view was computed from
	expires time.Time
}

func (c *summaryCache) entry(key string) *summaryEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]*summaryEntry{}
	}
	e := c.entries[key]
	if e == nil {
		e = &summaryEntry{}
		c.entries[key] = e
	}
	return e
}

// summary is GET /v1/summary (any key; read-only): see summaryView. For a
// key that sees every tenant it is read from the shards' aggregates
// (summaryAll, summaryagg.go); for another it is computed from the shared base (summaryBases: a summary of every tenant,
// store.Tenants, the workers, the shard owners, the finished jobs) and
// the full state of up to attentionRead + BusiestMax tenants the key may
// see; one computation per key serves its polls while the base is the
// same, for Options.SummaryCache or SummaryCostFactor times its own
// duration, whichever is longer.
func (s *Server) summary(r *http.Request, c *call) (int, any, error) {
	if seesAll(c) {
		return s.summaryAll(r, c)
	}
	b, err := s.bases.get(r.Context())
	if errors.Is(err, errSummaryReading) {
		return 0, nil, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: 1,
			Message: "the summary of every tenant is being read (at this many tenants it takes longer than a request waits); retry in a second"}
	}
	if err != nil {
		var re *summaryReadError
		if errors.As(err, &re) {
			return 0, nil, s.storeError(r, re.op, re.err)
		}
		return 0, nil, s.storeError(r, "list_tenants", err)
	}
	e := s.summaries.entry(c.key.Name)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.base == b && s.bases.now().Before(e.expires) {
		return http.StatusOK, e.view, nil
	}
	start := time.Now()
	v, err := s.keySummary(r.Context(), b, c)
	if err != nil {
		return 0, nil, s.storeError(r, "tenant_state", err)
	}
	e.view, e.base = v, b
	e.expires = s.bases.now().Add(max(s.opts.SummaryCache, SummaryCostFactor*time.Since(start)))
	return http.StatusOK, v, nil
}

// summaryReadError is a failed base read: the store call (op) and its error.
type summaryReadError struct {
	op  string
	err error
}

func (e *summaryReadError) Error() string { return "read summary: " + e.op + ": " + e.err.Error() }
func (e *summaryReadError) Unwrap() error { return e.err }

// readBase reads a summary base: every tenant's summary, the jobs in
// flight, the workers, the shard owners and the finished jobs.
func (s *Server) readBase(ctx context.Context) (*summaryBase, error) {
	fail := func(op string, err error) (*summaryBase, error) { return nil, &summaryReadError{op: op, err: err} }
	all, err := s.opts.Store.Tenants(ctx)
	if err != nil {
		return fail("list_tenants", err)
	}
	b, err := s.readDeployment(ctx)
	if err != nil {
		return nil, err
	}
	b.all = all
	return b, nil
}

// readDeployment reads the deployment-wide part of a summary base: the
// jobs in flight, the workers, the shard owners and the finished jobs. A
// failure is a *summaryReadError.
func (s *Server) readDeployment(ctx context.Context) (*summaryBase, error) {
	fail := func(op string, err error) (*summaryBase, error) { return nil, &summaryReadError{op: op, err: err} }
	var b summaryBase
	var err error
	if b.inFlight, err = s.opts.Store.InFlight(ctx); err != nil {
		return fail("in_flight", err)
	}
	if b.workers, b.capacity, err = s.opts.Store.Workers(ctx); err != nil {
		return fail("workers", err)
	}
	if b.throttlers, b.unowned, err = s.throttlers(ctx); err != nil {
		return fail("shard_owners", err)
	}
	finished, err := s.opts.Store.Finished(ctx, DeliveriesWindow)
	if err != nil {
		return fail("finished", err)
	}
	b.deliveriesPerS = float64(finished) / DeliveriesWindow.Seconds()
	return &b, nil
}

// keySummary is the summary of base as the key of c sees it: the totals of
// the tenants it may see, the deployment-wide figures, and its tenants
// needing attention and largest backlogs, read in full now.
func (s *Server) keySummary(ctx context.Context, b *summaryBase, c *call) (summaryView, error) {
	all := slices.DeleteFunc(slices.Clone(b.all), func(st store.TenantSummary) bool { return !c.key.AllowsTenant(st.Tenant) })
	v := totalsOf(all)
	v.Key = keyView{Name: c.key.Name, Admin: c.key.Admin, Tenants: append([]string{}, c.key.Tenants...)}
	v.InFlight, v.Workers, v.WorkerCapacity = b.inFlight, b.workers, b.capacity
	v.Throttlers, v.Unowned, v.DeliveriesPerS = b.throttlers, b.unowned, b.deliveriesPerS
	var err error
	if v.Attention, err = s.attention(ctx, all); err != nil {
		return summaryView{}, err
	}
	if v.Busiest, err = s.busiest(ctx, all); err != nil {
		return summaryView{}, err
	}
	return v, nil
}

// totalsOf adds up the tenants' summaries.
func totalsOf(all []store.TenantSummary) summaryView {
	v := summaryView{Tenants: len(all), Throttlers: []throttlerView{}, Unowned: []int{}}
	var now time.Time
	for _, st := range all {
		v.Backlog += st.Backlog
		v.Running += st.Running
		v.DeadLetters += st.DeadLetters
		switch {
		case st.Disabled:
			v.Disabled++
		case st.Paused():
			v.Paused++
		}
		if st.Now.After(now) {
			now = st.Now
		}
	}
	if now.IsZero() {
		now = time.Now()
	}
	v.At = *timeString(now)
	return v
}

// throttlers groups the shards by the dispatcher holding their lease.
func (s *Server) throttlers(ctx context.Context) ([]throttlerView, []int, error) {
	if s.opts.ShardOwners == nil {
		return []throttlerView{}, []int{}, nil
	}
	owners, err := s.opts.ShardOwners(ctx)
	if err != nil {
		return nil, nil, err
	}
	byID, unowned := map[string][]int{}, []int{}
	for shard, id := range owners {
		if id == "" {
			unowned = append(unowned, shard)
			continue
		}
		byID[id] = append(byID[id], shard)
	}
	out := []throttlerView{}
	for id, shards := range byID {
		out = append(out, throttlerView{ID: id, Shards: shards})
	}
	slices.SortFunc(out, func(a, b throttlerView) int { return cmp.Compare(a.Shards[0], b.Shards[0]) })
	return out, unowned, nil
}

// attention reads in full the tenants that may need attention — disabled,
// paused or holding a backlog —, oldest queued job first, and keeps those
// that do (disabled, paused or not draining), at most AttentionMax.
func (s *Server) attention(ctx context.Context, all []store.TenantSummary) ([]tenantView, error) {
	cands := slices.DeleteFunc(slices.Clone(all), func(st store.TenantSummary) bool {
		return !st.Disabled && !st.Paused() && st.Backlog == 0
	})
	return s.firstViews(ctx, cands, "oldest", attentionRead, AttentionMax, func(v tenantView) bool { return v.Disabled || !v.Draining })
}

// busiest reads the BusiestMax largest backlogs in full.
func (s *Server) busiest(ctx context.Context, all []store.TenantSummary) ([]tenantView, error) {
	cands := slices.DeleteFunc(slices.Clone(all), func(st store.TenantSummary) bool { return st.Backlog == 0 })
	return s.firstViews(ctx, cands, "backlog", BusiestMax, BusiestMax, func(tenantView) bool { return true })
}

// summaryKey is t's store.TenantKey.Key for sort (a backlog, or the oldest
// queued job's creation in µs, -1 for none), so a summary sorts as the
// listing does.
func summaryKey(sort string, t store.TenantSummary) int64 {
	if sort == "backlog" {
		return t.Backlog
	}
	if t.OldestQueuedAt.IsZero() {
		return -1
	}
	return t.OldestQueuedAt.UnixMicro()
}

// firstViews sorts cands by the listing's order sort, reads up to read of
// them in full (store.TenantViews: one script per shard) and returns the
// views keep accepts, at most most.
func (s *Server) firstViews(ctx context.Context, cands []store.TenantSummary, sort string, read, most int, keep func(tenantView) bool) ([]tenantView, error) {
	pos := tenantOrders[sort]
	key := func(t store.TenantSummary) int64 { return pos(summaryKey(sort, t)) }
	slices.SortFunc(cands, func(a, b store.TenantSummary) int {
		return cmp.Or(cmp.Compare(key(a), key(b)), cmp.Compare(a.Tenant, b.Tenant))
	})
	names := make([]string, 0, min(len(cands), read))
	for _, sum := range cands[:min(len(cands), read)] {
		names = append(names, sum.Tenant)
	}
	states, err := s.opts.Store.TenantViews(ctx, names)
	if err != nil {
		return nil, err
	}
	out := []tenantView{}
	for _, st := range states {
		if v := tenantViewOf(st); keep(v) {
			out = append(out, v)
		}
		if len(out) == most {
			break
		}
	}
	return out, nil
}
