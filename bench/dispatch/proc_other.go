//go:build !linux

package main

import "syscall"

// childAttr: children outlive a killed bench here; scripts/bench-dispatch
// stops its Redis, which stops them.
func childAttr() *syscall.SysProcAttr { return nil }
