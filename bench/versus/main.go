// Command benchversus reads the tables that scripts/bench-dispatch printed
// for two or more builds of Sluice, each beside bare asynq in its own run,
// and prints their throughput rows side by side: jobs/s, Redis commands,
// Redis CPU and whole-machine CPU per job, each with its ratio to the
// asynq of the same run, then each later build's change against the first
// (as is, and as a change of its ratio to asynq, which the machine's speed
// of the hour moves less), from each build's medians when it ran more than
// once. scripts/bench-versus runs the builds and calls it.
//
//	benchversus LABEL=FILE LABEL=FILE …    (LABEL: build, or build#round)
//
// It reads the table of any build since the throughput part had its per-
// process CPU row (2026-11-30): the rows "jobs/s, … worker concurrency N",
// "Redis commands / job (worker concurrency N)" and "CPU µs / job (worker
// concurrency N)" (per process: redis, throttler, worker, bench; the
// whole-machine figure is their sum, "other" left out, as bench-dispatch
// counts it).
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/sluicehq/sluice/bench/internal/stats"
)

// figures are one system's throughput figures at one worker concurrency.
type figures struct {
	jobsPerSec, commands float64
	cpu                  map[string]float64 // µs per job by process
}

// wholeMachine is the CPU µs per job of the processes the run consists of.
func (f figures) wholeMachine() float64 {
	var s float64
	for _, p := range []string{"redis", "throttler", "worker", "bench"} {
		s += f.cpu[p]
	}
	return s
}

// row is one concurrency's figures of Sluice and of the peer.
type row struct {
	conc         int
	sluice, peer figures
}

// run is one build's table.
type run struct {
	label, machine string
	rows           []row      // by concurrency, as printed
	prec           *precision // the precision part's figures, when it ran
}

// precision are Sluice's figures of the precision part: |gap − T|
// percentiles in ms, the long-run rate error in %, the most deliveries in
// any 1 s; and the p99 of the bare pacer beside it (its control row; 0
// when the run has none: a build before it).
type precision struct {
	p50, p99, max, rateErr, most float64
	pacerP99                     float64
}

var concRe = regexp.MustCompile(`worker concurrency (\d+)`)

// parse reads one bench-dispatch output: its "machine:" line and the
// throughput rows of its table. The table's columns are found from its
// header line (tabwriter pads by runes, so positions are rune positions).
func parse(label string, r io.Reader) (run, error) {
	out := run{label: label}
	var cols []int
	byConc := map[int]*row{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "machine: ") {
			out.machine = strings.TrimPrefix(line, "machine: ")
			continue
		}
		if strings.HasPrefix(line, "part ") && strings.Contains(line, "Sluice ÷ peer") {
			cols = columns(line)
			continue
		}
		if cols != nil && strings.HasPrefix(line, "1 precision") {
			if err := out.precisionRow(split(line, cols)); err != nil {
				return run{}, fmt.Errorf("%s: %w", label, err)
			}
			continue
		}
		if cols == nil || !strings.HasPrefix(line, "3 throughput") {
			continue
		}
		cells := split(line, cols)
		if err := throughputRow(cells, byConc); err != nil {
			return run{}, fmt.Errorf("%s: %q: %w", label, cells[1], err)
		}
	}
	if err := sc.Err(); err != nil {
		return run{}, fmt.Errorf("%s: %w", label, err)
	}
	return out.finish(byConc)
}

// throughputRow reads one row of the throughput part into the row of its
// worker concurrency in byConc; rows of other measures are skipped.
func throughputRow(cells []string, byConc map[int]*row) error {
	m := concRe.FindStringSubmatch(cells[1])
	if m == nil {
		return nil
	}
	conc, _ := strconv.Atoi(m[1])
	rw := byConc[conc]
	if rw == nil {
		rw = &row{conc: conc}
		byConc[conc] = rw
	}
	var err error
	switch measure := cells[1]; {
	case strings.HasPrefix(measure, "jobs/s"):
		if rw.sluice.jobsPerSec, err = number(cells[2]); err == nil {
			rw.peer.jobsPerSec, err = number(cells[3])
		}
	case strings.HasPrefix(measure, "Redis commands / job"):
		if rw.sluice.commands, err = number(cells[2]); err == nil {
			rw.peer.commands, err = number(cells[3])
		}
	case strings.HasPrefix(measure, "CPU µs / job"):
		if rw.sluice.cpu, err = perProcess(cells[2]); err == nil {
			rw.peer.cpu, err = perProcess(cells[3])
		}
	}
	return err
}

