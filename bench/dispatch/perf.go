package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// redisPerf samples the Redis server's CPU with perf over a run
// (-redis-perf): `perf record -e cpu-clock` on its process, so in time
// (cache misses included), not in instructions as callgrind counts them
// (scripts/hotpath-instructions). A distribution's redis-server is
// stripped but exports Redis's C functions; Lua's VM and Redis's static
// functions have no symbol, so they are one component (see components).
type redisPerf struct {
	cmd    *exec.Cmd
	file   string
	stderr bytes.Buffer
}

// startRedisPerf starts recording the single Redis server's samples into
// <dir>/perf-<name>.data.
func (e *env) startRedisPerf(ctx context.Context, name string) (*redisPerf, error) {
	pids := e.redisPIDs(ctx)
	if len(pids) != 1 {
		return nil, fmt.Errorf("-redis-perf samples one Redis server, found %d (not with -cluster)", len(pids))
	}
	p := &redisPerf{file: filepath.Join(e.o.dir, "perf-"+name+".data")}
	p.cmd = exec.Command("perf", "record", "-q", "-e", "cpu-clock", "-F", "999", "-p", strconv.Itoa(pids[0]), "-o", p.file)
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf record (apt-get install linux-perf): %w", err)
	}
	return p, nil
}

// stop ends the recording (SIGINT, as perf record expects) and returns
// the server's time by component.
func (p *redisPerf) stop() (string, error) {
	p.end()
	out, err := exec.Command("perf", "report", "-i", p.file, "--no-children", "--sort", "dso,sym", "--stdio",
		"-g", "none").Output()
	if err != nil {
		return "", fmt.Errorf("perf report: %w (perf record: %s)", err, strings.TrimSpace(p.stderr.String()))
	}
	return components(string(out))
}

// end stops perf record if it still runs (a run that failed before stop).
func (p *redisPerf) end() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	_ = p.cmd.Wait() // perf record ends with the signal's status
}

// runProfiles are a run's optional profiles: every command's time from
// the SLOWLOG (-script-profile, Sluice runs only) and Redis's perf
// samples (-redis-perf).
type runProfiles struct {
	script *scriptProfile
	perf   *redisPerf
}

// startProfiles starts the profiles the options ask for, the script
// profile only when script is true (a Sluice run).
func (e *env) startProfiles(ctx context.Context, run string, script bool) (runProfiles, error) {
	var p runProfiles
	var err error
	if e.o.scriptProfile && script {
		if p.script, err = e.startProfile(ctx); err != nil {
			return p, err
		}
	}
	if e.o.redisPerf {
		p.perf, err = e.startRedisPerf(ctx, run)
	}
	return p, err
}

// end stops perf record if stop did not (a run that failed).
func (p runProfiles) end() {
	if p.perf != nil {
		p.perf.end()
	}
}

// stop ends the profiles of the Sluice run at worker concurrency wc and
// logs them, after the run's Redis counters were read (reading the
// SLOWLOG adds commands).
func (p runProfiles) stop(ctx context.Context, e *env, wc, jobs int) error {
	if err := p.logPerf(e, fmt.Sprintf("throughput: Redis's time by component at concurrency %d", wc)); err != nil {
		return err
	}
	if p.script == nil {
		return nil
	}
	if err := p.script.stop(ctx, e); err != nil {
		return err
	}
	e.logf("throughput: where Redis's time went at concurrency %d (SLOWLOG of every command, a slower run than the table's): %s",
		wc, p.script.report(jobs, 12))
	return nil
}

// logPerf ends the perf recording, when there is one, and logs Redis's
// time by component as what.
func (p runProfiles) logPerf(e *env, what string) error {
	if p.perf == nil {
		return nil
	}
	parts, err := p.perf.stop()
	if err != nil {
		return err
	}
	e.logf("%s (perf record, cpu-clock; the whole run): %s", what, parts)
	return nil
}

// perfLine is a line of `perf report --sort dso,sym --stdio`: share,
// object, [k] (kernel) or [.] (user), symbol (an address when it has none).
var perfLine = regexp.MustCompile(`^\s*([0-9.]+)%\s+(\S+)\s+\[(.)\]\s+(\S+)`)

// perfGroups are the named parts of Redis's own C in components, by symbol.
var perfGroups = []struct {
	name string
	syms []string
}{
	{"hash-table lookups", []string{"dictFind", "dictSdsKeyCompare", "dictSdsKeyCaseCompare", "dictSdsHash",
		"dictSdsCaseHash", "siphash", "siphash_nocase", "lookupKey", "dictGetVal"}},
	{"rehashing", []string{"dictRehash", "_dictExpand", "dictExpand", "_dictExpandIfNeeded"}},
}

// components sums a perf report of Redis's samples into its parts: Lua's
// VM and Redis's unexported functions (the server's own object without a
// symbol), Redis's exported C (with perfGroups's parts of it), the kernel,
// libc, the allocator and the rest, as shares of the samples.
func components(report string) (string, error) {
	var lua, redisC, kernel, libc, alloc, other float64
	group := make([]float64, len(perfGroups))
	sc := bufio.NewScanner(strings.NewReader(report))
	lines := 0
	for sc.Scan() {
		m := perfLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		share, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return "", fmt.Errorf("perf report line %q: %w", sc.Text(), err)
		}
		lines++
		object, kind, sym := m[2], m[3], m[4]
		server := strings.HasPrefix(object, "redis-")
		switch {
		case kind == "k":
			kernel += share
		case server && strings.HasPrefix(sym, "0x"):
			lua += share
		case server:
			redisC += share
			for i, g := range perfGroups {
				for _, s := range g.syms {
					if s == sym {
						group[i] += share
					}
				}
			}
		case strings.HasPrefix(object, "libc."):
			libc += share
		case strings.Contains(object, "jemalloc") || strings.Contains(object, "malloc"):
			alloc += share
		default:
			other += share
		}
	}
	if lines == 0 {
		return "", errors.New("perf report: no samples")
	}
	var parts []string
	for i, g := range perfGroups {
		parts = append(parts, fmt.Sprintf("%s %.1f %%", g.name, group[i]))
	}
	return fmt.Sprintf("Lua's VM and unexported functions %.1f %%; Redis's exported C %.1f %% (%s); kernel %.1f %%; "+
		"libc %.1f %%; allocator %.1f %%; other %.1f %%", lua, redisC, strings.Join(parts, ", "), kernel, libc, alloc,
		other), nil
}
