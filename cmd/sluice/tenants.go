package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/client"
)

func tenantRow(t *client.Tenant) []string {
	state := "active"
	switch {
	case t.Disabled:
		state = "disabled"
	case t.AdminPaused || t.AdminPausedUntil != nil || t.PausedUntil != nil:
		state = "paused"
	}
	age := "-"
	if t.OldestJobAgeS != nil {
		age = (time.Duration(*t.OldestJobAgeS * float64(time.Second))).Round(time.Second).String()
	}
	return []string{t.Tenant, state, itoa(t.Backlog), itoa(t.Running), itoa(t.DeadLetters),
		strconv.FormatFloat(t.EffectiveRate, 'f', -1, 64), age}
}

var tenantHeaders = []string{"TENANT", "STATE", "BACKLOG", "RUNNING", "DEAD", "RATE/S", "OLDEST"}

func tenantsLs(fs *flag.FlagSet) runner {
	var q client.TenantQuery
	fs.StringVar(&q.Sort, "sort", "name", "order: name, backlog (largest first) or oldest (oldest queued job first)")
	fs.StringVar(&q.State, "state", "", "only paused, disabled or active tenants")
	fs.StringVar(&q.Prefix, "prefix", "", "only tenants whose id begins with this")
	limit := fs.Int("limit", 0, "list at most this many (0: all)")
	return func(ctx context.Context, e *env, _ []string) error {
		if *limit < 0 {
			return usagef("--limit: want 0 (all) or more, got %d", *limit)
		}
		var rows [][]string
		n, cursor := 0, ""
		for {
			if *limit > 0 {
				q.Limit = min(*limit-n, 1000)
			}
			page, err := e.c.ListTenants(ctx, q, cursor)
			if err != nil {
				return err
			}
			if e.json {
				if err := rawJSON(e.stdout, page.Raw); err != nil {
					return err
				}
			}
			for i := range page.Tenants {
				rows = append(rows, tenantRow(&page.Tenants[i]))
			}
			n += len(page.Tenants)
			if cursor = page.Cursor; cursor == "" || (*limit > 0 && n >= *limit) {
				break
			}
		}
		if e.json {
			return nil
		}
		return table(e.stdout, tenantHeaders, rows)
	}
}

func showTenant(e *env, t *client.Tenant) error {
	if e.json {
		return rawJSON(e.stdout, t.Raw)
	}
	r := tenantRow(t)
	return fields(e.stdout, "tenant", t.Tenant, "state", r[1], "policy version", itoa(t.Version),
		"backlog", fmt.Sprintf("%d (%d bytes)", t.Backlog, t.BacklogBytes), "queued", itoa(t.Queued),
		"released", itoa(t.Released), "running", itoa(t.Running), "dead letters", itoa(t.DeadLetters),
		"effective rate", r[5]+"/s", "admit tokens", itoa(t.AdmitTokens), "paused until", orDash(t.PausedUntil),
		"admin paused until", orDash(t.AdminPausedUntil), "next eligible", orDash(t.NextEligibleAt),
		"oldest job", r[6], "policy", compactJSON(t.Policy))
}

func tenantsPause(fs *flag.FlagSet) runner {
	until := fs.String("until", "", "pause until this RFC 3339 time (default: until resumed)")
	forD := fs.Duration("for", 0, "pause for this long (default: until resumed)")
	return func(ctx context.Context, e *env, args []string) error {
		var at time.Time
		switch {
		case *until != "" && *forD != 0:
			return usagef("--until and --for: give one")
		case *until != "":
			t, err := time.Parse(time.RFC3339, *until)
			if err != nil {
				return usagef("--until: not an RFC 3339 time: %q", *until)
			}
			at = t
		case *forD < 0:
			return usagef("--for: want a positive duration, got %s", *forD)
		case *forD > 0:
			at = time.Now().Add(*forD)
		}
		t, err := e.c.PauseTenant(ctx, args[0], at)
		if err != nil {
			return err
		}
		return showTenant(e, t)
	}
}

func tenantsPolicy(fs *flag.FlagSet) runner {
	set := fs.String("set", "", `replace the tenant's overrides with this JSON object, e.g. '{"rate":"10/s","burst":20}'`)
	file := fs.String("file", "", "replace the tenant's overrides with the JSON object in this file (- for stdin)")
	ifMatch := fs.Int64("if-match", client.AnyVersion, "replace only if the policy is at this version (the tenant's \"policy version\")")
	return func(ctx context.Context, e *env, args []string) error {
		var body []byte
		switch {
		case *set != "" && *file != "":
			return usagef("--set and --file: give one")
		case *set != "":
			body = []byte(*set)
		case *file != "":
			var err error
			if body, err = readFile(e.stdin, *file); err != nil {
				return err
			}
		default: // show the effective policy
			t, err := e.c.GetTenant(ctx, args[0])
			if err != nil {
				return err
			}
			if e.json {
				return rawJSON(e.stdout, t.Raw)
			}
			return fields(e.stdout, "tenant", t.Tenant, "version", itoa(t.Version), "policy", compactJSON(t.Policy))
		}
		if !json.Valid(body) {
			return usagef("the policy is not valid JSON")
		}
		p, err := e.c.PutPolicy(ctx, args[0], json.RawMessage(body), *ifMatch)
		if err != nil {
			return err
		}
		if e.json {
			return rawJSON(e.stdout, p.Raw)
		}
		return fields(e.stdout, "tenant", p.Tenant, "version", itoa(p.Version), "policy", compactJSON(p.Policy))
	}
}

func tenantsLive(*flag.FlagSet) runner {
	return func(ctx context.Context, e *env, args []string) error {
		l, err := e.c.TenantLive(ctx, args[0], 0)
		if err != nil {
			return err
		}
		if e.json {
			return rawJSON(e.stdout, l.Raw)
		}
		if err := showTenant(e, &l.Tenant); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "\nrecent attempts: %d, points: %d (--json shows them)\n", len(l.RecentAttempts), len(l.Points))
		return nil
	}
}

// readFile reads name, or in when name is "-".
func readFile(in io.Reader, name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(in)
	}
	return os.ReadFile(name)
}
