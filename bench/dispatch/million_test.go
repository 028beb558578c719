package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

// An idle interval of 10 s at 200 commands/s and 1 % of a core, then 5 s
// to the end holding 1 000 tenants' removals of 3 commands and 20 µs each,
// and the benchmark's reads (500 commands, 0.1 s of CPU): the reads and 5 s
// of the idle rate come off, the rest is the removals'.
func TestRemovalCostSubtractsIdleAndReads(t *testing.T) {
	t.Parallel()
	at := time.Unix(1000, 0)
	idle0 := statsAt{redisStats{calls: 10_000, cpu: 50}, at}
	idle1 := statsAt{redisStats{calls: 12_000, cpu: 50.1}, at.Add(10 * time.Second)}
	reads := redisStats{calls: 500, cpu: 0.1}
	end := statsAt{redisStats{calls: 12_000 + 1_000 + 3_000 + 500, cpu: 50.1 + 0.05 + 0.02 + 0.1}, at.Add(15 * time.Second)}
	calls, cpuUS, idle := removalCost(idle0, idle1, end, reads, 1000)
	if math.Abs(calls-3) > 1e-9 || math.Abs(cpuUS-20) > 1e-6 {
		t.Errorf("a tenant: %.3f commands, %.3f µs; want 3 and 20", calls, cpuUS)
	}
	if !strings.HasPrefix(idle, "200 commands/s, 1.00 % of a core, over 10s") {
		t.Errorf("idle: %q; want its rate over 10s", idle)
	}
	// Without an idle interval nothing is subtracted but the reads.
	calls, cpuUS, idle = removalCost(idle1, idle1, end, reads, 1000)
	if math.Abs(calls-4) > 1e-9 || math.Abs(cpuUS-70) > 1e-6 || idle != "none measured" {
		t.Errorf("no idle interval: %.3f commands, %.3f µs, %q; want 4, 70 and none measured", calls, cpuUS, idle)
	}
}
