package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClockSamplesDefault is how many TIME round trips one Clock.Sync takes.
const ClockSamplesDefault = 5

// Clock estimates Redis's clock (docs/design.md §2.3 step 1), the one clock every
// slot is expressed in. Sync takes a few TIME round trips and keeps the one
// with the smallest round-trip time: Redis's time is taken to be at the
// local midpoint of that round trip, an error of at most half its RTT
// (≈ 50 µs on loopback) plus the drift of the local monotonic clock since
// (ppm). The estimate is anchored on the monotonic clock, so wall-clock
// steps on this host do not move it.
//
// The zero Clock is not usable; NewClock returns one. Its methods are safe
// for concurrent use; Now and Local before the first successful Sync use
// the local wall clock.
type Clock struct {
	rdb     redis.UniversalClient
	samples int

	mu          sync.RWMutex
	anchorLocal time.Time     // local instant (with monotonic reading)
	anchorRedis time.Time     // Redis's time at anchorLocal
	rtt         time.Duration // RTT of the kept sample
	medianRTT   time.Duration // median RTT of the last Sync
	synced      bool
}

// NewClock returns a Clock reading TIME from rdb, samples round trips per
// Sync (≤ 0: ClockSamplesDefault). It does no I/O.
func NewClock(rdb redis.UniversalClient, samples int) *Clock {
	if samples <= 0 {
		samples = ClockSamplesDefault
	}
	return &Clock{rdb: rdb, samples: samples}
}

// Sync measures the clock afresh; on error the previous estimate stays.
func (c *Clock) Sync(ctx context.Context) error {
	var (
		best    time.Duration = -1
		local   time.Time
		remote  time.Time
		rtts    = make([]time.Duration, 0, c.samples)
		lastErr error
	)
	for range c.samples {
		t0 := time.Now()
		rt, err := c.rdb.Time(ctx).Result()
		t1 := time.Now()
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				break
			}
			continue
		}
		rtt := t1.Sub(t0)
		rtts = append(rtts, rtt)
		if best < 0 || rtt < best {
			best, local, remote = rtt, t0.Add(rtt/2), rt
		}
	}
	if best < 0 {
		return fmt.Errorf("sync redis clock: %w", cmpErr(lastErr))
	}
	slices.Sort(rtts)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.anchorLocal, c.anchorRedis, c.rtt, c.medianRTT, c.synced = local, remote, best, rtts[len(rtts)/2], true
	return nil
}

func cmpErr(err error) error {
	if err == nil {
		return errors.New("no sample")
	}
	return err
}

// Now is the estimate of Redis's current time.
func (c *Clock) Now() time.Time {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.synced {
		return time.Now()
	}
	return c.anchorRedis.Add(time.Since(c.anchorLocal))
}

// Local converts a Redis time into the local instant at which Redis's
// clock reads it. The result carries a monotonic reading: time.Until and
// timers on it are immune to wall-clock steps.
func (c *Clock) Local(redisT time.Time) time.Time {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.synced {
		return time.Now().Add(time.Until(redisT))
	}
	return c.anchorLocal.Add(redisT.Sub(c.anchorRedis))
}

// RTT is the median round-trip time of the last Sync (0 before any): the
// typical cost of one Redis call, used for the L ≥ 1.5 × TCI + 2 RTT check.
func (c *Clock) RTT() time.Duration {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.medianRTT
}

// Uncertainty is half the RTT of the sample the estimate rests on: the
// estimate's error bound at the time of the Sync.
func (c *Clock) Uncertainty() time.Duration {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.rtt / 2
}
