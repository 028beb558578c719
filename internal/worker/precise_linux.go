package worker

import (
	"syscall"
	"time"
)

// PreciseSleep blocks the calling thread for d with the kernel's
// high-resolution timer (the runtime hands its processor to other
// goroutines if it needs it). The scheduler's approach uses it, and so
// does bench/dispatch's bare pacer, the control of its precision
// part.
func PreciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	_ = syscall.Nanosleep(&ts, nil) // EINTR: the loop re-checks
}
