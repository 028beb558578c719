package store

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// The scripts built on lib.lua also form one Redis Functions library
// (Redis ≥ 7.0), which the Store calls with FCALL. A library is loaded once
// per Redis: its prologue — the built-in defaults, some fifty helper
// closures, the key builders — is defined at load instead of on every call
// as an EVAL script's is (~10 µs of Redis CPU per call, a third of a
// claim's). Each function sets KEYS and ARGV, runs begin() (lib.lua: the
// call's clock, keys and cleared caches) and then the script's body.
//
// The library's name and its functions' names carry a hash of its source,
// so processes of different versions share a Redis without replacing each
// other's code. A Redis that lost its functions (restarted without
// persistence, a new replica promoted) answers "Function not found": the
// Store's runner (redisscript.Runner) loads the library again (on every
// master of a Cluster) and retries. A Redis without Functions (< 7.0), or an
// ACL user without the function commands, gets the EVAL scripts.

// library returns the library's version — the first 12 hex digits of the
// SHA-1 of its source without the header and registrations; it names the
// library and its functions — and its source. Built on first use, once every
// script is assembled.
var library = sync.OnceValues(buildLibrary)

// buildLibrary assembles the library: KEYS and ARGV as upvalues set per
// call, the prologue, one local function per script body and its
// registration.
func buildLibrary() (version, source string) {
	var b strings.Builder
	b.WriteString("local KEYS, ARGV = {}, {}\n")
	b.WriteString(prologue())
	for _, s := range libScripts {
		fmt.Fprintf(&b, "local function body_%s()\n%s\nend\n", s.name, s.body)
	}
	for _, s := range libScripts { // the flags are part of the code, so of the version
		if allowOOM[s.name] {
			fmt.Fprintf(&b, "-- %s: allow-oom\n", s.name)
		}
	}
	sum := sha1.Sum([]byte(b.String()))
	version = hex.EncodeToString(sum[:])[:12]
	for _, s := range libScripts {
		fmt.Fprintf(&b, "redis.register_function{function_name = '%s', callback = function(keys, args)\n"+
			"  KEYS, ARGV = keys, args\n"+
			"  local err = begin()\n"+
			"  if err then return err end\n"+
			"  return body_%s()\nend, flags = {%s}}\n", qualified(version, s.name), s.name, functionFlags(s.name))
	}
	return version, "#!lua name=sluice_" + version + "\n" + b.String()
}

// allowOOM names the functions registered with the allow-oom flag. Redis
// at its maxmemory (noeviction) refuses FCALL of a function without flags
// before it runs, even one that only deletes, and runs one flagged
// allow-oom — writes included — regardless. Flagged: what delivery needs
// and what frees memory — the pass (releases, sweeps, index trims) and
// plan_apply (a planned pass's releases), claim,
// finish (which drops a succeeded job's body and starts its retention),
// cancel, the callback set's take and done, and the reads (secrets_read
// signs webhooks; the tenant views, the finished count and the
// aggregates (observe) serve the console and the metrics; some of them
// trim what they find empty, so no-writes would not do). Not flagged, so
// refused by Redis itself past maxmemory: everything that adds state —
// enqueue, replays, policy and secret writes, pause and resume, the index
// backfill. A Redis without Functions runs the EVAL scripts, which Redis
// refuses at their first write that may grow memory (the API's
// redis.memory_high_water keeps them under the limit).
var allowOOM = map[string]bool{
	"pass": true, "plan_apply": true, "claim": true, "finish": true, "cancel": true,
	"callback_take": true, "callback_done": true,
	"secrets_read": true, "dead_letters": true, "tenant_state": true, "tenant_list": true,
	"tenant_names": true, "tenant_views": true, "tenant_keys": true, "finished": true,
	"observe": true,
}

// functionFlags is the Lua list of script's function flags.
func functionFlags(script string) string {
	if allowOOM[script] {
		return "'allow-oom'"
	}
	return ""
}

// qualified is the function name of script in the library of version.
func qualified(version, script string) string { return "sluice_" + version + "_" + script }

// call runs sc with keys and argv through the Store's runner: by FCALL of
// its function, loading the library when Redis does not know it, or by
// EVALSHA when Redis has no Functions, the user may not call or load them
// (ACL: NOPERM), or sc is a standalone script.
func (s *Store) call(ctx context.Context, sc *script, keys []string, argv []any) (redisscript.Reply, error) {
	if sc.body == "" {
		return s.runner.Run(ctx, sc.eval, keys, argv...)
	}
	version, _ := library()
	return s.runner.RunFunction(ctx, qualified(version, sc.name), sc.eval, keys, argv...)
}

// librarySource is the library's source, for the runner to load.
func librarySource() string {
	_, source := library()
	return source
}

// LoadFunctions loads (or replaces with the same code) the Functions library
// on Redis — on every master of a Cluster. The Store does it by itself when
// Redis reports a function missing; calling it at start saves that first
// round trip.
func (s *Store) LoadFunctions(ctx context.Context) error {
	if err := s.runner.LoadLibrary(ctx); err != nil {
		return fmt.Errorf("load the dispatch functions library: %w", err)
	}
	return nil
}
