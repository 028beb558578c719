package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

// printSummary prints each tenant's measured rate against its configured
// one, and where the chart is.
func printSummary(out io.Writer, rep *report, total int) {
	var last time.Duration
	var dups, other, bad int
	for _, t := range rep.Tenants {
		if n := len(t.Arrivals); n > 0 {
			last = max(last, t.Arrivals[n-1])
		}
		dups, other, bad = dups+t.Dups, other+t.Other, bad+t.BadSig
	}
	verified := "every signature verified"
	if len(rep.Unsigned) > 0 {
		verified = fmt.Sprintf("signatures verified but for the unsigned %v", rep.Unsigned)
	}
	fmt.Fprintf(out, "\nAll %d webhooks arrived within %.1f s of the burst (enqueued in %s); %s.\n",
		total, last.Seconds(), roundDuration(rep.Enqueued), verified)
	if dups+other+bad > 0 {
		fmt.Fprintf(out, "Also seen: %d duplicate deliveries, %d of other runs, %d refused for a bad signature.\n", dups, other, bad)
	}
	const format = "%-10s %-22s %5s  %-17s %10s %8s   %s\n"
	fmt.Fprintf(out, "\n"+format, "tenant", "configured", "jobs", "first → last", "measured", "error", "in every window Δ: ≤ burst + rate·Δ + 1?")
	for _, t := range rep.Tenants {
		l := t.State.limit()
		span := "-"
		if n := len(t.Arrivals); n > 0 {
			span = fmt.Sprintf("%.2f → %.2f s", t.Arrivals[0].Seconds(), t.Arrivals[n-1].Seconds())
		}
		check := fmt.Sprintf("yes (worst window %+.1f)", t.Excess)
		if t.Excess > 1 {
			check = fmt.Sprintf("NO: a window ran %.1f ahead", t.Excess)
		}
		fmt.Fprintf(out, format, t.Tenant, fmt.Sprintf("%s burst %d", t.State.Policy.Rate.Text, l.Burst), fmt.Sprint(len(t.Arrivals)),
			span, fmt.Sprintf("%.2f/s", t.Measured), fmt.Sprintf("%+.1f%%", 100*(t.Measured/l.Rate-1)), check)
	}
	fmt.Fprintf(out, "\nMeasured rate: (jobs − burst) / (last − burst-th arrival); windows allow %s of arrival jitter.\n", windowSlack)
	if rep.Forfeited > 0 {
		fmt.Fprintf(out, "The worker returned %d claims unsent (a tenant at its concurrency cap or paused):\n"+
			"each forfeits its slot, so the run delivers a little below the configured rates.\n", rep.Forfeited)
	}
	fmt.Fprintf(out, "Chart: %s\n", rep.Chart)
}

// stay prints how to use the running Sluice, then echoes every delivery
// that reaches the receiver until ctx ends.
func stay(ctx context.Context, out io.Writer, rc *receiver, base, api, key string, shares []share) {
	tenant := shares[0].Tenant
	fmt.Fprintf(out, "\nSluice keeps running and the receiver keeps listening; Ctrl-C stops everything. Try:\n")
	fmt.Fprintf(out, "  curl -s -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' \\\n", key)
	fmt.Fprintf(out, "       -d '{\"type\":\"webhook\",\"url\":\"%s/hooks/%s\",\"event\":\"invoice.paid\",\"payload\":{\"id\":42}}' \\\n", base, tenant)
	fmt.Fprintf(out, "       %s/v1/tenants/%s/jobs\n", api, tenant)
	fmt.Fprintf(out, "  curl -s -H 'Authorization: Bearer %s' %s/v1/tenants/%s\n", key, api, tenant)
	fmt.Fprintf(out, "Deliveries arriving from now on:\n")
	rc.echoTo(out)
	defer rc.echoTo(nil)
	<-ctx.Done()
}

// keyHint is how the printed examples show the API key: the development
// key itself, any other as $SLUICE_API_KEY.
func keyHint(key string) string {
	if key == devAPIKey {
		return key
	}
	return "$" + envAPIKey
}
