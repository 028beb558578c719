package main

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// chart is what the SVG shows: per tenant, cumulative deliveries against
// time since the burst, with the burst itself at t = 0.
type chart struct {
	Total    int           // jobs enqueued in the burst
	Enqueued time.Duration // how long the burst's requests took
	Series   []series
}

// series is one tenant's line.
type series struct {
	Tenant   string
	Jobs     int
	Limit    limit
	RateText string          // the configured rate as the API shows it
	Arrivals []time.Duration // sorted, since the burst
	Measured float64         // measuredRate of Arrivals
}

// Chart geometry, in SVG user units (px).
const (
	chartW, chartH       = 960, 600
	plotL, plotR         = 78, 820 // plot area's left and right edges
	plotT, plotB         = 150, 534
	legendY              = 104 // baseline of the first legend row
	legendRow            = 20  // legend row height
	charW                = 6.8 // estimated width of a 13 px character
	endLabelGap          = 16  // least vertical distance between end labels
	chartFont            = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif"
	burstColor, axisGrey = "#374151", "#9ca3af"
)

// palette colours the series in order (colour-blind-safe Okabe–Ito hues).
var palette = []string{"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9"}

// scale maps data to plot coordinates.
type scale struct {
	tMax float64 // seconds at plotR
	yMax float64 // deliveries at plotT
}

func (s scale) x(t time.Duration) float64 {
	return plotL + max(t.Seconds(), 0)/s.tMax*(plotR-plotL)
}

func (s scale) y(n float64) float64 { return plotB - n/s.yMax*(plotB-plotT) }

// saveChart writes the chart of rep to path and returns its absolute path.
func saveChart(path string, rep *report, total int) (string, error) {
	c := chart{Total: total, Enqueued: rep.Enqueued}
	for _, t := range rep.Tenants {
		c.Series = append(c.Series, series{Tenant: t.Tenant, Jobs: t.Jobs, Limit: t.State.limit(),
			RateText: t.State.Policy.Rate.Text, Arrivals: t.Arrivals, Measured: t.Measured})
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("chart: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return "", fmt.Errorf("chart: %w", err)
	}
	f, err := os.Create(abs)
	if err != nil {
		return "", fmt.Errorf("chart: %w", err)
	}
	if err := writeSVG(f, c); err != nil {
		f.Close()
		return "", fmt.Errorf("chart: write %s: %w", abs, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("chart: write %s: %w", abs, err)
	}
	return abs, nil
}

// writeSVG draws c as a standalone SVG document: a title, a legend row, the
// grid and axes, the burst marker at t = 0 (a bar as high as the largest
// tenant's backlog), and per tenant a <g class="series" data-tenant="…">
// holding the enqueued level (dashed), the configured rate from t = 0
// (dotted) and the cumulative deliveries (solid step line).
func writeSVG(w io.Writer, c chart) error {
	bw := bufio.NewWriter(w)
	sc := newScale(c)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	p(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="13">`+"\n",
		chartW, chartH, chartW, chartH, esc(chartFont))
	p(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	p(`<text x="%d" y="34" font-size="21" font-weight="600" fill="#111827">Sluice: bursts in, even streams out</text>`+"\n", plotL)
	p(`<text x="%d" y="58" fill="#374151">%s</text>`+"\n", plotL, esc(fmt.Sprintf(
		"%d webhooks enqueued at t = 0 (in %s); each tenant's deliveries at the receiver, cumulative",
		c.Total, roundDuration(c.Enqueued))))
	p(`<text x="%d" y="78" fill="#6b7280" font-size="12">%s</text>`+"\n", plotL, esc(
		"solid: delivered · dotted: the configured limit, burst + rate × t · dashed: enqueued"))
	writeLegend(p, c)
	writeAxes(p, sc)
	writeBurst(p, sc, c)
	for i, s := range c.Series {
		writeSeries(p, sc, s, palette[i%len(palette)])
	}
	writeEndLabels(p, sc, c)
	p("</svg>\n")
	return bw.Flush()
}

func newScale(c chart) scale {
	var tEnd time.Duration
	maxJobs := 1
	for _, s := range c.Series {
		if len(s.Arrivals) > 0 {
			tEnd = max(tEnd, s.Arrivals[len(s.Arrivals)-1])
		}
		maxJobs = max(maxJobs, s.Jobs, len(s.Arrivals))
	}
	tMax := max(tEnd.Seconds()*1.04, 1)
	return scale{tMax: niceCeil(tMax), yMax: niceCeil(float64(maxJobs) * 1.04)}
}

// writeLegend lists the tenants in rows under the title, wrapping when a
// row is full: name, configured limit, measured rate.
func writeLegend(p func(string, ...any), c chart) {
	x, y := float64(plotL), float64(legendY)
	for i, s := range c.Series {
		color := palette[i%len(palette)]
		label := fmt.Sprintf("%s: %s, burst %d → measured %.1f/s", s.Tenant, s.RateText, s.Limit.Burst, s.Measured)
		width := 24 + charW*float64(len([]rune(label))) + 22
		if x > plotL && x+width > chartW-10 {
			x, y = plotL, y+legendRow
		}
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", x, y-4, x+18, y-4, color)
		p(`<text x="%.1f" y="%.1f" fill="#111827">%s</text>`+"\n", x+24, y, esc(label))
		x += width
	}
}

func writeAxes(p func(string, ...any), sc scale) {
	p(`<g class="axes" stroke="#e5e7eb" stroke-width="1">` + "\n")
	xStep := niceStep(sc.tMax, 10)
	for t := 0.0; t <= sc.tMax+1e-9; t += xStep {
		x := sc.x(time.Duration(t * float64(time.Second)))
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>`+"\n", x, plotT, x, plotB)
		p(`<text x="%.1f" y="%d" text-anchor="middle" fill="#4b5563" stroke="none">%s</text>`+"\n", x, plotB+18, trimFloat(t))
	}
	yStep := niceStep(sc.yMax, 8)
	for n := 0.0; n <= sc.yMax+1e-9; n += yStep {
		y := sc.y(n)
		p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`+"\n", plotL, y, plotR, y)
		p(`<text x="%d" y="%.1f" text-anchor="end" fill="#4b5563" stroke="none">%s</text>`+"\n", plotL-8, y+4, trimFloat(n))
	}
	p("</g>\n")
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`+"\n", plotL, plotB, plotR, plotB, axisGrey)
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`+"\n", plotL, plotT, plotL, plotB, axisGrey)
	p(`<text x="%d" y="%d" text-anchor="middle" fill="#374151">seconds since the burst was enqueued</text>`+"\n",
		(plotL+plotR)/2, plotB+42)
	p(`<text transform="translate(22 %d) rotate(-90)" text-anchor="middle" fill="#374151">webhooks delivered (cumulative)</text>`+"\n",
		(plotT+plotB)/2)
}

// writeBurst marks the enqueue burst: a bar at t = 0, as wide as the
// enqueue requests took (at least 4 px) and as high as the largest tenant's
// share, with a label.
func writeBurst(p func(string, ...any), sc scale, c chart) {
	top := 0
	for _, s := range c.Series {
		top = max(top, s.Jobs)
	}
	x0, x1 := sc.x(0), max(sc.x(c.Enqueued), sc.x(0)+4)
	y := sc.y(float64(top))
	p(`<g class="burst">` + "\n")
	p(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" opacity="0.85"/>`+"\n", x0, y, x1-x0, plotB-y, burstColor)
	p(`<path d="M %.1f %.1f l -6 -10 h 12 z" fill="%s"/>`+"\n", (x0+x1)/2, y-3, burstColor)
	p(`<text x="%.1f" y="%.1f" fill="%s" font-weight="600">burst: %d jobs at t = 0</text>`+"\n", x1+8, y-8, burstColor, c.Total)
	p("</g>\n")
}

