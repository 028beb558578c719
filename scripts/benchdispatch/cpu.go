package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/scripts/procstat"
)

// cpuMeter measures the CPU time of named processes, and of the whole
// machine, over an interval (Linux /proc; elsewhere it measures nothing).
type cpuMeter struct {
	pids  map[string]int
	start map[string]float64
	at    time.Time
}

// cpuShares is CPU time over an interval in cores (1.0 = one core busy):
// per named process, "other" for the rest of the machine.
type cpuShares map[string]float64

// newCPUMeter starts measuring pids (name → pid); "machine" is added.
func newCPUMeter(pids map[string]int) *cpuMeter {
	m := &cpuMeter{pids: pids, at: time.Now()}
	m.start = m.sample()
	return m
}

func (m *cpuMeter) sample() map[string]float64 {
	s := map[string]float64{}
	for name, pid := range m.pids {
		if v, ok := procstat.ProcessCPU(pid); ok {
			s[name] = v
		}
	}
	if v, ok := procstat.MachineBusy(); ok {
		s["machine"] = v
	}
	return s
}

// stop returns the shares since the start.
func (m *cpuMeter) stop() cpuShares {
	end, d := m.sample(), time.Since(m.at).Seconds()
	out := cpuShares{}
	var ours float64
	for name := range m.pids {
		if a, ok := m.start[name]; ok {
			if b, ok := end[name]; ok {
				out[name] = (b - a) / d
				ours += b - a
			}
		}
	}
	if a, ok := m.start["machine"]; ok {
		out["other"] = max(0, (end["machine"]-a-ours)/d)
	}
	return out
}

// String lists the shares in percent of one core, in the order given.
func (c cpuShares) format(names ...string) string {
	var parts []string
	for _, n := range names {
		if v, ok := c[n]; ok {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", n, 100*v))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// redisPID is the Redis server's process id (0 when unknown).
func (e *env) redisPID(ctx context.Context) int {
	info, err := e.rdb.Info(ctx, "server").Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, _ := strconv.Atoi(v)
			return pid
		}
	}
	return 0
}

// cpuMeter starts measuring Redis, this program ("bench": receiver and
// asynq peers) and, when given, the Sluice processes.
func (e *env) cpuMeter(ctx context.Context, sl *sluice) *cpuMeter {
	pids := map[string]int{"bench": os.Getpid()}
	if pid := e.redisPID(ctx); pid > 0 {
		pids["redis"] = pid
	}
	if sl != nil {
		pids["throttler"] = sl.throttler.cmd.Process.Pid
		if sl.worker != nil {
			pids["worker"] = sl.worker.cmd.Process.Pid
		}
	}
	return newCPUMeter(pids)
}

// cpuNames is the order CPU shares are printed in.
var cpuNames = []string{"redis", "throttler", "worker", "bench", "other"}
