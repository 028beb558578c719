// The keyspace checks of the soak part: a scan of every key with its
// TTL, the keys a deployment keeps for good, and what is left behind.

package main

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
)

// describeOrphans describes up to n keys without a TTL that are neither
// permanent nor asynq's bookkeeping: its type and, for a hash, its short
// fields (a job record's state, gen, times) — for the diagnosis.
func (e *env) describeOrphans(ctx context.Context, ks keyScan, keep *regexp.Regexp, n int) []string {
	var keys []string
	for k, ttl := range ks {
		if ttl < 0 && !keep.MatchString(k) && (!strings.HasPrefix(k, "asynq:") || strings.Contains(k, ":t:")) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys[:min(n, len(keys))] {
		typ, _ := e.rdb.Type(ctx, k).Result()
		line := fmt.Sprintf("%s (%s)", k, typ)
		if typ == "hash" {
			h, _ := e.rdb.HGetAll(ctx, k).Result()
			var fields []string
			for f, v := range h {
				if len(v) <= 80 {
					fields = append(fields, f+"="+v)
				}
			}
			sort.Strings(fields)
			line += " " + strings.Join(fields, " ")
		}
		out = append(out, line)
	}
	return out
}

// keyScan is the keyspace at one time, each key with its PTTL.
type keyScan map[string]time.Duration

// scanKeys SCANs the whole keyspace and reads every key's PTTL.
func (e *env) scanKeys(ctx context.Context) (keyScan, error) {
	out := keyScan{}
	var cursor uint64
	for {
		keys, next, err := e.rdb.Scan(ctx, cursor, "*", 1000).Result()
		if err != nil {
			return nil, fmt.Errorf("scan: %w", err)
		}
		pipe := e.rdb.Pipeline()
		for _, k := range keys {
			pipe.PTTL(ctx, k)
		}
		cmds, err := pipe.Exec(ctx)
		if err != nil && len(keys) > 0 {
			return nil, fmt.Errorf("pttl: %w", err)
		}
		for i, k := range keys {
			d, _ := cmds[i].(interface{ Val() time.Duration })
			if d != nil {
				out[k] = d.Val()
			}
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

func (ks keyScan) total() int { return len(ks) }

// sluiceLeft counts the keys under Sluice's prefix that keep does not match.
func (ks keyScan) sluiceLeft(keep *regexp.Regexp) int {
	n := 0
	for k := range ks {
		if strings.HasPrefix(k, prefix+":") && !keep.MatchString(k) {
			n++
		}
	}
	return n
}

// tenantOf finds the tenant in a tenant key (…:t:<tenant>[:q|:head|:dead])
// or an idempotency key (…:idem:<tenant>:<key>).
var tenantOf = regexp.MustCompile(`:(?:t|idem):([^:]+)`)

// verdict classifies the keys: permanent (keep), asynq's own (its queues'
// bookkeeping; a task key without a TTL would be an orphan), and the rest:
// those without a TTL are orphans, those with one still expiring. It
// returns the orphans (asynq task keys included), the expiring keys, the
// tenants still holding a key, and a description.
func (ks keyScan) verdict(keep *regexp.Regexp) (orphans, expiring, tenants int, detail string) {
	var perm, asynqKeys int
	shapes := map[string]int{}
	ts := map[string]bool{}
	var examples []string
	ids := regexp.MustCompile(`[0-9a-zA-Z_-]{20,}|\d{4}-\d{2}-\d{2}`)
	for k, ttl := range ks {
		switch {
		case keep.MatchString(k):
			perm++
			continue
		case strings.HasPrefix(k, "asynq:"):
			asynqKeys++
			if ttl < 0 {
				shapes[ids.ReplaceAllString(k, "…")]++
			}
			if !strings.Contains(k, ":t:") || ttl >= 0 {
				continue
			}
		}
		if m := tenantOf.FindStringSubmatch(k); m != nil && strings.HasPrefix(k, prefix+":") {
			ts[m[1]] = true
		}
		if ttl < 0 {
			orphans++
			if len(examples) < 5 {
				examples = append(examples, k)
			}
		} else {
			expiring++
		}
	}
	var sh []string
	for s, n := range shapes {
		sh = append(sh, fmt.Sprintf("%s ×%d", s, n))
	}
	sort.Strings(sh)
	detail = fmt.Sprintf("%d permanent (meta, policy, vclock, tenant index, leases, workers, API keys), %d asynq's own (without TTL: %s), %d expiring, %d without a TTL",
		perm, asynqKeys, strings.Join(sh, ", "), expiring, orphans)
	if len(examples) > 0 {
		detail += " e.g. " + strings.Join(examples, ", ")
	}
	return orphans, expiring, len(ts), detail
}

// permanentKeys matches the keys a deployment keeps for good under p (as
// internal/e2e's expiry test lists them): meta, per shard the policy hash,
// the virtual clock, the tenant index, its name set, the backfill's
// marker and the observation aggregates' counts, the worker heartbeats, the
// dispatch leases and members.
func permanentKeys(p string) *regexp.Regexp {
	q := regexp.QuoteMeta(p)
	return regexp.MustCompile(`^` + q + `:(meta|workers|\{s\d+\}:(policy|vclock|tenants|tenant_names|tenants_backfilled|agg)|dispatch:lease:\d+|dispatch:members|\{apikeys\}:(k|used))$`)
}
