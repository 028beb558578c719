package dispatch

import (
	"context"
	"time"
)

// Shard ownership (docs/design.md §2.2, "Shard leases"): a shard loop passes its
// shard only while this Dispatcher holds the shard's lease (lease.go), and
// each Dispatcher holds at most its fair share of the shards.

// own reports whether this Dispatcher may pass s's shard now, taking or
// renewing the lease when due. A renewal that fails on a Redis error keeps
// the lease until it could have expired.
func (d *Dispatcher) own(ctx context.Context, s *shardLoop) bool {
	if d.cfg.DisableLeases {
		d.setOwned(s, true)
		return true
	}
	now := d.cfg.clock.Now()
	if s.owned && now.Before(s.renewAt) {
		return true
	}
	ttl := d.cfg.LeaseTTL
	switch {
	case s.owned && d.shed():
		// More than the fair share: give this shard up for a dispatcher
		// that has fewer (it tries free leases every LeaseTTL/10).
		d.metrics.owned.Dec()
		s.owned, s.renewAt = false, now.Add(ttl/3)
		d.cfg.Logger.Info("shard lease handed over (above the fair share)", "shard", s.shard, "share", d.fairShare())
		if err := d.leases.release(ctx, s.shard); err != nil && ctx.Err() == nil {
			d.cfg.Logger.Warn("release shard lease", "shard", s.shard, "err", err)
		}
		return false
	case !s.owned && int(d.owned.Load()) >= d.fairShare():
		s.renewAt = now.Add(ttl / 10)
		return false
	}
	held, err := d.leases.hold(ctx, s.shard)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			d.metrics.passErrors.Inc()
			d.cfg.Logger.Warn("shard lease", "shard", s.shard, "err", err)
		}
		s.renewAt = now.Add(min(ttl/10, backoffMax))
		d.setOwned(s, s.owned && now.Before(s.validUntil))
	case held:
		s.renewAt, s.validUntil = now.Add(ttl/3), now.Add(ttl-ttl/10)
		d.setOwned(s, true)
	default: // another dispatcher holds it: try again soon while below the share
		s.renewAt = now.Add(ttl / 10)
		d.setOwned(s, false)
	}
	return s.owned
}

// fairShare is the most shards this Dispatcher should hold: ⌈shards /
// live dispatchers⌉, so that dispatch work spreads over the replicas.
func (d *Dispatcher) fairShare() int {
	m := max(int(d.members.Load()), 1)
	return (d.shards + m - 1) / m
}

// shed takes one shard off the owned count when it exceeds the fair share
// and reports whether it did: the caller gives that shard's lease up. The
// count is decremented atomically, so loops renewing at once shed exactly
// the excess.
func (d *Dispatcher) shed() bool {
	for {
		o := d.owned.Load()
		if int(o) <= d.fairShare() {
			return false
		}
		if d.owned.CompareAndSwap(o, o-1) {
			return true
		}
	}
}

// membership keeps this Dispatcher in <p>:dispatch:members, reading the
// number of live dispatchers every LeaseTTL/3, until ctx is done; then it
// leaves.
func (d *Dispatcher) membership(ctx context.Context) {
	tick := time.NewTicker(d.cfg.LeaseTTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			if _, err := d.leases.members(lctx, false); err != nil {
				d.cfg.Logger.Warn("leave dispatcher members", "err", err)
			}
			return
		case <-tick.C:
			d.beat(ctx)
		}
	}
}

// beat renews the membership and reads the number of live dispatchers;
// on an error the last number stands.
func (d *Dispatcher) beat(ctx context.Context) {
	n, err := d.leases.members(ctx, true)
	if err != nil {
		if ctx.Err() == nil {
			d.cfg.Logger.Warn("dispatcher members", "err", err)
		}
		return
	}
	d.members.Store(int32(n))
}

func (d *Dispatcher) setOwned(s *shardLoop, owned bool) {
	if owned == s.owned {
		return
	}
	if owned {
		d.owned.Add(1)
		d.metrics.owned.Inc()
		if !d.cfg.DisableLeases {
			d.cfg.Logger.Info("shard lease taken", "shard", s.shard)
		}
	} else {
		d.owned.Add(-1)
		d.metrics.owned.Dec()
		d.cfg.Logger.Warn("shard lease lost", "shard", s.shard)
	}
	s.owned = owned
}

// giveUp releases s's lease at the end of the loop.
func (d *Dispatcher) giveUp(ctx context.Context, s *shardLoop) {
	if !s.owned {
		return
	}
	d.owned.Add(-1)
	d.metrics.owned.Dec()
	s.owned = false
	if d.cfg.DisableLeases {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := d.leases.release(rctx, s.shard); err != nil {
		d.cfg.Logger.Warn("release shard lease", "shard", s.shard, "err", err)
	}
}
