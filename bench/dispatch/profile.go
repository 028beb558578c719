package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// scriptProfile is where Redis's time went over a run, per script: every
// command's execution time from the SLOWLOG, which logs them all while
// slowlog-log-slower-than is 0 (-script-profile). An FCALL's or EVALSHA's
// time includes the commands it ran, which Redis logs as well: the script
// rows and the plain-command rows overlap, so only each kind's own rows
// add up. Logging every command costs Redis time itself (~1 µs each), so
// the profile's run is not the table's figure: it says where the time
// goes, not how much there is.
type scriptProfile struct {
	mu    sync.Mutex
	calls map[string]int64 // "fcall <script>", "evalsha <sha prefix>" or a command
	usec  map[string]int64
	saved map[string][2]string // per master: slowlog-log-slower-than and slowlog-max-len before
}

// slowlogMax bounds the entries kept: a throughput run of 20 000 jobs logs
// ~30 commands a job.
const slowlogMax = 2_000_000

// startProfile makes every master log every command from now on.
func (e *env) startProfile(ctx context.Context) (*scriptProfile, error) {
	p := &scriptProfile{calls: map[string]int64{}, usec: map[string]int64{}, saved: map[string][2]string{}}
	err := e.eachMaster(ctx, func(ctx context.Context, addr string, c redis.Cmdable) error {
		was, err := c.ConfigGet(ctx, "slowlog-*").Result()
		if err != nil {
			return fmt.Errorf("config get slowlog %s: %w", addr, err)
		}
		p.mu.Lock()
		p.saved[addr] = [2]string{was["slowlog-log-slower-than"], was["slowlog-max-len"]}
		p.mu.Unlock()
		for _, kv := range [][2]string{{"slowlog-max-len", fmt.Sprint(slowlogMax)}, {"slowlog-log-slower-than", "0"}} {
			if err := c.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
				return fmt.Errorf("config set %s %s: %w", kv[0], addr, err)
			}
		}
		return c.SlowLogReset(ctx).Err()
	})
	return p, err
}

// stop reads every master's log into p and restores its settings.
func (p *scriptProfile) stop(ctx context.Context, e *env) error {
	return e.eachMaster(ctx, func(ctx context.Context, addr string, c redis.Cmdable) error {
		saved := p.saved[addr]
		if err := c.ConfigSet(ctx, "slowlog-log-slower-than", saved[0]).Err(); err != nil {
			return fmt.Errorf("config set slowlog-log-slower-than %s: %w", addr, err)
		}
		logs, err := c.SlowLogGet(ctx, slowlogMax).Result()
		if err != nil {
			return fmt.Errorf("slowlog get %s: %w", addr, err)
		}
		p.mu.Lock()
		for _, l := range logs {
			k := profileKey(l.Args)
			p.calls[k]++
			p.usec[k] += l.Duration.Microseconds()
		}
		p.mu.Unlock()
		if err := c.SlowLogReset(ctx).Err(); err != nil {
			return fmt.Errorf("slowlog reset %s: %w", addr, err)
		}
		return c.ConfigSet(ctx, "slowlog-max-len", saved[1]).Err()
	})
}

// profileKey names a logged command: a Sluice function by its script
// (the library version dropped), a script by its SHA's start, else the
// command.
func profileKey(args []string) string {
	if len(args) == 0 {
		return "?"
	}
	cmd := strings.ToLower(args[0])
	if len(args) < 2 {
		return cmd
	}
	switch cmd {
	case "fcall", "fcall_ro":
		name := args[1]
		// sluice_<version>_<script>: the script's name may hold "_" too.
		if parts := strings.SplitN(name, "_", 3); len(parts) == 3 && parts[0] == "sluice" {
			name = parts[2]
		}
		return cmd + " " + name
	case "evalsha", "eval":
		sha := args[1]
		if len(sha) > 8 {
			sha = sha[:8]
		}
		return cmd + " " + sha
	}
	return cmd
}

// report lists the scripts (FCALL and EVALSHA rows) by time, then the n
// plain commands with the most time, per job of jobs: "name calls/job
// µs/job".
func (p *scriptProfile) report(jobs int, n int) string {
	keys := slices.Collect(maps.Keys(p.usec))
	slices.SortFunc(keys, func(a, b string) int { return int(p.usec[b] - p.usec[a]) })
	var scripts, plain strings.Builder
	var scriptUS int64
	shown := 0
	for _, k := range keys {
		line := fmt.Sprintf(" %s %.2f/job %.1fµs/job;", k, float64(p.calls[k])/float64(jobs), float64(p.usec[k])/float64(jobs))
		if strings.ContainsRune(k, ' ') {
			scripts.WriteString(line)
			scriptUS += p.usec[k]
		} else if shown < n {
			plain.WriteString(line)
			shown++
		}
	}
	return fmt.Sprintf("scripts, %.1f µs/job together:%s\n  commands (inside scripts too):%s",
		float64(scriptUS)/float64(jobs), scripts.String(), plain.String())
}
