package dispatch

import "time"

// clock is the shard loops' time source: when to pass, sleep, renew a
// lease. Production runs on the real clock; the loop tests drive a fake one
// (helpers_test.go), so that what they assert about timing is exact. Lease
// lifetimes in Redis, the membership heartbeat and the capacity reader keep
// real time.
type clock interface {
	Now() time.Time
	NewTimer(d time.Duration) clockTimer
}

// clockTimer is the part of *time.Timer the loops use.
type clockTimer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// realClock is the time package's clock.
type realClock struct{}

func (realClock) Now() time.Time                      { return time.Now() }
func (realClock) NewTimer(d time.Duration) clockTimer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }
