package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/procstat"
)

// cpuMeter measures the CPU time of named groups of processes, and of the
// whole machine, over an interval (Linux /proc; elsewhere it measures
// nothing).
type cpuMeter struct {
	pids  map[string][]int
	start map[string]float64
	at    time.Time
}

// cpuShares is CPU time over an interval of seconds, in cores (1.0 = one
// core busy): per named process, "other" for the rest of the machine.
type cpuShares struct {
	cores   map[string]float64
	seconds float64
}

// newCPUMeter starts measuring pids (name → the pids whose CPU is summed
// under it); "machine" is added.
func newCPUMeter(pids map[string][]int) *cpuMeter {
	m := &cpuMeter{pids: pids, at: time.Now()}
	m.start = m.sample()
	return m
}

func (m *cpuMeter) sample() map[string]float64 {
	s := map[string]float64{}
	for name, group := range m.pids {
		for _, pid := range group {
			if v, ok := procstat.ProcessCPU(pid); ok {
				s[name] += v
			}
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
	out := cpuShares{cores: map[string]float64{}, seconds: d}
	var ours float64
	for name := range m.pids {
		if a, ok := m.start[name]; ok {
			if b, ok := end[name]; ok {
				out.cores[name] = (b - a) / d
				ours += b - a
			}
		}
	}
	if a, ok := m.start["machine"]; ok {
		out.cores["other"] = max(0, (end["machine"]-a-ours)/d)
	}
	return out
}

// format lists the shares in percent of one core, in the order given.
func (c cpuShares) format(names ...string) string {
	return c.list(names, func(cores float64) string { return fmt.Sprintf("%.0f%%", 100*cores) })
}

// perJob lists the CPU time per job of jobs done in the interval, in µs,
// with the total: where a job's cost goes.
func (c cpuShares) perJob(jobs int, names ...string) string {
	if jobs <= 0 {
		return "-"
	}
	us := func(cores float64) string { return fmt.Sprintf("%.0f", cores*c.seconds*1e6/float64(jobs)) }
	var total float64
	for _, n := range names {
		total += c.cores[n]
	}
	return c.list(names, us) + ", total " + us(total)
}

func (c cpuShares) list(names []string, show func(cores float64) string) string {
	var parts []string
	for _, n := range names {
		if v, ok := c.cores[n]; ok {
			parts = append(parts, n+" "+show(v))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// redisPIDs are the Redis server's process id, or every Cluster master's
// (none when unknown).
func (e *env) redisPIDs(ctx context.Context) []int {
	var (
		mu   sync.Mutex
		pids []int
	)
	_ = e.eachMaster(ctx, func(ctx context.Context, _ string, c redis.Cmdable) error {
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
				if pid, err := strconv.Atoi(v); err == nil && pid > 0 {
					mu.Lock()
					pids = append(pids, pid)
					mu.Unlock()
				}
			}
		}
		return nil
	})
	return pids
}

// cpuMeter starts measuring Redis (every master of a Cluster), this
// program ("bench": receiver and asynq peers) and, when given, the Sluice
// processes.
func (e *env) cpuMeter(ctx context.Context, sl *sluice) *cpuMeter {
	if sl == nil {
		return e.cpuMeterOf(ctx, nil, nil)
	}
	return e.cpuMeterOf(ctx, []*proc{sl.throttler}, []*proc{sl.worker})
}

// cpuMeterOf starts measuring Redis, this program, and the throttlers and
// the workers given, each kind summed under one name (nil ones left out).
func (e *env) cpuMeterOf(ctx context.Context, throttlers, workers []*proc) *cpuMeter {
	pids := map[string][]int{"bench": {os.Getpid()}, "redis": e.redisPIDs(ctx)}
	for name, ps := range map[string][]*proc{"throttler": throttlers, "worker": workers} {
		for _, p := range ps {
			if p != nil {
				pids[name] = append(pids[name], p.cmd.Process.Pid)
			}
		}
	}
	return newCPUMeter(pids)
}

// cpuNames is the order CPU shares are printed in.
var cpuNames = []string{"redis", "throttler", "worker", "bench", "other"}
