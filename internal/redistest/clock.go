package redistest

import (
	"sync/atomic"
	"time"
)

// Epoch is a realistic present-day Redis time for fake clocks, so µs
// values have their production magnitude (≈1.77·10¹⁵).
var Epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Clock is a fake clock for the scripts' now argument, starting at Epoch
// and moved only by Advance. Safe for concurrent use; the zero Clock reads
// Epoch.
type Clock struct{ since atomic.Int64 } // µs after Epoch

// Now is the clock's time.
func (c *Clock) Now() time.Time { return Epoch.Add(time.Duration(c.since.Load()) * time.Microsecond) }

// Advance moves the clock d (whole µs) later.
func (c *Clock) Advance(d time.Duration) { c.since.Add(d.Microseconds()) }
