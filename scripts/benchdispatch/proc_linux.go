package main

import (
	"syscall"
	"time"
)

// childAttr makes a child die with this program.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }

// sleepThread blocks the calling thread for d with the kernel's
// high-resolution timer (Go's timers wake up to a millisecond late).
func sleepThread(d time.Duration) {
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	_ = syscall.Nanosleep(&ts, nil) // EINTR: the caller re-checks
}
