package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/client"
)

func keysLs(*flag.FlagSet) runner {
	return func(ctx context.Context, e *env, _ []string) error {
		list, err := e.c.Keys(ctx)
		if err != nil {
			return err
		}
		if e.json {
			raws := make([]json.RawMessage, len(list))
			for i, k := range list {
				raws[i] = k.Raw
			}
			b, err := json.Marshal(map[string]any{"keys": raws}) // the API's answer, key by key as sent
			if err != nil {
				return err
			}
			return rawJSON(e.stdout, b)
		}
		rows := make([][]string, 0, len(list))
		for _, k := range list {
			rows = append(rows, []string{k.Name, k.Source, strings.Join(k.Tenants, ","), fmt.Sprint(k.Admin),
				orDash(k.CreatedAt), expiry(k), orDash(k.LastUsedAt)})
		}
		return table(e.stdout, []string{"NAME", "SOURCE", "TENANTS", "ADMIN", "CREATED", "EXPIRES", "LAST USED"}, rows)
	}
}

// expiry is a key's EXPIRES cell: its time, "expired" once past.
func expiry(k client.APIKey) string {
	if k.Expired {
		return "expired " + orDash(k.ExpiresAt)
	}
	return orDash(k.ExpiresAt)
}

func keysCreate(fs *flag.FlagSet) runner {
	tenants := fs.String("tenants", "", "comma-separated glob patterns of the tenants it may act on (\"acme-*\")")
	limits := fs.String("limits", "", "comma-separated limits it may check")
	admin := fs.Bool("admin", false, "allow the admin routes")
	expires := fs.String("expires-in", "", "refused by every throttler after this long (\"720h\"; default never)")
	return func(ctx context.Context, e *env, args []string) error {
		o := client.KeyOptions{Tenants: splitList(*tenants), Limits: splitList(*limits), Admin: *admin}
		if *expires != "" {
			d, err := time.ParseDuration(*expires)
			if err != nil || d <= 0 {
				return usagef("--expires-in: want a positive duration such as 720h, got %q", *expires)
			}
			o.ExpiresAt = time.Now().Add(d)
		}
		k, err := e.c.CreateKey(ctx, args[0], o)
		if err != nil {
			return err
		}
		if e.json {
			return rawJSON(e.stdout, k.Raw)
		}
		return fields(e.stdout, "name", k.Name, "key", k.Key, "tenants", strings.Join(k.Tenants, ","),
			"admin", fmt.Sprint(k.Admin), "expires", orDash(k.ExpiresAt))
	}
}

func keysRm(*flag.FlagSet) runner {
	return func(ctx context.Context, e *env, args []string) error {
		if err := e.c.DeleteKey(ctx, args[0]); err != nil {
			return err
		}
		if !e.json {
			fmt.Fprintf(e.stdout, "revoked key %s\n", args[0])
		}
		return nil
	}
}

func reload(*flag.FlagSet) runner {
	return func(ctx context.Context, e *env, _ []string) error {
		changes, err := e.c.Reload(ctx)
		if err != nil {
			return err
		}
		if e.json {
			b, err := json.Marshal(map[string][]string{"changes": changes})
			if err != nil {
				return err
			}
			return rawJSON(e.stdout, b)
		}
		if len(changes) == 0 {
			fmt.Fprintln(e.stdout, "reloaded: no change")
		}
		for _, c := range changes {
			fmt.Fprintln(e.stdout, c)
		}
		return nil
	}
}

// splitList splits a comma-separated flag value; "" is none.
func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
