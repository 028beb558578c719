package main

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
)

func TestWithDelay(t *testing.T) {
	t.Parallel()
	body := withDelay([]byte(`{"type":"webhook","url":"http://127.0.0.1:1/r/x","event":"bench.x","payload":{"i":1}}`), 1500*time.Millisecond)
	spec, err := job.Parse(body)
	if err != nil {
		t.Fatalf("parse %s: %v", body, err)
	}
	a, err := spec.Check(job.Rules{MaxCost: 1})
	if err != nil {
		t.Fatalf("check %s: %v", body, err)
	}
	if a.Delay != 1500*time.Millisecond || spec.Event != "bench.x" {
		t.Errorf("delay %v, event %q; want 1.5s and bench.x", a.Delay, spec.Event)
	}
}

func TestIdleFlags(t *testing.T) {
	t.Parallel()
	req := []string{"-redis", "redis://x", "-throttler", "t", "-worker", "w", "-dir", "d"}
	o, err := parseFlags(req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(o.parts, "idle") || o.idleWakeups != 5 || o.idleWindow != 10*time.Second {
		t.Errorf("defaults: parts %v, %d wake-ups, window %s; want idle among the parts, 5, 10s", o.parts, o.idleWakeups, o.idleWindow)
	}
	if q, err := parseFlags(append(req, "-quick")); err != nil || q.idleWakeups != 3 || !slices.Contains(q.parts, "idle") {
		t.Errorf("-quick: %d wake-ups, parts %v (%v); want 3 and idle", q.idleWakeups, q.parts, err)
	}
	if _, err := parseFlags(append(req, "-idle-gap", "100ms")); err == nil {
		t.Error("-idle-gap 100ms accepted; each wake-up must start from ≥ 1s of idle")
	}
}

func TestMeanMax(t *testing.T) {
	t.Parallel()
	got := meanMax([]time.Duration{time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond})
	if want := "mean 2.000 ms, max 3.000 ms (3)"; got != want {
		t.Errorf("meanMax = %q, want %q", got, want)
	}
	if got := meanMax(nil); got != "n/a" {
		t.Errorf("meanMax(nil) = %q, want n/a", got)
	}
}
