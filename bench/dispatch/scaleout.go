package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The targets of issue 14 for the scale-out part.
const (
	clusterCostTarget   = 1.2  // Redis commands and CPU per job, Cluster ÷ single node
	busiestMasterTarget = 0.45 // the busiest master's share of the Cluster's Redis CPU (even: 1 ÷ masters)
)

// scaleOut is part 8: the throughput run (part 3's, at -concurrency) on the
// single node and on the Redis Cluster of -cluster side by side, with the
// masters' CPU during the Cluster run; then the many-tenant run on the
// Cluster (fleetRun). On 2 cores the masters share the cores: the figures
// are costs and shares, not throughput gains.
func scaleOut(ctx context.Context, e *env, t *table) error {
	ce, err := e.onCluster(ctx)
	if err != nil {
		return err
	}
	defer ce.close()
	const part = "8 scale-out"
	c := e.o.concurrency
	t.row(part, fmt.Sprintf("throughput run: %d jobs over %d tenants, worker concurrency %d", e.o.tputJobs, e.o.tputTenants, c),
		fmt.Sprintf("%d-master Cluster", len(e.o.cluster)), "single node", "Cluster ÷ single", "", "")
	single, err := sluiceThroughput(ctx, e, c)
	if err != nil {
		return fmt.Errorf("throughput on the single node: %w", err)
	}
	clustered, err := sluiceThroughput(ctx, ce, c)
	if err != nil {
		return fmt.Errorf("throughput on the Cluster: %w", err)
	}
	clusterRows(t, part, clustered, single)
	fr, err := fleetOnCluster(ctx, ce)
	if err != nil {
		t.note("scale-out: the many-tenant run: %v", err)
	} else {
		fleetRows(t, part, ce.o, fr)
	}
	t.gap()
	return nil
}

// clusterRows compares the Cluster's throughput run cl with the single
// node's s.
func clusterRows(t *table, part string, cl, s tputRun) {
	target := fmt.Sprintf("≤ %.1f × single node", clusterCostTarget)
	t.row(part, "jobs/s (the masters share the machine's cores)", fmt.Sprintf("%.0f", cl.rate()), fmt.Sprintf("%.0f", s.rate()),
		div(cl.rate(), s.rate()), "", "")
	t.row(part, "Redis commands / job (sum of masters)", fmt.Sprintf("%.1f", cl.commands()), fmt.Sprintf("%.1f", s.commands()),
		div(cl.commands(), s.commands()), target, yes(s.commands() > 0 && cl.commands() <= clusterCostTarget*s.commands()))
	t.row(part, "Redis CPU µs / job (sum of masters)", fmt.Sprintf("%.0f", cl.redisCPU()), fmt.Sprintf("%.0f", s.redisCPU()),
		div(cl.redisCPU(), s.redisCPU()), target, yes(s.redisCPU() > 0 && cl.redisCPU() <= clusterCostTarget*s.redisCPU()))
	masterRows(t, part, "(throughput run)", cl.redis.masters, cl.cpu.seconds, len(cl.arr))
	t.row(part, "CPU µs / job", cl.cpu.perJob(len(cl.arr), cpuNames...), s.cpu.perJob(len(s.arr), cpuNames...), "", "", "")
	t.row(part, "hand-off spread over hash slots", cl.spread.String(), s.spread.String(), "", "", "")
}

// masterRows are the Cluster masters' Redis CPU over an interval of
// seconds with jobs deliveries (INFO cpu of each), and the busiest one's
// share of their total, against its target.
func masterRows(t *table, part, when string, masters map[string]float64, seconds float64, jobs int) {
	addr, share := busiestMaster(masters)
	t.row(part, "Redis CPU per master "+when, formatMasters(masters, seconds, jobs), "-", "", "", "")
	t.row(part, "busiest master's share of the Redis CPU "+when, fmt.Sprintf("%.1f %% (%s)", 100*share, addr), "-", "",
		fmt.Sprintf("≤ %.0f %% (even: %.1f %%)", 100*busiestMasterTarget, 100/float64(max(1, len(masters)))),
		yes(len(masters) > 1 && share <= busiestMasterTarget))
}

// busiestMaster is the master with the most CPU (the first address of a
// tie) and its share of the total, 0…1; "", 0 when there is no CPU.
func busiestMaster(masters map[string]float64) (addr string, share float64) {
	var total, most float64
	for _, a := range slices.Sorted(maps.Keys(masters)) {
		cpu := max(0, masters[a])
		total += cpu
		if cpu > most {
			addr, most = a, cpu
		}
	}
	if total == 0 {
		return "", 0
	}
	return addr, most / total
}

// formatMasters lists each master's CPU, by address: % of one core over
// seconds and µs per job of jobs.
func formatMasters(masters map[string]float64, seconds float64, jobs int) string {
	if len(masters) == 0 || seconds <= 0 || jobs <= 0 {
		return "-"
	}
	var parts []string
	for _, a := range slices.Sorted(maps.Keys(masters)) {
		parts = append(parts, fmt.Sprintf("%s %.0f %% of a core, %.0f µs/job", a, 100*masters[a]/seconds, masters[a]*1e6/float64(jobs)))
	}
	return strings.Join(parts, "; ")
}
