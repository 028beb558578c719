package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/procstat"
)

// stats is what one cell measured.
type stats struct {
	requests, accepted, refused, limited, errors int64
	firstErr                                     string
	elapsed                                      time.Duration
	lat                                          []time.Duration // per request, sorted
	cpu                                          map[string]float64
	cmds                                         map[string]cmdStat // INFO commandstats over the cell
}

// cmdStat is one command's calls and time in INFO commandstats.
type cmdStat struct{ calls, usec int64 }

// isScript reports whether a commandstats name is a script call (EVAL,
// EVALSHA, FCALL and their _RO forms): its time includes the commands it
// runs, which commandstats also lists on their own.
func isScript(name string) bool {
	switch name {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
		return true
	}
	return false
}

// scripts sums the script calls' counts and time.
func (s stats) scripts() (calls, usec int64) {
	for name, c := range s.cmds {
		if isScript(name) {
			calls += c.calls
			usec += c.usec
		}
	}
	return calls, usec
}

// commands is the number of commands Redis ran over the cell: the
// scripts' own commands counted, the script calls themselves not.
func (s stats) commands() int64 {
	var n int64
	for name, c := range s.cmds {
		if !isScript(name) {
			n += c.calls
		}
	}
	return n
}

// top lists the n commands with the most time over the cell, per job.
func (s stats) top(n int) string {
	names := make([]string, 0, len(s.cmds))
	for name := range s.cmds {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return int(s.cmds[b].usec - s.cmds[a].usec) })
	jobs := float64(max(s.accepted, 1))
	var b strings.Builder
	for _, name := range names[:min(n, len(names))] {
		c := s.cmds[name]
		fmt.Fprintf(&b, " %s %.2f/job %.1fµs/job;", name, float64(c.calls)/jobs, float64(c.usec)/jobs)
	}
	return b.String()
}

func (s stats) perSec(n int64) float64 { return float64(n) / s.elapsed.Seconds() }

// quantile returns the q-quantile of the request latencies (0 when none).
func (s stats) quantile(q float64) time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	return s.lat[min(len(s.lat)-1, int(q*float64(len(s.lat))))]
}

// measure runs e.o.producers producers on c for e.o.duration, or until the
// cell's jobs reach e.o.maxJobs, each producer cycling over c.tenants.
func measure(ctx context.Context, e *env, c cell) (stats, error) {
	if err := e.rdb.ConfigResetStat(ctx).Err(); err != nil {
		return stats{}, fmt.Errorf("config resetstat: %w", err)
	}
	cpu0 := cpuTimes(e.pids)
	var (
		st     stats
		issued atomic.Int64
		mu     sync.Mutex
		wg     sync.WaitGroup
	)
	budget := e.o.maxJobs
	if c.jobs == 0 {
		budget = 0 // not an enqueue: bounded by time only
	}
	start := time.Now()
	stop := start.Add(e.o.duration)
	for g := range e.o.producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local stats
			for i := 0; time.Now().Before(stop); i++ {
				if budget > 0 && issued.Add(int64(c.jobs)) > budget {
					break
				}
				t0 := time.Now()
				out := c.do(ctx, c.tenants[(g*7919+i)%len(c.tenants)])
				local.lat = append(local.lat, time.Since(t0))
				local.add(out)
			}
			mu.Lock()
			st.merge(local)
			mu.Unlock()
		}()
	}
	wg.Wait()
	st.elapsed = time.Since(start)
	st.cpu = cpuShare(cpu0, cpuTimes(e.pids), st.elapsed)
	slices.Sort(st.lat)
	var err error
	if st.cmds, err = commandStats(ctx, e); err != nil {
		return stats{}, err
	}
	if c.jobs > 0 {
		fmt.Fprintf(os.Stderr, "%s: Redis time by command:%s\n", c.name, st.top(8))
	}
	return st, nil
}

func (s *stats) add(o outcome) {
	s.requests++
	s.accepted += int64(o.accepted)
	s.refused += int64(o.refused)
	if o.limited {
		s.limited++
	}
	if o.err != nil {
		s.errors++
		if s.firstErr == "" {
			s.firstErr = o.err.Error()
		}
	}
}

func (s *stats) merge(o stats) {
	s.requests += o.requests
	s.accepted += o.accepted
	s.refused += o.refused
	s.limited += o.limited
	s.errors += o.errors
	if s.firstErr == "" {
		s.firstErr = o.firstErr
	}
	s.lat = append(s.lat, o.lat...)
}

// commandStats reads INFO commandstats, reset at the start of the cell.
func commandStats(ctx context.Context, e *env) (map[string]cmdStat, error) {
	info, err := e.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("info commandstats: %w", err)
	}
	out := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		var c cmdStat
		for _, kv := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				c.calls = n
			case "usec":
				c.usec = n
			}
		}
		out[name] = c
	}
	return out, nil
}

// cpuTimes returns user+system CPU seconds of each named process and of this
// one ("loadgen"); a process that cannot be read is left out.
func cpuTimes(pids map[string]int) map[string]float64 {
	out := map[string]float64{}
	all := map[string]int{"loadgen": os.Getpid()}
	for k, v := range pids {
		all[k] = v
	}
	if busy, ok := procstat.MachineBusy(); ok {
		out[machine] = busy
	}
	for name, pid := range all {
		if v, ok := procstat.ProcessCPU(pid); ok {
			out[name] = v
		}
	}
	return out
}

// cpuShare returns each process's CPU use over d as a fraction of one core,
// and as "other" the rest of the machine's busy time: load this benchmark
// did not make, which disturbs it.
func cpuShare(before, after map[string]float64, d time.Duration) map[string]float64 {
	out := map[string]float64{}
	for name, b := range before {
		if a, ok := after[name]; ok {
			out[name] = (a - b) / d.Seconds()
		}
	}
	if m0, ok := before[machine]; ok {
		other := (after[machine] - m0) / d.Seconds()
		for name, v := range out {
			if name != machine {
				other -= v
			}
		}
		delete(out, machine)
		out["other"] = max(0, other)
	}
	return out
}

// machine is the key of the machine's busy time in cpuTimes' map.
const machine = "(machine)"

func parsePids(s string) map[string]int {
	out := map[string]int{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if n, err := strconv.Atoi(v); ok && err == nil && n > 0 {
			out[k] = n
		}
	}
	return out
}
