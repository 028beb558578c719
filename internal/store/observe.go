package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// MaxObserveTop bounds ObserveOptions.Top and ObserveOptions.Attention.
const MaxObserveTop = 1000

// ObserveOptions selects what Observe reads besides the totals.
type ObserveOptions struct {
	// Top is how many of the largest backlogs to name, 0 … MaxObserveTop.
	Top int
	// Attention is how many disabled and how many paused tenants to name
	// per shard, 0 … MaxObserveTop.
	Attention int
	// Clean drops the pause and disable entries whose end has passed
	// (three commands a shard): a caller that reads every few seconds
	// (the state metrics) sets it; the counts are right either way.
	Clean bool
}

// TenantBacklog is a tenant and its backlog (TenantState.Backlog).
type TenantBacklog struct {
	Tenant  string
	Backlog int64
}

// Observation is the deployment's totals over every tenant, read from the
// shards' aggregates (lua/lib.lua AGG): a few commands a shard, whatever
// the tenant count.
type Observation struct {
	Now time.Time // the first shard's Redis time
	// Tenants counts the entries of the tenant indexes: the tenants with
	// state, and those whose ended jobs are still kept (lua/tenants.lua).
	Tenants int64
	// Backlog, Running and DeadLetters are the sums of every tenant's
	// TenantState.Backlog, Running and DeadLetters.
	Backlog, Running, DeadLetters int64
	// AdminPaused, UpstreamPaused and Disabled count the tenants paused by
	// an operator (indefinitely or until a time not passed), by an
	// upstream's pause not over, and disabled by a 410; Paused those
	// paused either way and not disabled (TenantSummary.Paused && !Disabled).
	AdminPaused, UpstreamPaused, Disabled, Paused int64
	// Top is the ObserveOptions.Top largest backlogs, largest first, ties
	// by tenant; when fewer tenants hold a backlog, the first tenants by
	// name that hold none follow (backlog 0), as long as there are some.
	Top []TenantBacklog
	// DisabledTenants and PausedTenants name up to ObserveOptions.Attention
	// disabled and paused (not disabled) tenants of each shard.
	DisabledTenants, PausedTenants []string
	idle                           []string // the shards' first tenants by name (observe.lua), for fill

	// Rebuilt counts the shards whose aggregates this read built first
	// (RebuildAggregates): after an upgrade from a release without them.
	Rebuilt int
}

// Observe reads the deployment's totals from every shard's aggregates, one
// script per shard (lua/observe.lua). A shard whose aggregates were never
// built — a deployment from a release before them — is built first
// (RebuildAggregates), once. Bad options wrap ErrInvalid.
func (s *Store) Observe(ctx context.Context, o ObserveOptions) (Observation, error) {
	if o.Top < 0 || o.Top > MaxObserveTop || o.Attention < 0 || o.Attention > MaxObserveTop {
		return Observation{}, fmt.Errorf("observe: %w", invalidf("top %d, attention %d: want 0 … %d", o.Top, o.Attention, MaxObserveTop))
	}
	var out Observation
	for shard := range s.keys.shards {
		sh, err := s.observeShard(ctx, shard, o)
		if err == nil && !sh.built {
			if _, err = s.rebuildShard(ctx, shard, false); err == nil {
				out.Rebuilt++
				sh, err = s.observeShard(ctx, shard, o)
			}
		}
		if err != nil {
			return Observation{}, fmt.Errorf("observe: shard %d: %w", shard, err)
		}
		if shard == 0 {
			out.Now = sh.Now
		}
		out.add(sh.Observation)
	}
	slices.SortFunc(out.Top, func(a, b TenantBacklog) int {
		return cmp.Or(cmp.Compare(b.Backlog, a.Backlog), cmp.Compare(a.Tenant, b.Tenant))
	})
	out.Top = out.Top[:min(len(out.Top), o.Top)]
	out.fill(o.Top)
	return out, nil
}

// fill completes Top up to n with the first idle tenants by name (every
// shard's backlogs are then all in Top, so a name not in it holds none).
func (o *Observation) fill(n int) {
	if len(o.Top) >= n {
		o.idle = nil
		return
	}
	in := map[string]bool{}
	for _, tb := range o.Top {
		in[tb.Tenant] = true
	}
	slices.Sort(o.idle)
	for _, tn := range slices.Compact(o.idle) {
		if len(o.Top) == n {
			break
		}
		if !in[tn] {
			o.Top = append(o.Top, TenantBacklog{Tenant: tn})
		}
	}
	o.idle = nil
}

