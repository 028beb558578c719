// Package procstat reads CPU times from Linux's /proc for the benchmark
// programs (the bench module) and the console's CPU tests (internal/e2e):
// a process's, and the whole machine's; and this process's own, finer,
// from getrusage (SelfCPU, for Go benchmarks).
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux
// this runs on.
const clockTicks = 100

// ProcessCPU is the user + system CPU seconds pid has used so far; false
// when /proc/<pid>/stat cannot be read.
func ProcessCPU(pid int) (float64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The fields after the command name "(…)", which may hold spaces:
	// state is the first, utime and stime the 12th and 13th (fields 14 and
	// 15 of proc(5)).
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return float64(ut+st) / clockTicks, true
}

// MachineBusy is the CPU seconds all cores have spent busy since boot (not
// idle nor waiting for I/O), from the first line of /proc/stat.
func MachineBusy() (float64, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, false
	}
	var busy int64
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, false
		}
		if i != 3 && i != 4 && i < 8 { // idle, iowait; guest times are in user already
			busy += n
		}
	}
	return float64(busy) / clockTicks, true
}
