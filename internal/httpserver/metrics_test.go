package httpserver

import (
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The live heap is exported beside client_golang's defaults, and is what a
// GC found live: at least what this test keeps reachable.
func TestRegisterProcessMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	RegisterProcessMetrics(reg)
	keep := make([]byte, 8<<20)
	for i := range keep {
		keep[i] = byte(i)
	}
	runtime.GC()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if m := mf.GetMetric(); len(m) == 1 && m[0].GetGauge() != nil {
			got[mf.GetName()] = m[0].GetGauge().GetValue()
		}
	}
	if live := got["go_gc_heap_live_bytes"]; live < float64(len(keep)) {
		t.Errorf("go_gc_heap_live_bytes = %v, want ≥ %d (a slice kept live across a GC)", live, len(keep))
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_resident_memory_bytes"} {
		if _, ok := got[name]; !ok {
			t.Errorf("%s not exported", name)
		}
	}
	runtime.KeepAlive(keep)
}
