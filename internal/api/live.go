package api

import (
	"container/list"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/store"
)

// Bounds of GET /v1/tenants/{tenant}/live.
const (
	// LiveStepDefault is Options.LiveStep: the shortest time between two
	// reads of a tenant's state; every poller of the tenant within it is
	// answered from the last read.
	LiveStepDefault = time.Second
	// LiveWindow is how far back a tenant's series reaches.
	LiveWindow = 15 * time.Minute
	// LiveMaxTenants is how many tenants' series the server holds; the one
	// polled least recently makes room for another.
	LiveMaxTenants = 256
	// liveMaxGap is the longest time between two reads one point spans: a
	// longer gap (no one polled) starts the series' rate afresh.
	liveMaxGap = time.Minute
)

// liveView answers GET /v1/tenants/{tenant}/live.
type liveView struct {
	Tenant tenantView `json:"tenant"`
	// Points are the series' points after `since`, oldest first, at most
	// LiveWindow back.
	Points []livePoint `json:"points"`
	// RecentAttempts are the tenant's last attempts (store.RecentAttempts,
	// at most store.RecentMax), newest first, as of the last read.
	RecentAttempts []recentAttempt `json:"recent_attempts"`
}

// recentAttempt is one of a tenant's recent attempts.
type recentAttempt struct {
	JobID string `json:"job_id"`
	// Outcome is success, retry, throttled, permanent or gone.
	Outcome string `json:"outcome"`
	// Status is the HTTP status, 0 when none.
	Status    int     `json:"status"`
	LatencyMS float64 `json:"latency_ms"`
	// AtMS is when the finish was recorded, Unix milliseconds.
	AtMS int64 `json:"at"`
}

func recentOf(rs []store.RecentAttempt) []recentAttempt {
	out := make([]recentAttempt, 0, len(rs))
	for _, r := range rs {
		out = append(out, recentAttempt{JobID: r.JobID, Outcome: r.Outcome, Status: r.Status,
			LatencyMS: float64(r.Latency.Microseconds()) / 1000, AtMS: r.At.UnixMilli()})
	}
	return out
}

// livePoint is one step of a tenant's series.
type livePoint struct {
	// AtMS is the read's Redis time, Unix milliseconds.
	AtMS int64 `json:"t"`
	// DeliveredPerS is the jobs that left the backlog per second since the
	// point before (delivered, dead-lettered or canceled): the tokens
	// admitted (store.TenantState.AdmittedSince) minus the backlog's growth,
	// over the time between the reads — exact for jobs of cost 1.
	DeliveredPerS float64 `json:"delivered_per_s"`
	// Rate is the policy's rate, EffectiveRate the rate after the adaptive
	// factor (as in the tenant view; a pause does not change it), tokens per
	// second.
	Rate          float64 `json:"rate"`
	EffectiveRate float64 `json:"effective_rate"`
	Backlog       int64   `json:"backlog"`
}

// liveSeries is one tenant's series and its last read.
type liveSeries struct {
	tenant string
	mu     sync.Mutex
	last   store.TenantState
	recent []recentAttempt       // as of last
	open   []openDestinationView // as of last
	read   time.Time             // local time of last; zero before the first read
	points []livePoint
	elem   *list.Element
}

// liveSet holds the series of the tenants polled lately (LRU bounded).
type liveSet struct {
	mu     sync.Mutex
	byName map[string]*liveSeries
	order  list.List // front: polled most recently
}

// series returns tenant's series, making room for it when new.
func (l *liveSet) series(tenant string) *liveSeries {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byName == nil {
		l.byName = map[string]*liveSeries{}
	}
	if s := l.byName[tenant]; s != nil {
		l.order.MoveToFront(s.elem)
		return s
	}
	if len(l.byName) >= LiveMaxTenants {
		old := l.order.Remove(l.order.Back()).(*liveSeries)
		delete(l.byName, old.tenant)
	}
	s := &liveSeries{tenant: tenant}
	s.elem = l.order.PushFront(s)
	l.byName[tenant] = s
	return s
}

// live is GET /v1/tenants/{tenant}/live?since= (any key allowed the
// tenant; read-only): the tenant view and the points of its series after
// since (Unix ms; absent: all, up to LiveWindow), and its recent attempts.
// The tenant's state and recent attempts are read at most once per
// Options.LiveStep however many poll, and each read adds a point.
// The series lives in this process: another throttler holds its own.
func (s *Server) live(r *http.Request, c *call) (int, any, error) {
	tenant, err := tenantOf(r, c)
	if err != nil {
		return 0, nil, err
	}
	var since int64
	if v := r.URL.Query().Get("since"); v != "" {
		if since, err = strconv.ParseInt(v, 10, 64); err != nil || since < 0 {
			return 0, nil, errorf(http.StatusBadRequest, CodeMalformed, "since: want Unix milliseconds, got %q", v)
		}
	}
	ls := s.lives.series(tenant)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.read.IsZero() || time.Since(ls.read) >= s.opts.LiveStep {
		st, err := s.opts.Store.TenantState(r.Context(), tenant)
		if err != nil {
			return 0, nil, s.storeError(r, "tenant_state", err)
		}
		recent, err := s.opts.Store.RecentAttempts(r.Context(), tenant)
		if err != nil {
			return 0, nil, s.storeError(r, "recent_attempts", err)
		}
		open, err := s.openDestinations(r, tenant, st.Now)
		if err != nil {
			return 0, nil, s.storeError(r, "tenant_state", err)
		}
		ls.add(st)
		ls.recent, ls.open = recentOf(recent), open
	}
	out := liveView{Tenant: tenantViewOf(ls.last), Points: []livePoint{}, RecentAttempts: ls.recent}
	open := ls.open // a copy: the answer is written after ls.mu is released
	out.Tenant.OpenDestinations = &open
	for _, p := range ls.points {
		if p.AtMS > since {
			out.Points = append(out.Points, p)
		}
	}
	return http.StatusOK, out, nil
}

// add records a read: a point when the read before is at most liveMaxGap
// older, then drops the points older than LiveWindow.
func (ls *liveSeries) add(st store.TenantState) {
	prev, hadPrev := ls.last, !ls.read.IsZero()
	ls.last, ls.read = st, time.Now()
	dt := st.Now.Sub(prev.Now)
	if !hadPrev || dt <= 0 || dt > liveMaxGap {
		return
	}
	left := max(0, st.AdmittedSince(prev)-(st.Backlog-prev.Backlog))
	p := livePoint{AtMS: st.Now.UnixMilli(), DeliveredPerS: float64(left) / dt.Seconds(),
		EffectiveRate: st.EffectiveRate(), Backlog: st.Backlog}
	if st.Policy.RateUS > 0 {
		p.Rate = 1e6 / float64(st.Policy.RateUS)
	}
	cut := st.Now.Add(-LiveWindow).UnixMilli()
	keep := 0
	for keep < len(ls.points) && ls.points[keep].AtMS < cut {
		keep++
	}
	ls.points = append(ls.points[keep:], p)
}