// finish adds the throughput rows, by worker concurrency, once each is
// complete; a run with neither throughput nor precision rows is an error.
func (out run) finish(byConc map[int]*row) (run, error) {
	label := out.label
	for _, rw := range byConc {
		if rw.sluice.jobsPerSec == 0 || rw.peer.jobsPerSec == 0 || rw.sluice.cpu == nil || rw.peer.cpu == nil {
			return run{}, fmt.Errorf("%s: worker concurrency %d: the jobs/s or CPU µs / job row is missing", label, rw.conc)
		}
		out.rows = append(out.rows, *rw)
	}
	if len(out.rows) == 0 && out.prec == nil {
		return run{}, fmt.Errorf("%s: no throughput or precision rows (was it run with -parts throughput or precision?)", label)
	}
	sort.Slice(out.rows, func(i, j int) bool { return out.rows[i].conc < out.rows[j].conc })
	return out, nil
}

// precisionRow reads one row of the precision part into r.prec (the
// Sluice column: "0.174 ms", "0.027 % (50.014/s)", "51").
func (r *run) precisionRow(cells []string) error {
	var dst *float64
	if r.prec == nil {
		r.prec = &precision{}
	}
	switch m := cells[1]; {
	case strings.HasPrefix(m, "|gap") && strings.HasSuffix(m, "p50"):
		dst = &r.prec.p50
	case strings.HasPrefix(m, "|gap") && strings.HasSuffix(m, "p99"):
		dst = &r.prec.p99
	case strings.HasPrefix(m, "|gap") && strings.HasSuffix(m, "max"):
		dst = &r.prec.max
	case strings.HasPrefix(m, "long-run rate error"):
		dst = &r.prec.rateErr
	case strings.HasPrefix(m, "most deliveries in any 1 s"):
		dst = &r.prec.most
	case strings.HasPrefix(m, "control: a bare pacer"):
		// "0.071 ms / 2.106 ms / 3.811 ms (2000 requests)": the p99 is the second.
		parts := strings.Split(cells[2], " / ")
		if len(parts) != 3 {
			return fmt.Errorf("%q: want p50 / p99 / max, got %q", m, cells[2])
		}
		v, err := number(parts[1])
		if err != nil {
			return fmt.Errorf("%q: %w", m, err)
		}
		r.prec.pacerP99 = v
		return nil
	default:
		return nil
	}
	v, err := number(cells[2])
	if err != nil {
		return fmt.Errorf("%q: %w", cells[1], err)
	}
	*dst = v
	return nil
}

// columns returns the rune offsets where the header's cells start.
func columns(header string) []int {
	var cols []int
	rs := []rune(header)
	for i := range rs {
		if rs[i] != ' ' && (i == 0 || (i >= 2 && rs[i-1] == ' ' && rs[i-2] == ' ')) {
			cols = append(cols, i)
		}
	}
	return cols
}

// split cuts a table line at the header's column offsets; cells are
// trimmed, missing ones empty.
func split(line string, cols []int) []string {
	rs := []rune(line)
	cells := make([]string, max(len(cols), 4))
	for i, c := range cols {
		if c >= len(rs) {
			break
		}
		end := len(rs)
		if i+1 < len(cols) && cols[i+1] < end {
			end = cols[i+1]
		}
		cells[i] = strings.TrimSpace(string(rs[c:end]))
	}
	return cells
}

// number reads a cell's leading number ("1457", "63.2").
func number(cell string) (float64, error) {
	f := strings.Fields(cell)
	if len(f) == 0 {
		return 0, errors.New("empty cell")
	}
	return strconv.ParseFloat(f[0], 64)
}

