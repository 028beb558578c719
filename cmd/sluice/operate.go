package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/client"
)

func deadLs(fs *flag.FlagSet) runner {
	limit := fs.Int("limit", 50, "jobs a page (1 to 1000)")
	cursor := fs.String("cursor", "", "the page after this cursor (printed under a page that has more)")
	return func(ctx context.Context, e *env, args []string) error {
		page, err := e.c.DeadLetters(ctx, args[0], *cursor, *limit)
		if err != nil {
			return err
		}
		if e.json {
			return rawJSON(e.stdout, page.Raw)
		}
		rows := make([][]string, 0, len(page.Jobs))
		for _, j := range page.Jobs {
			last := "-"
			if n := len(j.Attempts); n > 0 {
				last = strconv.Itoa(j.Attempts[n-1].Status) + " " + j.Attempts[n-1].Error
			}
			rows = append(rows, []string{j.ID, j.Type, orDash(j.Ended), itoa(j.AttemptCount), last, firstNonEmpty(j.DeadReason, "-")})
		}
		if err := table(e.stdout, []string{"ID", "TYPE", "DIED", "ATTEMPTS", "LAST", "REASON"}, rows); err != nil {
			return err
		}
		if page.Cursor != "" {
			fmt.Fprintf(e.stdout, "more: --cursor %s\n", page.Cursor)
		}
		return nil
	}
}

// bulk runs a bulk action's calls (call, from the cursor "" on): one, or
// with all until its cursor is "", printing each answer's JSON (--json)
// or the total done ("<done> N (done|more)").
func bulk(e *env, done, more string, all bool, call func(cursor string) (int, string, json.RawMessage, error)) error {
	total, cursor := 0, ""
	for {
		n, next, raw, err := call(cursor)
		if err != nil {
			return err
		}
		total += n
		if e.json {
			if err := rawJSON(e.stdout, raw); err != nil {
				return err
			}
		}
		if next == "" || !all {
			if !e.json {
				state := "done"
				if next != "" {
					state = more
				}
				fmt.Fprintf(e.stdout, "%s %d (%s)\n", done, total, state)
			}
			return nil
		}
		cursor = next
	}
}

// parseBefore reads a --before flag: an RFC 3339 time, or "" for none.
func parseBefore(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, usagef("--before: not an RFC 3339 time: %q", v)
	}
	return t, nil
}

func deadReplay(fs *flag.FlagSet) runner {
	reason := fs.String("reason", "", "only letters dead for this reason (gone, unknown_upstream)")
	before := fs.String("before", "", "only letters dead before this RFC 3339 time")
	limit := fs.Int("limit", 0, "replay at most this many a request (default 100)")
	all := fs.Bool("all", false, "go on until every selected letter is replayed")
	return func(ctx context.Context, e *env, args []string) error {
		sel := client.DeadReplay{Reason: *reason, Limit: *limit}
		var err error
		if sel.Before, err = parseBefore(*before); err != nil {
			return err
		}
		return bulk(e, "replayed", "more remain: run again with --all", *all, func(cursor string) (int, string, json.RawMessage, error) {
			sel.Cursor = cursor
			res, err := e.c.ReplayDead(ctx, args[0], sel)
			if err != nil {
				return 0, "", nil, err
			}
			return res.Replayed, res.Cursor, res.Raw, nil
		})
	}
}

func secretsCreate(fs *flag.FlagSet) runner {
	imp := fs.String("import", "", "store this whsec_… secret instead of making one")
	expire := fs.String("expire-previous-in", "", "the tenant's other secrets stop signing after this (0: at once; default 24h)")
	return func(ctx context.Context, e *env, args []string) error {
		o := client.SecretOptions{Import: *imp}
		if *expire != "" {
			d, err := time.ParseDuration(*expire)
			if err != nil {
				return usagef("--expire-previous-in: %v", err)
			}
			o.ExpirePreviousIn = &d
		}
		s, err := e.c.CreateSecret(ctx, args[0], o)
		if err != nil {
			return err
		}
		if e.json {
			return rawJSON(e.stdout, s.Raw)
		}
		return fields(e.stdout, "id", s.ID, "secret", s.Secret, "created", orDash(s.CreatedAt))
	}
}

func secretsLs(*flag.FlagSet) runner {
	return func(ctx context.Context, e *env, args []string) error {
		list, err := e.c.Secrets(ctx, args[0])
		if err != nil {
			return err
		}
		if e.json {
			raws := make([]json.RawMessage, len(list))
			for i, s := range list {
				raws[i] = s.Raw
			}
			b, err := json.Marshal(raws) // the API's array, item by item as sent
			if err != nil {
				return err
			}
			return rawJSON(e.stdout, b)
		}
		rows := make([][]string, 0, len(list))
		for _, s := range list {
			rows = append(rows, []string{s.ID, orDash(s.CreatedAt), orDash(s.ExpiresAt)})
		}
		return table(e.stdout, []string{"ID", "CREATED", "EXPIRES"}, rows)
	}
}

func secretsRm(*flag.FlagSet) runner {
	return func(ctx context.Context, e *env, args []string) error {
		if err := e.c.DeleteSecret(ctx, args[0], args[1]); err != nil {
			return err
		}
		if !e.json {
			fmt.Fprintf(e.stdout, "deleted secret %s of %s\n", args[1], args[0])
		}
		return nil
	}
}

func upstreamRow(u *client.Upstream) []string {
	paused := "no"
	if u.Paused {
		paused = "until " + orDash(u.PausedUntil)
	}
	return []string{u.Name, u.Config.Rate, itoa(u.Config.Burst), itoa(u.Config.Concurrency), paused, itoa(u.Version), u.Source}
}

