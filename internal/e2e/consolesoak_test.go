//go:build consolesoak

package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/heapprofiler"
	"github.com/chromedp/cdproto/memory"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// The console soak (scripts/console-soak; built only with -tags consolesoak,
// not part of CI): its flags, after -args.
var (
	soakDuration = flag.Duration("duration", 60*time.Minute, "how long the pages stay open")
	soakEvery    = flag.Duration("every", 30*time.Second, "time between two samples")
	soakWarmup   = flag.Duration("warmup", 5*time.Minute, "growth is measured from the first sample at or after it")
)

// soakTenants are the soak's tenants, each fed its rate in jobs every second.
var soakTenants = map[string]int{"alpha": 5, "bravo": 3, "charlie": 2}

// consoleSample is one reading of the two pages and the throttler.
type consoleSample struct {
	at                   time.Duration
	ovHeap, tnHeap       float64 // JS heap used after a GC, bytes
	ovNodes, tnNodes     int64   // DOM nodes (Memory.getDOMCounters: detached ones too)
	ovListen, tnListen   int64   // JS event listeners
	throttlerRSS, points int64   // bytes; the tenant chart's points
}

// TestConsoleSoak opens the overview and a tenant page in headless Chromium
// against a throttler and a worker with jobs flowing for -duration, and
// every -every reads each page's JS heap (Runtime.getHeapUsage after
// HeapProfiler.collectGarbage), DOM nodes and listeners
// (Memory.getDOMCounters) and the throttler's RSS; it prints the readings
// and the growth from the first reading at or after -warmup to the last. A
// figure for docs/benchmarks.md, not an assertion.
func TestConsoleSoak(t *testing.T) {
	tenants := map[string]string{}
	for tn, r := range soakTenants {
		tenants[tn] = fmt.Sprintf("{rate: %d/s, burst: 1}", r)
	}
	c := newCluster(t, options{tenants: tenants})
	p := c.startThrottler()
	c.startWorker()
	b := newBrowser(t)
	ov, tn := b.tab(), b.tab()
	signIn(b, ov, p, adminKey)
	signIn(b, tn, p, adminKey)
	b.run(tn, "open alpha", chromedp.Navigate(p.url()+"/ui/#/tenant/alpha"), chromedp.WaitVisible(chromedp.CSS(`#tenant-stats`)))

	start := time.Now()
	var samples []consoleSample
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	next := start
	for now := start; now.Sub(start) <= *soakDuration; now = <-tick.C {
		for name, r := range soakTenants {
			c.enqueue(p, name, r)
		}
		if now.Before(next) {
			continue
		}
		next = next.Add(*soakEvery)
		s := consoleSample{at: now.Sub(start).Round(time.Second), throttlerRSS: rss(t, p.cmd.Process.Pid),
			points: int64(evalJS[int](b, tn, "points", `Number(document.querySelector('#chart').dataset.points)`))}
		s.ovHeap, s.ovNodes, s.ovListen = pageMemory(t, b, ov)
		s.tnHeap, s.tnNodes, s.tnListen = pageMemory(t, b, tn)
		samples = append(samples, s)
		fmt.Fprintf(os.Stderr, "console-soak: %s\n", s.row())
	}
	printSoak(samples, *soakWarmup)
}

// pageMemory collects the tab's garbage and reads its JS heap used and DOM
// counters.
func pageMemory(t *testing.T, b *browser, tab context.Context) (heap float64, nodes, listeners int64) {
	t.Helper()
	type mem struct {
		heap             float64
		nodes, listeners int64
	}
	m := runIn(b, tab, "memory", chromedp.Action[mem](func(ctx context.Context, tg *chromedp.Target) (mem, error) {
		if _, err := cdp.Call(ctx, tg, heapprofiler.CollectGarbage, cdp.Empty{}); err != nil {
			return mem{}, err
		}
		h, err := cdp.Call(ctx, tg, runtime.GetHeapUsage, cdp.Empty{})
		if err != nil {
			return mem{}, err
		}
		d, err := cdp.Call(ctx, tg, memory.GetDOMCounters, cdp.Empty{})
		if err != nil {
			return mem{}, err
		}
		return mem{h.UsedSize, d.Nodes, d.JsEventListeners}, nil
	}))
	return m.heap, m.nodes, m.listeners
}

// rss is the process's resident set size (/proc/<pid>/status VmRSS), bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb * 1024
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

const mb = 1 << 20

func (s consoleSample) row() string {
	return fmt.Sprintf("%s\t%.2f\t%d\t%d\t%.2f\t%d\t%d\t%d\t%.1f", s.at, s.ovHeap/mb, s.ovNodes, s.ovListen,
		s.tnHeap/mb, s.tnNodes, s.tnListen, s.points, float64(s.throttlerRSS)/mb)
}

// printSoak prints the samples as a table and the growth from the first
// sample at or after warmup to the last.
func printSoak(samples []consoleSample, warmup time.Duration) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "t\toverview heap MB\tnodes\tlisteners\ttenant heap MB\tnodes\tlisteners\tchart points\tthrottler RSS MB\t")
	for _, s := range samples {
		fmt.Fprintln(w, s.row()+"\t")
	}
	w.Flush()
	var from *consoleSample
	for i := range samples {
		if samples[i].at >= warmup {
			from = &samples[i]
			break
		}
	}
	if from == nil {
		fmt.Println("no sample after the warm-up")
		return
	}
	to := samples[len(samples)-1]
	g := func(a, b float64) string { return fmt.Sprintf("%+.1f%%", 100*(b-a)/a) }
	fmt.Printf("growth %s → %s: overview heap %s, nodes %+d; tenant heap %s, nodes %+d; throttler RSS %s\n",
		from.at, to.at, g(from.ovHeap, to.ovHeap), to.ovNodes-from.ovNodes, g(from.tnHeap, to.tnHeap),
		to.tnNodes-from.tnNodes, g(float64(from.throttlerRSS), float64(to.throttlerRSS)))
}