// perProcess reads "redis 471, throttler 156, …, total 1207".
func perProcess(cell string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, part := range strings.Split(cell, ",") {
		f := strings.Fields(part)
		if len(f) != 2 {
			return nil, fmt.Errorf("not a process and its µs: %q", part)
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return nil, err
		}
		out[f[0]] = v
	}
	if _, ok := out["redis"]; !ok {
		return nil, errors.New("no redis figure")
	}
	return out, nil
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// build is the label without its round ("744f108#2" → "744f108").
func (r run) build() string {
	b, _, _ := strings.Cut(r.label, "#")
	return b
}

// line is one printed row: a run's figures at one concurrency, or a
// build's medians over its runs. Each ratio to asynq is its own run's
// (a median row: the median of its runs' ratios).
type line struct {
	label                                string
	conc                                 int
	jobs, asynqJobs, cmds, asynqCmds     float64
	redis, asynqRedis, whole, asynqWhole float64
	jobsRatio, redisRatio, wholeRatio    float64
}

func lineOf(label string, x row) line {
	s, p := x.sluice, x.peer
	return line{label: label, conc: x.conc, jobs: s.jobsPerSec, asynqJobs: p.jobsPerSec,
		cmds: s.commands, asynqCmds: p.commands, redis: s.cpu["redis"], asynqRedis: p.cpu["redis"],
		whole: s.wholeMachine(), asynqWhole: p.wholeMachine(),
		jobsRatio: s.jobsPerSec / p.jobsPerSec, redisRatio: s.cpu["redis"] / p.cpu["redis"],
		wholeRatio: s.wholeMachine() / p.wholeMachine()}
}

// medianBy is the median of f over xs.
func medianBy[T any](xs []T, f func(T) float64) float64 {
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	return stats.Median(v)
}

// medianLine is the field-wise median of ls (one build, one concurrency).
func medianLine(label string, ls []line) line {
	m := func(f func(line) float64) float64 { return medianBy(ls, f) }
	return line{label: label, conc: ls[0].conc,
		jobs: m(func(l line) float64 { return l.jobs }), asynqJobs: m(func(l line) float64 { return l.asynqJobs }),
		cmds: m(func(l line) float64 { return l.cmds }), asynqCmds: m(func(l line) float64 { return l.asynqCmds }),
		redis: m(func(l line) float64 { return l.redis }), asynqRedis: m(func(l line) float64 { return l.asynqRedis }),
		whole: m(func(l line) float64 { return l.whole }), asynqWhole: m(func(l line) float64 { return l.asynqWhole }),
		jobsRatio: m(func(l line) float64 { return l.jobsRatio }), redisRatio: m(func(l line) float64 { return l.redisRatio }),
		wholeRatio: m(func(l line) float64 { return l.wholeRatio })}
}

// group sorts the runs' rows by build (in the order first seen): every
// run's line, and with more than one run of a build at a concurrency their
// median after them; meds holds each build's median per concurrency.
func group(runs []run) (builds []string, lines []line, meds map[string]map[int]line) {
	byBuild := map[string]map[int][]line{}
	for _, r := range runs {
		b := r.build()
		if byBuild[b] == nil {
			builds = append(builds, b)
			byBuild[b] = map[int][]line{}
		}
		for _, x := range r.rows {
			l := lineOf(r.label, x)
			lines = append(lines, l)
			byBuild[b][x.conc] = append(byBuild[b][x.conc], l)
		}
	}
	meds = map[string]map[int]line{}
	for _, b := range builds {
		meds[b] = map[int]line{}
		for _, c := range slices.Sorted(maps.Keys(byBuild[b])) {
			ls := byBuild[b][c]
			meds[b][c] = medianLine(b+" median", ls)
			if len(ls) > 1 {
				lines = append(lines, meds[b][c])
			}
		}
	}
	return builds, lines, meds
}

// report prints every run's rows; for a build run more than once, its
// medians; then each other build's change against the first build, from
// the builds' medians (a build run once: its run), at each concurrency.
func report(w io.Writer, runs []run) {
	for _, r := range runs {
		fmt.Fprintf(w, "%s: %s\n", r.label, r.machine)
	}
	fmt.Fprintln(w)
	builds, lines, meds := group(runs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(lines) > 0 {
		fmt.Fprintln(tw, "build\tconcurrency\tjobs/s\tasynq\t÷ asynq\tcommands/job\tasynq\t"+
			"Redis CPU µs/job\tasynq\t÷ asynq\twhole-machine µs/job\tasynq\t÷ asynq\t")
		for _, l := range lines {
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.2f\t%.1f\t%.1f\t%.0f\t%.0f\t%.2f\t%.0f\t%.0f\t%.2f\t\n", l.label, l.conc,
				l.jobs, l.asynqJobs, l.jobsRatio, l.cmds, l.asynqCmds, l.redis, l.asynqRedis, l.redisRatio,
				l.whole, l.asynqWhole, l.wholeRatio)
		}
	}
	tw.Flush()
	precisionReport(w, runs, builds)
	if len(builds) < 2 || len(lines) == 0 {
		return
	}
	changeReport(w, builds, meds)
}

// changeReport prints each later build's medians as multiples of the first
// build's, per worker concurrency.
func changeReport(w io.Writer, builds []string, meds map[string]map[int]line) {
	fmt.Fprintln(w)
	fmt.Fprintf(w, "change against %s (as measured; and of the ratio to the asynq of the same run)\n", builds[0])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "build\tconcurrency\tjobs/s\t(÷ asynq)\tcommands/job\tRedis CPU µs/job\t(÷ asynq)\twhole-machine µs/job\t(÷ asynq)\t")
	for _, b := range builds[1:] {
		for _, c := range slices.Sorted(maps.Keys(meds[b])) {
			x, ok := meds[builds[0]][c]
			if !ok {
				continue
			}
			l := meds[b][c]
			fmt.Fprintf(tw, "%s\t%d\t× %s\t× %s\t× %s\t× %s\t× %s\t× %s\t× %s\t\n", b, c,
				ratio(l.jobs, x.jobs), ratio(l.jobsRatio, x.jobsRatio), ratio(l.cmds, x.cmds),
				ratio(l.redis, x.redis), ratio(l.redisRatio, x.redisRatio),
				ratio(l.whole, x.whole), ratio(l.wholeRatio, x.wholeRatio))
		}
	}
	tw.Flush()
}

