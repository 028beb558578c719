package main

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// pacing is what the receiver saw of one paced run.
type pacing struct {
	delivered  int           // requests
	distinct   int           // distinct webhook-ids
	gapP50     time.Duration // |inter-arrival gap − T|, p50
	gapP99     time.Duration // … p99
	gapMax     time.Duration
	rate       float64 // (N − 1) / (t_last − t_first), per second
	rateErr    float64 // |rate − r| / r
	maxIn1s    int     // most arrivals in any 1 s window
	span       time.Duration
	first      time.Time
	last       time.Time
	sortedTime []time.Time
}

// pace computes pacing of arrivals against the rate r (per second).
func pace(arr []arrival, r float64) pacing {
	p := pacing{delivered: len(arr)}
	ids := map[string]bool{}
	ts := make([]time.Time, len(arr))
	for i, a := range arr {
		ids[a.id] = true
		ts[i] = a.at
	}
	p.distinct = len(ids)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	p.sortedTime = ts
	if len(ts) < 2 {
		return p
	}
	T := time.Duration(float64(time.Second) / r)
	errs := make([]time.Duration, 0, len(ts)-1)
	for i := 1; i < len(ts); i++ {
		d := ts[i].Sub(ts[i-1]) - T
		errs = append(errs, max(d, -d))
	}
	slices.Sort(errs)
	p.gapP50, p.gapP99, p.gapMax = quantile(errs, 0.50), quantile(errs, 0.99), errs[len(errs)-1]
	p.first, p.last = ts[0], ts[len(ts)-1]
	p.span = p.last.Sub(p.first)
	if p.span > 0 {
		p.rate = float64(len(ts)-1) / p.span.Seconds()
		p.rateErr = math.Abs(p.rate-r) / r
	}
	p.maxIn1s = maxInWindow(ts, time.Second)
	return p
}

// maxInWindow is the most of the sorted times ts inside any half-open
// window [t, t + w).
func maxInWindow(ts []time.Time, w time.Duration) int {
	best, j := 0, 0
	for i := range ts {
		for j < len(ts) && ts[j].Sub(ts[i]) < w {
			j++
		}
		best = max(best, j-i)
	}
	return best
}

// quantile is the q-quantile of sorted (nearest rank), 0 when empty.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// throughputOf is (N − 1) / (last − first) of the arrivals, per second.
func throughputOf(arr []arrival) float64 {
	if len(arr) < 2 {
		return 0
	}
	first, last := arr[0].at, arr[0].at
	for _, a := range arr {
		if a.at.Before(first) {
			first = a.at
		}
		if a.at.After(last) {
			last = a.at
		}
	}
	return float64(len(arr)-1) / last.Sub(first).Seconds()
}

// parseInfo sums the calls of every INFO commandstats line and reads
// used_cpu_sys and used_cpu_user.
func parseInfo(info string) redisStats {
	var s redisStats
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "cmdstat_"):
			name, fields, _ := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
			var c cmdStat
			for _, f := range strings.Split(fields, ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					c.calls, _ = strconv.ParseInt(v, 10, 64)
				}
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					c.usec, _ = strconv.ParseInt(v, 10, 64)
				}
			}
			s.calls += c.calls
			if s.cmds == nil {
				s.cmds = map[string]cmdStat{}
			}
			s.cmds[name] = c
		case strings.HasPrefix(line, "used_cpu_sys:"), strings.HasPrefix(line, "used_cpu_user:"):
			_, v, _ := strings.Cut(line, ":")
			f, _ := strconv.ParseFloat(v, 64)
			s.cpu += f
			if strings.HasPrefix(line, "used_cpu_sys:") {
				s.sys += f
			}
		}
	}
	return s
}
