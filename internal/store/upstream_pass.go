package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/redisscript"
)

// A shard's side of shared upstreams (issue #15): the pass takes the
// coordinator's grants (internal/quota) as arguments and reports the demand
// it found without room; the shard's lanes say which tenants wait on an
// upstream. No script here touches an upstream's slot.

// UpstreamRuntimeTenantsPerShard bounds the tenants UpstreamWaiting reads
// per shard.
const UpstreamRuntimeTenantsPerShard = 100

// UpstreamWaiting reads the jobs waiting on upstream name in the shards'
// lanes, by tenant — one bounded script per shard
// (lua/upstream_waiting.lua): at most UpstreamRuntimeTenantsPerShard
// tenants per shard, truncated reporting a shard that held more. It is the
// upstream registry's Config.Waiting (quota.Registry.UpstreamRuntime,
// DeleteUpstream).
func (s *Store) UpstreamWaiting(ctx context.Context, name string) (map[string]int64, bool, error) {
	if err := quota.CheckName(name); err != nil {
		return nil, false, fmt.Errorf("read upstream waiting: %w", err)
	}
	byTenant, truncated := map[string]int64{}, false
	for shard := range s.keys.shards {
		d, err := s.run(ctx, scriptUpstreamWaiting, shard, name, UpstreamRuntimeTenantsPerShard)
		if err != nil {
			return nil, false, fmt.Errorf("read upstream %q waiting on shard %d: %w", name, shard, err)
		}
		truncated = truncated || d.int(1) == 1
		for i := 2; i+1 < d.Len(); i += 2 {
			if n := d.int(i + 1); n > 0 {
				byTenant[d.str(i)] += n
			}
		}
		if err := d.Err(); err != nil {
			return nil, false, fmt.Errorf("read upstream %q waiting on shard %d: %w", name, shard, err)
		}
	}
	return byTenant, truncated, nil
}

// grantArgs are pass.lua's ARGV[14…] for grants: m, then 7 values each
// (the last: an aligned grant's set, ” for a plain one).
func grantArgs(grants []quota.UpstreamGrant) []any {
	args := make([]any, 0, 1+7*len(grants))
	args = append(args, len(grants))
	for _, g := range grants {
		var segs strings.Builder
		for i, sg := range g.Segments {
			if i > 0 {
				segs.WriteByte(' ')
			}
			fmt.Fprintf(&segs, "%d %d", sg.T0.UnixMicro(), sg.Ceil.UnixMicro())
		}
		var pu int64
		if !g.PausedUntil.IsZero() {
			pu = g.PausedUntil.UnixMicro()
		}
		args = append(args, g.Upstream, max(g.Interval.Microseconds(), 0), max(g.Burst, 1), pu,
			g.NextGrant.UnixMicro(), segs.String(), g.Set)
	}
	return args
}

// decodeDemand reads a pass reply's demand list.
func decodeDemand(d decoder) []quota.UpstreamDemand {
	var out []quota.UpstreamDemand
	for i := range d.Len() {
		e := d.List(i)
		out = append(out, quota.UpstreamDemand{Upstream: e.Str(0), Wanted: e.Int(1), Weight: e.Int(2), Unit: e.Int(3)})
	}
	return out
}

// decodeAligned reads a pass reply's aligned demand list.
func decodeAligned(d decoder) []quota.AlignedDemand {
	var out []quota.AlignedDemand
	for i := range d.Len() {
		e := d.List(i)
		out = append(out, quota.AlignedDemand{Upstreams: strings.Split(e.Str(0), ","), Cost: e.Int(1),
			Span: redisscript.Micros(e.Int(2)), Weight: e.Int(3), Earliest: redisscript.MicrosTime(e.Int(4))})
	}
	return out
}
