//go:build unix

package procstat

import (
	"syscall"
	"time"
)

// SelfCPU is this process's user + system CPU time so far, from
// getrusage(2): to the microsecond, where /proc's figures (ProcessCPU)
// count 10 ms ticks — for a benchmark that measures its own CPU over a
// few milliseconds at a time. 0 when it cannot be read.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
