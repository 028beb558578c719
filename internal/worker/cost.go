package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// Cost correction (issue #15): a job reserves its cost at dispatch; when an
// attempt learns its actual cost — from a response header an upstream of
// the job names (its cost_header), or a task handler's sluicetask.SetCost —
// the worker sends it with the finish (wire.AttemptOutcome.ActualCost),
// which charges or refunds the difference on the tenant's schedule, and
// then applies the same difference to each upstream the job names
// (CorrectUpstreams).

// UpstreamCharger applies a cost correction of delta units to upstream
// name's schedule (an unknown upstream is a no-op). *store.Store implements
// it.
type UpstreamCharger interface {
	ChargeUpstream(ctx context.Context, name string, delta int64) error
}

var _ UpstreamCharger = (*store.Store)(nil)

// Reasons a cost header's value is ignored (label reason of
// sluice_worker_cost_headers_ignored_total).
const (
	costNotInteger = "not_integer"
	costNegative   = "negative"
	costOverflow   = "overflow"
)

// ParseCost reads a cost header's value: a decimal integer ≥ 0 (spaces
// around it allowed), at most wire.MaxActualCost. The error names why it is
// not one (it never quotes the value): not an integer, negative, overflow.
func ParseCost(v string) (int64, error) {
	s := strings.TrimSpace(v)
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(s, "-"):
		return 0, errors.New(costOverflow)
	case err != nil && errors.Is(err, strconv.ErrRange):
		return 0, errors.New(costNegative)
	case err != nil:
		return 0, errors.New(costNotInteger)
	case n < 0:
		return 0, errors.New(costNegative)
	case n > wire.MaxActualCost:
		return 0, errors.New(costOverflow)
	}
	return n, nil
}

// CostReader learns an attempt's actual cost from its response headers:
// the header named by the cost_header of the job's upstreams (from the
// settings cache it shares with the Worker: each upstream read at most once
// per UpstreamCacheTTL). Values that are not an
// integer in 0 … wire.MaxActualCost are ignored — the reserved cost stands —,
// logged (job, upstream, header and reason; never the value) and counted.
// Safe for concurrent use.
type CostReader struct {
	upstreams *quota.UpstreamCache
	logger    *slog.Logger
	ignored   *prometheus.CounterVec // by reason
}

// NewCostReader returns a CostReader over the upstream settings of ups
// (NewUpstreamCache; give the Worker the same one, Config.UpstreamCache),
// registering its counter with reg (nil: none) and logging to logger (nil:
// discarded).
func NewCostReader(ups *quota.UpstreamCache, reg prometheus.Registerer, logger *slog.Logger) (*CostReader, error) {
	c := &CostReader{upstreams: ups, logger: logger,
		ignored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_worker_cost_headers_ignored_total",
			Help: "Cost header values ignored (the reserved cost stood), by reason: not_integer, negative, overflow.",
		}, []string{"reason"})}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	for _, r := range []string{costNotInteger, costNegative, costOverflow} {
		c.ignored.WithLabelValues(r)
	}
	if reg != nil {
		if err := reg.Register(c.ignored); err != nil {
			return nil, fmt.Errorf("register cost header metrics: %w", err)
		}
	}
	return c, nil
}

// ActualCost is the actual cost job's attempt reported in h, for
// wire.AttemptOutcome.ActualCost: the value of the first of job's upstreams
// (in order) whose cost header h carries with a valid value, at least 1 (a
// reported 0 is charged as 1: every attempt sent costs at least one unit);
// 0 (unknown) when none does, when job names no upstream, or when the
// header names cannot be read now (logged).
func (c *CostReader) ActualCost(ctx context.Context, job store.ClaimedJob, h http.Header) int64 {
	if c == nil || len(job.Upstreams) == 0 || h == nil {
		return 0
	}
	settings, err := c.upstreams.Settings(ctx, job.Upstreams)
	if err != nil {
		c.logger.Warn("cost headers unavailable; the reserved cost stands", "job", job.ID, "err", err)
		return 0
	}
	for i, st := range settings {
		name := st.CostHeader
		v := h.Get(name)
		if name == "" || v == "" {
			continue
		}
		n, err := ParseCost(v)
		if err != nil {
			c.ignored.WithLabelValues(err.Error()).Inc()
			c.logger.Warn("cost header ignored; the reserved cost stands", "job", job.ID, "tenant", job.Tenant,
				"upstream", job.Upstreams[i], "header", name, "reason", err.Error(), "value_bytes", len(v))
			continue
		}
		return max(n, 1)
	}
	return 0
}

// CorrectUpstreams applies the cost correction of an attempt of job that
// reported actual (wire.AttemptOutcome.ActualCost; 0 = unknown: nothing) to
// each upstream job names: actual − job.Cost units each. Called after a
// successful (not stale) finish, so the tenant and its upstreams are
// corrected once per attempt. Errors are logged: a correction not applied
// leaves the reservation standing on that upstream.
func CorrectUpstreams(ctx context.Context, u UpstreamCharger, job store.ClaimedJob, actual int64, logger *slog.Logger) {
	if u == nil || actual <= 0 || job.Cost <= 0 || actual == job.Cost {
		return
	}
	delta := actual - job.Cost
	for _, name := range job.Upstreams {
		if err := u.ChargeUpstream(ctx, name, delta); err != nil && logger != nil {
			logger.Warn("upstream cost correction failed; its reservation stands", "job", job.ID,
				"upstream", name, "delta", delta, "err", err)
		}
	}
}
