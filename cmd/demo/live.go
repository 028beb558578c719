package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// row is one tenant's line of the live table.
type row struct {
	Tenant    string
	Limit     string // "50/s burst 5 conc 10"
	Delivered int
	Jobs      int
	PerSecond int          // deliveries in the last second
	State     *tenantState // nil when the last GET failed
	Other     int          // deliveries of other runs, duplicates, bad signatures
	BadSig    int
}

// ANSI control sequences used by the live table.
const (
	ansiUp        = "\x1b[%dA" // cursor up n lines
	ansiClearLine = "\x1b[K"   // clear to the end of the line
	ansiBold      = "\x1b[1m"
	ansiReset     = "\x1b[0m"
)

// table draws the live table once per call. In place (a terminal), each
// call moves the cursor back over the previous drawing and overwrites it;
// otherwise it prints one compact line per call.
type table struct {
	w       io.Writer
	inPlace bool
	lines   int // lines drawn by the previous call, in place
}

func (t *table) draw(elapsed time.Duration, rows []row) {
	if !t.inPlace {
		t.drawLine(elapsed, rows)
		return
	}
	var b strings.Builder
	if t.lines > 0 {
		fmt.Fprintf(&b, ansiUp, t.lines)
	}
	lines := tableLines(elapsed, rows)
	for i, l := range lines {
		if i == 0 {
			l = ansiBold + l + ansiReset
		}
		b.WriteString("\r" + l + ansiClearLine + "\n")
	}
	t.lines = len(lines)
	_, _ = io.WriteString(t.w, b.String())
}

func (t *table) drawLine(elapsed time.Duration, rows []row) {
	var b strings.Builder
	fmt.Fprintf(&b, "t=%5.1fs", elapsed.Seconds())
	for _, r := range rows {
		backlog := "?"
		if r.State != nil {
			backlog = fmt.Sprint(r.State.Backlog)
		}
		fmt.Fprintf(&b, "  %s %d/%d (%d/s, backlog %s)", r.Tenant, r.Delivered, r.Jobs, r.PerSecond, backlog)
	}
	fmt.Fprintln(t.w, b.String())
}

// progressWidth is the width of the progress bar in cells.
const progressWidth = 24

// tableLines renders the table: a header, one line per tenant, a total.
func tableLines(elapsed time.Duration, rows []row) []string {
	const format = "%-10s %-22s %11s  %-*s %6s %8s %8s  %s"
	lines := []string{
		fmt.Sprintf(format, "tenant", "limit", "delivered", progressWidth, "progress", "now/s", "backlog", "running", ""),
	}
	var delivered, jobs, perSecond int
	var backlog int64
	for _, r := range rows {
		delivered, jobs, perSecond = delivered+r.Delivered, jobs+r.Jobs, perSecond+r.PerSecond
		backlogText, running, note := "?", "?", ""
		if r.State != nil {
			backlog += r.State.Backlog
			backlogText, running = fmt.Sprint(r.State.Backlog), fmt.Sprint(r.State.Running)
			note = stateNote(r)
		}
		lines = append(lines, fmt.Sprintf(format, r.Tenant, r.Limit, fmt.Sprintf("%d/%d", r.Delivered, r.Jobs),
			progressWidth, bar(r.Delivered, r.Jobs), fmt.Sprint(r.PerSecond), backlogText, running, note))
	}
	lines = append(lines, fmt.Sprintf(format, "total", fmt.Sprintf("t = %.0f s", elapsed.Seconds()),
		fmt.Sprintf("%d/%d", delivered, jobs), progressWidth, bar(delivered, jobs), fmt.Sprint(perSecond), fmt.Sprint(backlog), "", ""))
	return lines
}

// stateNote flags what slows a tenant down or went wrong.
func stateNote(r row) string {
	var notes []string
	s := r.State
	if s.PausedUntil != nil {
		notes = append(notes, "paused until "+*s.PausedUntil)
	}
	if s.AdminPaused {
		notes = append(notes, "paused by an operator")
	}
	if s.Disabled {
		notes = append(notes, "disabled (410)")
	}
	if s.DeadLetters > 0 {
		notes = append(notes, fmt.Sprintf("%d dead", s.DeadLetters))
	}
	if r.BadSig > 0 {
		notes = append(notes, fmt.Sprintf("%d bad signatures", r.BadSig))
	}
	return strings.Join(notes, ", ")
}

// bar is a progress bar of progressWidth cells.
func bar(done, total int) string {
	full := 0
	if total > 0 {
		full = min(done*progressWidth/total, progressWidth)
	}
	return strings.Repeat("█", full) + strings.Repeat("░", progressWidth-full)
}
