// Command faultstable prints the fault matrix's rows (JSON lines written by
// internal/e2e's TestFaults under SLUICE_FAULTS_OUT) as one Markdown table.
// Usage: faultstable ROWS.jsonl
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// row is one scenario, as internal/e2e's faultRow writes it.
type row struct {
	Scenario   string  `json:"scenario"`
	Mode       string  `json:"mode"`
	Accepted   int     `json:"accepted"`
	Delivered  int     `json:"delivered"`
	Lost       int     `json:"lost"`
	LostBound  int     `json:"lost_bound"`
	Duplicates int     `json:"duplicates"`
	Refused    int     `json:"refused"`
	Unreached  int     `json:"unreached"`
	RateViol   int     `json:"rate_violations"`
	RecoveryS  float64 `json:"recovery_s"`
	CaughtUpS  float64 `json:"caught_up_s"`
	OK         bool    `json:"ok"`
	Note       string  `json:"note"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: faultstable ROWS.jsonl")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer f.Close()
	rows, err := read(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	print(os.Stdout, rows)
	for _, r := range rows {
		if !r.OK {
			os.Exit(1)
		}
	}
}

func read(r io.Reader) ([]row, error) {
	var rows []row
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var x row
		if err := json.Unmarshal(sc.Bytes(), &x); err != nil {
			return nil, fmt.Errorf("row %q: %w", sc.Text(), err)
		}
		rows = append(rows, x)
	}
	return rows, sc.Err()
}

func print(w io.Writer, rows []row) {
	slices.SortStableFunc(rows, func(a, b row) int { return strings.Compare(a.Scenario, b.Scenario) })
	fmt.Fprintln(w, "| scenario | accepted | delivered | lost (allowed) | duplicates | 503/507 | unreached | rate violations | recovery s | caught up s | ok | note |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		ok := "yes"
		if !r.OK {
			ok = "**no**"
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d (%d) | %d | %d | %d | %d | %.2f | %.2f | %s | %s |\n",
			r.Scenario, r.Accepted, r.Delivered, r.Lost, r.LostBound, r.Duplicates, r.Refused, r.Unreached,
			r.RateViol, r.RecoveryS, r.CaughtUpS, ok, r.Note)
	}
}
