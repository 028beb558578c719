//go:build !linux

package worker

import (
	"runtime"
	"time"
)

// PreciseSleep yields: no portable sleep finer than the runtime's timers,
// so the approach spins.
func PreciseSleep(time.Duration) { runtime.Gosched() }
