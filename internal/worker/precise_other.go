//go:build !linux

package worker

import (
	"runtime"
	"time"
)

// preciseSleep yields: no portable sleep finer than the runtime's timers,
// so the approach spins.
func preciseSleep(time.Duration) { runtime.Gosched() }
