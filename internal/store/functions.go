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
	sum := sha1.Sum([]byte(b.String()))
	version = hex.EncodeToString(sum[:])[:12]
	for _, s := range libScripts {
		fmt.Fprintf(&b, "redis.register_function('%s', function(keys, args)\n"+
			"  KEYS, ARGV = keys, args\n"+
			"  local err = begin()\n"+
			"  if err then return err end\n"+
			"  return body_%s()\nend)\n", qualified(version, s.name), s.name)
	}
	return version, "#!lua name=sluice_" + version + "\n" + b.String()
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