var upstreamHeaders = []string{"NAME", "RATE", "BURST", "CONCURRENCY", "PAUSED", "VERSION", "SOURCE"}

func showUpstream(e *env, u *client.Upstream) error {
	if e.json {
		return rawJSON(e.stdout, u.Raw)
	}
	if err := table(e.stdout, upstreamHeaders, [][]string{upstreamRow(u)}); err != nil {
		return err
	}
	if u.Runtime != nil {
		fmt.Fprintf(e.stdout, "\neffective rate %g/s, tokens %d, running %d, waiting by tenant %v\n",
			u.Runtime.EffectiveRate, u.Runtime.Tokens, u.Runtime.Running, u.Runtime.WaitingByTenant)
	}
	return nil
}

func upstreamsLs(fs *flag.FlagSet) runner {
	return func(ctx context.Context, e *env, _ []string) error {
		var rows [][]string
		cursor := ""
		for {
			page, err := e.c.ListUpstreams(ctx, cursor, 0)
			if err != nil {
				return err
			}
			if e.json {
				if err := rawJSON(e.stdout, page.Raw); err != nil {
					return err
				}
			}
			for i := range page.Upstreams {
				rows = append(rows, upstreamRow(&page.Upstreams[i]))
			}
			if cursor = page.Cursor; cursor == "" {
				break
			}
		}
		if e.json {
			return nil
		}
		return table(e.stdout, upstreamHeaders, rows)
	}
}

func upstreamsPut(fs *flag.FlagSet) runner {
	var cfg client.UpstreamConfig
	fs.StringVar(&cfg.Rate, "rate", "", "the upstream's rate, e.g. 100/s (required)")
	fs.Int64Var(&cfg.Burst, "burst", 0, "its burst (default: one second of rate)")
	fs.Int64Var(&cfg.Concurrency, "concurrency", 0, "at most this many jobs at once (0: no bound)")
	fs.BoolVar(&cfg.Adaptive, "adaptive", false, "cut the rate on throttled answers")
	fs.StringVar(&cfg.PauseScope, "pause-scope", "", "what a throttled answer pauses: tenant or upstream")
	fs.StringVar(&cfg.CostHeader, "cost-header", "", "the response header that reports a request's actual cost")
	ifMatch := fs.Int64("if-match", client.AnyVersion, "replace only if at this version (0: only create)")
	return func(ctx context.Context, e *env, args []string) error {
		if cfg.Rate == "" {
			return usagef("--rate is required")
		}
		u, err := e.c.PutUpstream(ctx, args[0], cfg, *ifMatch)
		if err != nil {
			return err
		}
		return showUpstream(e, u)
	}
}

func upstreamsPause(fs *flag.FlagSet) runner {
	forD := fs.Duration("for", 0, "pause for this long (default: until resumed)")
	return func(ctx context.Context, e *env, args []string) error {
		if *forD < 0 {
			return usagef("--for: want a positive duration, got %s", *forD)
		}
		u, err := e.c.PauseUpstream(ctx, args[0], *forD)
		if err != nil {
			return err
		}
		return showUpstream(e, u)
	}
}

func upstreamsRm(fs *flag.FlagSet) runner {
	ifMatch := fs.Int64("if-match", client.AnyVersion, "delete only if at this version")
	return func(ctx context.Context, e *env, args []string) error {
		if err := e.c.DeleteUpstream(ctx, args[0], *ifMatch); err != nil {
			return err
		}
		if !e.json {
			fmt.Fprintf(e.stdout, "deleted upstream %s\n", args[0])
		}
		return nil
	}
}

func limitsCheck(fs *flag.FlagSet) runner {
	cost := fs.Int64("cost", 1, "the tokens to take")
	return func(ctx context.Context, e *env, args []string) error {
		d, err := e.c.Allow(ctx, args[0], args[1], *cost)
		if err != nil {
			return err
		}
		if e.json {
			err = rawJSON(e.stdout, d.Raw)
		} else {
			err = fields(e.stdout, "allowed", yesNo(d.Allowed), "limit", itoa(d.Limit), "remaining", itoa(d.Remaining),
				"retry after", d.RetryAfter.String(), "reset after", d.ResetAfter.String())
		}
		if err == nil && !d.Allowed {
			return errRefused
		}
		return err
	}
}

func summary(*flag.FlagSet) runner {
	return func(ctx context.Context, e *env, _ []string) error {
		s, err := e.c.Summary(ctx)
		if err != nil {
			return err
		}
		if e.json {
			return rawJSON(e.stdout, s.Raw)
		}
		if err := fields(e.stdout, "at", s.At, "key", fmt.Sprintf("%s (admin: %s)", s.Key.Name, yesNo(s.Key.Admin)),
			"tenants", strconv.Itoa(s.Tenants), "backlog", itoa(s.Backlog), "running", itoa(s.Running),
			"in flight", strconv.Itoa(s.InFlight), "dead letters", itoa(s.DeadLetters), "paused", strconv.Itoa(s.Paused),
			"disabled", strconv.Itoa(s.Disabled), "deliveries", fmt.Sprintf("%.1f/s", s.DeliveriesPerS),
			"workers", fmt.Sprintf("%d (capacity %d)", s.Workers, s.WorkerCapacity)); err != nil {
			return err
		}
		if len(s.Attention) > 0 {
			fmt.Fprintln(e.stdout, "\nneeds attention:")
			rows := make([][]string, 0, len(s.Attention))
			for i := range s.Attention {
				rows = append(rows, tenantRow(&s.Attention[i]))
			}
			return table(e.stdout, tenantHeaders, rows)
		}
		return nil
	}
}
