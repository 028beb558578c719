package main

import (
	"os"
	"strings"
	"testing"
)

func parseFile(t *testing.T, label, path string) run {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := parse(label, f)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The table of the build issue 13 was filed against (no Redis CPU or
// whole-machine rows of its own: the per-process row carries them).
func TestParseTheTableOfTheIssuesBuild(t *testing.T) {
	r := parseFile(t, "before", "testdata/before-744f108.txt")
	if !strings.HasPrefix(r.machine, "2 cores") {
		t.Errorf("machine = %q", r.machine)
	}
	if len(r.rows) != 2 || r.rows[0].conc != 100 || r.rows[1].conc != 400 {
		t.Fatalf("rows = %+v, want concurrency 100 and 400", r.rows)
	}
	x := r.rows[0]
	if x.sluice.jobsPerSec != 1457 || x.peer.jobsPerSec != 6876 {
		t.Errorf("jobs/s = %v / %v, want 1457 / 6876", x.sluice.jobsPerSec, x.peer.jobsPerSec)
	}
	if x.sluice.commands != 63.2 || x.peer.commands != 14 {
		t.Errorf("commands = %v / %v, want 63.2 / 14", x.sluice.commands, x.peer.commands)
	}
	// redis 471, throttler 156, worker 419, bench 118 (other 43 left out).
	if x.sluice.cpu["redis"] != 471 || x.sluice.wholeMachine() != 471+156+419+118 {
		t.Errorf("Sluice CPU = %v, whole machine %v", x.sluice.cpu, x.sluice.wholeMachine())
	}
	// The peer has no throttler or worker: redis 63, bench 161.
	if x.peer.wholeMachine() != 63+161 {
		t.Errorf("asynq whole machine = %v, want 224", x.peer.wholeMachine())
	}
}

// Today's table, whose rows also carry the hand-off spread and the
// whole-machine target, and whose cells hold "≥", "÷" and "µ".
func TestParseTodaysTable(t *testing.T) {
	r := parseFile(t, "after", "testdata/after-2925aab.txt")
	if len(r.rows) != 2 || r.rows[1].conc != 400 {
		t.Fatalf("rows = %+v, want concurrency 100 and 400", r.rows)
	}
	x := r.rows[1]
	if x.sluice.jobsPerSec != 3627 || x.peer.jobsPerSec != 5974 || x.sluice.commands != 22.6 {
		t.Errorf("row = %+v", x)
	}
	if x.sluice.wholeMachine() != 199+61+169+60 || x.peer.cpu["redis"] != 77 {
		t.Errorf("CPU = %v / %v", x.sluice.cpu, x.peer.cpu)
	}
}

func TestReportComparesEachBuildWithTheFirst(t *testing.T) {
	before := parseFile(t, "744f108", "testdata/before-744f108.txt")
	after := parseFile(t, "2925aab", "testdata/after-2925aab.txt")
	var b strings.Builder
	report(&b, []run{before, after})
	out := b.String()
	// Concurrency 100: jobs/s 3412 / 1457 = 2.34; Redis µs 197 / 471 = 0.42,
	// and against each run's asynq (197/77) / (471/63) = 0.34; whole
	// machine (197+70+184+64) / 1164 = 0.44.
	var line string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == "2925aab" && f[1] == "100" && strings.Contains(l, "×") {
			line = l
		}
	}
	want := []string{"× 2.34", "× 0.37", "× 0.42", "× 0.34", "× 0.44"}
	for _, w := range want {
		if !strings.Contains(line, w) {
			t.Errorf("change line %q lacks %q\n%s", line, w, out)
		}
	}
}

func TestParseRefusesATableWithoutThroughputRows(t *testing.T) {
	_, err := parse("x", strings.NewReader("machine: 2 cores\npart  measure  Sluice  peer  Sluice ÷ peer  target  met\n"))
	if err == nil || !strings.Contains(err.Error(), "no throughput or precision rows") {
		t.Fatalf("err = %v", err)
	}
}

// With rounds, a build's figures are its medians over its runs, each
// ratio to asynq the median of its runs' ratios; the change is taken
// between the builds' medians.
func TestReportTakesEachBuildsMedians(t *testing.T) {
	old := parseFile(t, "b#1", "testdata/before-744f108.txt")
	now := parseFile(t, "h#1", "testdata/after-2925aab.txt")
	old2 := parseFile(t, "b#2", "testdata/after-2925aab.txt") // a base as fast as the head
	old3 := parseFile(t, "b#3", "testdata/after-2925aab.txt")
	now2 := parseFile(t, "h#2", "testdata/after-2925aab.txt")
	var b strings.Builder
	report(&b, []run{old, now, old2, now2, old3})
	out := b.String()
	// b's medians over 744f108's, 2925aab's and 2925aab's tables are
	// 2925aab's, so h (2925aab's table twice) against b is × 1.00 throughout.
	var change, median string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && f[0] == "h" && f[1] == "100" {
			change = l
		}
		if len(f) > 3 && f[0] == "b" && f[1] == "median" && f[2] == "100" {
			median = l
		}
	}
	if strings.Count(change, "× 1.00") != 7 {
		t.Errorf("h against b's medians: %q, want × 1.00 throughout\n%s", change, out)
	}
	// The median row of b: jobs/s 3412 (the middle of 1457, 3412, 3412).
	if f := strings.Fields(median); len(f) < 4 || f[3] != "3412" {
		t.Errorf("b's median row %q, want 3412 jobs/s\n%s", median, out)
	}
}

// The precision part's rows: Sluice's |gap − T| percentiles, rate error
// and most in any 1 s, printed per run.
func TestParseAndReportThePrecisionPart(t *testing.T) {
	r := parseFile(t, "h#1", "testdata/precision-after.txt")
	if r.prec == nil || len(r.rows) != 0 {
		t.Fatalf("prec %+v, rows %+v; want precision only", r.prec, r.rows)
	}
	want := precision{p50: 0.174, p99: 2.358, max: 6.36, rateErr: 0.027, most: 51}
	if *r.prec != want {
		t.Errorf("precision = %+v, want %+v", *r.prec, want)
	}
	r2 := parseFile(t, "h#2", "testdata/precision-after.txt")
	r2.prec.p99 = 1.5
	var b strings.Builder
	report(&b, []run{r, r2})
	if !strings.Contains(b.String(), "h median  0.174             1.929") {
		t.Errorf("no median row of p99 (2.358 + 1.5) / 2:\n%s", b.String())
	}
}

// The precision part's control row (a bare pacer beside Sluice): its p99
// is read and printed beside Sluice's; a run without the row prints "-".
func TestParseThePrecisionPartsControl(t *testing.T) {
	r := parseFile(t, "h#1", "testdata/precision-control.txt")
	want := precision{p50: 0.231, p99: 2.972, max: 27.556, rateErr: 0.031, most: 51, pacerP99: 2.416}
	if r.prec == nil || *r.prec != want {
		t.Fatalf("precision = %+v, want %+v", r.prec, want)
	}
	old := parseFile(t, "b#1", "testdata/precision-after.txt")
	var b strings.Builder
	report(&b, []run{old, r})
	lines := strings.Split(b.String(), "\n")
	var got []string
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == "h#1" || f[0] == "b#1") {
			got = append(got, f[0]+" "+f[len(f)-1])
		}
	}
	if strings.Join(got, ", ") != "b#1 -, h#1 2.416" {
		t.Errorf("pacer cells %q, want b#1 -, h#1 2.416:\n%s", got, b.String())
	}
}