// add adds one shard's observation to o.
func (o *Observation) add(sh Observation) {
	o.Tenants += sh.Tenants
	o.Backlog += sh.Backlog
	o.Running += sh.Running
	o.DeadLetters += sh.DeadLetters
	o.AdminPaused += sh.AdminPaused
	o.UpstreamPaused += sh.UpstreamPaused
	o.Disabled += sh.Disabled
	o.Paused += sh.Paused
	o.Top = append(o.Top, sh.Top...)
	o.DisabledTenants = append(o.DisabledTenants, sh.DisabledTenants...)
	o.PausedTenants = append(o.PausedTenants, sh.PausedTenants...)
	o.idle = append(o.idle, sh.idle...)
}

// shardObservation is one observe.lua reply.
type shardObservation struct {
	Observation
	built bool
}

func (s *Store) observeShard(ctx context.Context, shard int, o ObserveOptions) (shardObservation, error) {
	clean := 0
	if o.Clean {
		clean = 1
	}
	d, err := s.run(ctx, scriptObserve, shard, o.Top, o.Attention, clean)
	if err != nil {
		return shardObservation{}, err
	}
	open, running := d.int(3), d.int(4)
	sh := shardObservation{built: d.int(2) == 1, Observation: Observation{
		Now: redisscript.MicrosTime(d.int(1)), Backlog: open - running, Running: running,
		DeadLetters: d.int(5), Tenants: d.int(6), AdminPaused: d.int(7), UpstreamPaused: d.int(8),
		Disabled: d.int(9), Paused: d.int(10)}}
	top := d.list(11)
	for i := 0; i+1 < top.Len(); i += 2 {
		sh.Top = append(sh.Top, TenantBacklog{Tenant: top.str(i), Backlog: top.int(i + 1)})
	}
	for _, l := range []struct {
		at  int
		out *[]string
	}{{12, &sh.DisabledTenants}, {13, &sh.PausedTenants}, {14, &sh.idle}} {
		names := d.list(l.at)
		for i := range names.Len() {
			*l.out = append(*l.out, names.str(i))
		}
	}
	return sh, d.Err()
}

// RebuildAggregates builds every shard's observation aggregates anew from
// its tenants (lua/observe_rebuild.lua): what Observe does by itself for a
// shard never built. Its cost is the deployment's tenants — a few commands
// each — spread over calls of RebuildChunk tenants each (~40 ms on a
// 2-core machine), so Redis serves everything else between them; the
// aggregates stay exact throughout (the scripts leave a tenant's changes
// to the walk until it has counted it) and read as not built until the
// walk ends. A repair, not a routine read: for aggregates a process of a
// release before them changed (a rolling upgrade), which nothing else
// notices.
func (s *Store) RebuildAggregates(ctx context.Context) error {
	for shard := range s.keys.shards {
		if _, err := s.rebuildShard(ctx, shard, true); err != nil {
			return fmt.Errorf("rebuild the aggregates: shard %d: %w", shard, err)
		}
	}
	return nil
}

// RebuildChunk is how many tenants one call of an aggregates build counts.
const RebuildChunk = 1000

// BuildAggregates builds the observation aggregates of every shard that
// has none yet (RebuildAggregates' script, unforced; a build another
// process left unfinished goes on) and returns how many it built:
// cmd/throttler runs it at start, after the tenant index's backfill, so
// that the first read of a deployment from before them does not wait for
// it (Observe would build them too). A shard with no tenants costs a few
// commands.
func (s *Store) BuildAggregates(ctx context.Context) (built int, err error) {
	for shard := range s.keys.shards {
		did, err := s.rebuildShard(ctx, shard, false)
		if err != nil {
			return built, fmt.Errorf("build the aggregates: shard %d: %w", shard, err)
		}
		if did {
			built++
		}
	}
	return built, nil
}

// rebuildShard builds shard's aggregates (anew with force, else only when
// not built), RebuildChunk tenants a call, until the build ends; built is
// whether a call of it ended one.
func (s *Store) rebuildShard(ctx context.Context, shard int, force bool) (built bool, err error) {
	f := "1"
	if !force {
		f = "0"
	}
	for {
		d, err := s.run(ctx, scriptObserveRebuild, shard, f, RebuildChunk)
		if err == nil {
			err = d.Err()
		}
		if err != nil {
			return false, err
		}
		switch d.int(3) {
		case 0:
			return false, nil
		case 1:
			return true, nil
		}
		f = "0" // the build goes on
	}
}
