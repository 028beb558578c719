package worker

import (
	"syscall"
	"time"
)

// preciseSleep blocks the calling thread for d with the kernel's
// high-resolution timer (the runtime hands its processor to other
// goroutines if it needs it).
func preciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	_ = syscall.Nanosleep(&ts, nil) // EINTR: the loop re-checks
}