// precisionReport prints the precision part's figures of every run that
// has them, and each build's medians when it ran more than once.
func precisionReport(w io.Writer, runs []run, builds []string) {
	byBuild := map[string][]precision{}
	any := false
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range runs {
		if r.prec == nil {
			continue
		}
		if !any {
			fmt.Fprintln(w)
			fmt.Fprintln(tw, "build\t|gap − T| p50 ms\tp99 ms\tmax ms\trate error %\tmost in 1 s\tbare pacer's p99 ms\t")
			any = true
		}
		p := *r.prec
		byBuild[r.build()] = append(byBuild[r.build()], p)
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.0f\t%s\t\n", r.label, p.p50, p.p99, p.max, p.rateErr, p.most, pacerCell(p.pacerP99))
	}
	for _, b := range builds {
		ps := byBuild[b]
		if len(ps) < 2 {
			continue
		}
		m := func(f func(precision) float64) float64 { return medianBy(ps, f) }
		fmt.Fprintf(tw, "%s median\t%.3f\t%.3f\t%.3f\t%.3f\t%.0f\t%s\t\n", b,
			m(func(p precision) float64 { return p.p50 }), m(func(p precision) float64 { return p.p99 }),
			m(func(p precision) float64 { return p.max }), m(func(p precision) float64 { return p.rateErr }),
			m(func(p precision) float64 { return p.most }), pacerCell(m(func(p precision) float64 { return p.pacerP99 })))
	}
	tw.Flush()
}

// pacerCell prints a bare pacer's p99 (ms), "-" for a run without one.
func pacerCell(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", v)
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: benchversus LABEL=FILE [LABEL=FILE …]")
		os.Exit(2)
	}
	var runs []run
	for _, arg := range os.Args[1:] {
		label, path, ok := strings.Cut(arg, "=")
		if !ok || label == "" || !utf8.ValidString(label) {
			fmt.Fprintf(os.Stderr, "benchversus: %q is not LABEL=FILE\n", arg)
			os.Exit(2)
		}
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchversus:", err)
			os.Exit(1)
		}
		r, err := parse(label, f)
		f.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchversus:", err)
			os.Exit(1)
		}
		runs = append(runs, r)
	}
	report(os.Stdout, runs)
}
