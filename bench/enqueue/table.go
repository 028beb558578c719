package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// row is one measured cell.
type row struct {
	cell  cell
	stats stats
}

// ceiling is redis-benchmark's EVALSHA result; rps 0 when absent.
type ceiling struct {
	rps, p50, p99 float64 // requests/s, ms, ms
}

// parseCeiling reads "rps p50ms p99ms" (p50 and p99 may be missing).
func parseCeiling(s string) ceiling {
	var c ceiling
	f := strings.Fields(s)
	vals := []*float64{&c.rps, &c.p50, &c.p99}
	for i := range min(len(f), len(vals)) {
		*vals[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return c
}

func printTable(w io.Writer, o options, rows []row, rb ceiling, mem memResult) {
	var goEval float64
	for _, r := range rows {
		if r.cell.ceiling {
			goEval = r.stats.perSec(r.stats.requests)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%d producers, %d tenants, %s/row\treq/s\tjobs/s\tp50 ms\tp99 ms\t429\terrors\t"+
		"÷ redis-bench\t÷ go EVALSHA\tscripts/req\tcmds/job\tscript µs/job\tRedis CPU µs/job\tCPU redis\tCPU throttler\tCPU loadgen\tCPU other\t\n",
		o.producers, o.tenants, o.duration)
	for _, r := range rows {
		s := r.stats
		rps := s.perSec(s.requests)
		jobs := "-"
		if r.cell.jobs > 0 {
			jobs = fmt.Sprintf("%.0f", s.perSec(s.accepted))
		}
		req := float64(max(s.requests, 1))
		per := req // per job, or per request for a cell that enqueues nothing
		if r.cell.jobs > 0 {
			per = float64(max(s.accepted, 1))
		}
		calls, usec := s.scripts()
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%.2f\t%.1f\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t\n",
			r.cell.name, rps, jobs, ms(s.quantile(0.5)), ms(s.quantile(0.99)), s.limited, s.errors,
			ratio(rps, rb.rps), ratio(rps, goEval), float64(calls)/req, float64(s.commands())/per, float64(usec)/per,
			s.cpu["redis"]*s.elapsed.Seconds()*1e6/per,
			pct(s.cpu, "redis"), pct(s.cpu, "throttler"), pct(s.cpu, "loadgen"), pct(s.cpu, "other"))
	}
	if rb.rps > 0 {
		fmt.Fprintf(tw, "redis-benchmark -c %d EVALSHA return 1\t%.0f\t-\t%.3f\t%.3f\t-\t-\t%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t\n",
			o.producers, rb.rps, rb.p50, rb.p99, ratio(rb.rps, rb.rps), ratio(rb.rps, goEval))
	}
	printMemory(tw, mem)
	tw.Flush()
	if mem.err != nil {
		fmt.Fprintf(w, "memory not measured: %v\n", mem.err)
	}
	for _, r := range rows {
		if r.stats.firstErr != "" {
			fmt.Fprintf(w, "first error of %s: %s\n", r.cell.name, r.stats.firstErr)
		}
		if r.stats.refused > 0 {
			fmt.Fprintf(w, "%s: %d jobs refused (429 or refused batch items)\n", r.cell.name, r.stats.refused)
		}
	}
}

// printMemory adds the memory rows to the table: bytes per job in the
// req/s column, and that as a multiple of the stored body in the next.
func printMemory(tw io.Writer, mem memResult) {
	fmt.Fprintln(tw, "\t\t\t")
	if mem.err != nil {
		fmt.Fprintln(tw, "memory: not measured (below)\t-\t-\t")
		return
	}
	fmt.Fprintf(tw, "memory: %d webhook jobs, %d B sent, %d B stored each\tB/job\t× stored\t\n",
		mem.jobs, mem.sentBytes, mem.canonLen)
	memRow := func(name string, v float64) {
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t\n", name, v, v/float64(mem.canonLen))
	}
	n := float64(mem.jobs)
	memRow("INFO used_memory growth ÷ jobs", float64(mem.used)/n)
	memRow("INFO used_memory_dataset growth ÷ jobs", float64(mem.dataset)/n)
	memRow("MEMORY USAGE of one job hash", float64(mem.jobHash))
	memRow("MEMORY USAGE of the backlog lists ÷ LLEN", float64(mem.list)/float64(max(mem.listLen, 1)))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func pct(cpu map[string]float64, name string) string {
	v, ok := cpu[name]
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}
