package e2e

import "syscall"

// sysProcAttr makes a test binary that dies (a timeout panic) take its
// processes along.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
