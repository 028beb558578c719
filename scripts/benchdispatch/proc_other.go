//go:build !linux

package main

import (
	"syscall"
	"time"
)

// childAttr: children outlive a killed bench here; scripts/bench-dispatch
// stops its Redis, which stops them.
func childAttr() *syscall.SysProcAttr { return nil }

// sleepThread sleeps for d (a Go timer here: up to a millisecond late).
func sleepThread(d time.Duration) { time.Sleep(d) }
