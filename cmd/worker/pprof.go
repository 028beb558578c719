//go:build pprof

package main

import (
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof/ on http.DefaultServeMux
	"os"
	"runtime"
)

// A worker built with -tags pprof serves net/http/pprof on the address in
// $SLUICE_PPROF_LISTEN (when set; loopback, e.g. 127.0.0.1:6061), for heap
// profiles during a soak (GOFLAGS=-tags=pprof scripts/soak …). Release
// builds have no such listener. Heap profiles sample one allocation per 4
// KiB (the default, 512 KiB, is too coarse to see what grows by tens of
// kilobytes). That sampling costs ~9 % of the worker's CPU at saturation
// (runtime.mProf_Malloc in a CPU profile of bench-dispatch's throughput
// part): a CPU profile of this build overstates allocation by that much.
func init() {
	runtime.MemProfileRate = 4 << 10
	if addr := os.Getenv("SLUICE_PPROF_LISTEN"); addr != "" {
		go func() { _ = http.ListenAndServe(addr, nil) }()
	}
}
