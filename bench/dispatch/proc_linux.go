package main

import "syscall"

// childAttr makes a child die with this program.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