// writeSeries draws one tenant: enqueued level, configured rate, deliveries.
func writeSeries(p func(string, ...any), sc scale, s series, color string) {
	p(`<g class="series" data-tenant="%s">`+"\n", esc(s.Tenant))
	yJobs := sc.y(float64(s.Jobs))
	p(`<line class="enqueued" x1="%.1f" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="1.2" stroke-dasharray="7 5" opacity="0.7"/>`+"\n",
		sc.x(0), yJobs, plotR, yJobs, color)
	if s.Limit.Rate > 0 && s.Jobs > 0 {
		b := float64(min(s.Limit.Burst, int64(s.Jobs)))
		tFull := time.Duration((float64(s.Jobs) - b) / s.Limit.Rate * float64(time.Second))
		p(`<line class="configured" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="2 4" opacity="0.9"/>`+"\n",
			sc.x(0), sc.y(b), sc.x(tFull), yJobs, color)
	}
	p(`<path class="delivered" fill="none" stroke="%s" stroke-width="2.5" stroke-linejoin="round" d="M %.1f %.1f`, color, sc.x(0), sc.y(0))
	for k, a := range s.Arrivals {
		p(" H %.1f V %.1f", sc.x(a), sc.y(float64(k+1)))
	}
	p(` H %d"/>`+"\n", plotR)
	p("</g>\n")
}

// writeEndLabels names each series at the plot's right edge, at its final
// count, nudged apart so that no two overlap.
func writeEndLabels(p func(string, ...any), sc scale, c chart) {
	type label struct {
		y     float64
		text  string
		color string
	}
	labels := make([]label, len(c.Series))
	for i, s := range c.Series {
		labels[i] = label{sc.y(float64(len(s.Arrivals))), fmt.Sprintf("%s %d/%d", s.Tenant, len(s.Arrivals), s.Jobs), palette[i%len(palette)]}
	}
	slices.SortFunc(labels, func(a, b label) int { return int(math.Copysign(1, a.y-b.y)) })
	for i := 1; i < len(labels); i++ {
		labels[i].y = max(labels[i].y, labels[i-1].y+endLabelGap)
	}
	for _, l := range labels {
		p(`<text x="%d" y="%.1f" fill="%s" font-weight="600">%s</text>`+"\n", plotR+8, l.y+4, l.color, esc(l.text))
	}
}

// niceStep is a 1, 2 or 5 × 10ᵏ step giving at most about n steps up to v.
func niceStep(v float64, n int) float64 {
	raw := v / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// niceCeil rounds v up to a multiple of a nice step.
func niceCeil(v float64) float64 {
	step := niceStep(v, 8)
	return math.Ceil(v/step) * step
}

// trimFloat formats a tick value without trailing zeros.
func trimFloat(v float64) string {
	return fmt.Sprintf("%.4g", math.Round(v*1000)/1000)
}

// roundDuration rounds d for people: ms below a second.
func roundDuration(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(10 * time.Millisecond)
}

// esc escapes text for XML character data and attribute values.
func esc(s string) string { return html.EscapeString(s) }
