package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// table is the one table this program prints: a row per measure, Sluice
// and its peer side by side, then notes.
type table struct {
	rows  []tableRow
	notes []string
}

type tableRow struct {
	part, measure, sluice, peer, ratio, target, met string
}

func (t *table) row(part, measure, sluice, peer, ratio, target, met string) {
	t.rows = append(t.rows, tableRow{part, measure, sluice, peer, ratio, target, met})
}

// gap adds an empty row between parts.
func (t *table) gap() { t.rows = append(t.rows, tableRow{}) }

func (t *table) note(format string, args ...any) {
	t.notes = append(t.notes, fmt.Sprintf(format, args...))
}

func (t *table) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "part\tmeasure\tSluice\tpeer\tSluice ÷ peer\ttarget\tmet\t")
	for _, r := range t.rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.part, r.measure, r.sluice, r.peer, r.ratio, r.target, r.met)
	}
	tw.Flush()
	for _, n := range t.notes {
		fmt.Fprintln(w, strings.TrimRight(n, "\n"))
	}
}

func msf(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }

func div(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}
