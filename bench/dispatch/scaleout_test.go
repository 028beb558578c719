package main

import (
	"math"
	"strconv"
	"testing"
	"time"
)

func TestBusiestMaster(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		masters map[string]float64
		addr    string
		share   float64
	}{
		{"even", map[string]float64{"a:1": 2, "b:2": 2, "c:3": 2}, "a:1", 1.0 / 3},
		{"one busy", map[string]float64{"a:1": 1, "b:2": 6, "c:3": 1}, "b:2", 0.75},
		{"a negative reading counts as 0", map[string]float64{"a:1": -1, "b:2": 3}, "b:2", 1},
		{"no CPU", map[string]float64{"a:1": 0, "b:2": 0}, "", 0},
		{"no masters", nil, "", 0},
	} {
		addr, share := busiestMaster(c.masters)
		if addr != c.addr || math.Abs(share-c.share) > 1e-12 {
			t.Errorf("%s: busiestMaster = %q, %.4f; want %q, %.4f", c.name, addr, share, c.addr, c.share)
		}
	}
}

func TestFormatMasters(t *testing.T) {
	t.Parallel()
	// 0.5 s of CPU over 2 s is 25 % of a core; over 1 000 jobs, 500 µs each.
	got := formatMasters(map[string]float64{"b:2": 0.2, "a:1": 0.5}, 2, 1000)
	want := "a:1 25 % of a core, 500 µs/job; b:2 10 % of a core, 200 µs/job"
	if got != want {
		t.Errorf("formatMasters = %q, want %q", got, want)
	}
	if got := formatMasters(map[string]float64{"a:1": 1}, 2, 0); got != "-" {
		t.Errorf("formatMasters without jobs = %q, want -", got)
	}
}

// The counters of a Cluster are summed over its masters, each master's CPU
// kept apart, and differences taken master by master.
func TestRedisStatsOverMasters(t *testing.T) {
	t.Parallel()
	info := func(calls, usec int, cpu string) redisStats {
		return parseInfo("# Commandstats\r\ncmdstat_fcall:calls=" + strconv.Itoa(calls) + ",usec=" + strconv.Itoa(usec) +
			",usec_per_call=1.00\r\n# CPU\r\nused_cpu_sys:" + cpu + "\r\nused_cpu_user:1.000000\r\n")
	}
	var before, after redisStats
	before = before.add("a:1", info(10, 100, "1.000000")).add("b:2", info(20, 200, "2.000000"))
	after = after.add("a:1", info(40, 700, "1.500000")).add("b:2", info(25, 260, "4.000000"))
	d := after.sub(before)
	if d.calls != 35 || d.cmds["fcall"] != (cmdStat{calls: 35, usec: 660}) {
		t.Errorf("difference: %d calls, fcall %+v; want 35 calls, fcall {35 660}", d.calls, d.cmds["fcall"])
	}
	if math.Abs(d.cpu-2.5) > 1e-9 || math.Abs(d.masters["a:1"]-0.5) > 1e-9 || math.Abs(d.masters["b:2"]-2) > 1e-9 {
		t.Errorf("cpu %.3f, masters %v; want 2.5, a:1 0.5, b:2 2", d.cpu, d.masters)
	}
	// used_cpu_sys moved 0.5 and 2 (used_cpu_user not at all): the kernel's share is all of it.
	if math.Abs(d.sys-2.5) > 1e-9 {
		t.Errorf("sys %.3f, want 2.5", d.sys)
	}
	// A single node has no masters map.
	var single redisStats
	if s := single.add("", info(1, 1, "1.0")); s.masters != nil || s.calls != 1 {
		t.Errorf("single node: %+v", s)
	}
}

func TestCheckBounds(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ms := func(d int) time.Time { return t0.Add(time.Duration(d) * time.Millisecond) }
	tenantOf := map[string]int{"a1": 0, "a2": 0, "a3": 0, "b1": 1, "b2": 1, "b3": 1, "c1": 2, "c2": 2}
	// 10/s, b 1: at most 2 + 10·Δ in any window. Tenant a is paced at
	// 100 ms; b's three arrive within 50 ms (3 > 2 + 0.5); c's two arrive
	// at once, which b = 1 allows; "x" is no enqueued job's.
	arr := []arrival{
		{ms(0), "a1"}, {ms(100), "a2"}, {ms(200), "a3"},
		{ms(0), "b1"}, {ms(20), "b2"}, {ms(50), "b3"},
		{ms(7), "c1"}, {ms(7), "c2"},
		{ms(9), "x"},
	}
	c := checkBounds(arr, tenantOf, 10, 1)
	if c.tenants != 3 || c.violations != 1 || c.unknown != 1 || c.worstAt != 1 || math.Abs(c.worst-0.5) > 1e-9 {
		t.Errorf("checkBounds = %+v; want 3 tenants, 1 violation (tenant 1, excess 0.5), 1 unknown", c)
	}
	// The same arrivals in another order: the check sorts each tenant's.
	rev := make([]arrival, len(arr))
	for i, a := range arr {
		rev[len(arr)-1-i] = a
	}
	if r := checkBounds(rev, tenantOf, 10, 1); r != c {
		t.Errorf("reversed arrivals: %+v, want %+v", r, c)
	}
}

// The time inside commands leaves out the script calls, whose time already
// holds that of the commands they run.
func TestInCommandsLeavesOutScriptCalls(t *testing.T) {
	t.Parallel()
	s := parseInfo("# Commandstats\r\n" +
		"cmdstat_fcall:calls=10,usec=900,usec_per_call=90.00\r\n" +
		"cmdstat_evalsha:calls=2,usec=300,usec_per_call=150.00\r\n" +
		"cmdstat_hset:calls=30,usec=120,usec_per_call=4.00\r\n" +
		"cmdstat_lpop:calls=10,usec=30,usec_per_call=3.00\r\n")
	if got := s.inCommands(); math.Abs(got-150e-6) > 1e-12 {
		t.Errorf("inCommands = %g s, want 150 µs (hset + lpop)", got)
	}
}
