package redisscript

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Runner runs Scripts, and the functions of one Redis Functions library, on
// one Redis client (a plain client, a Cluster or a Ring; the caller owns it
// and closes it). It is safe for concurrent use.
//
// A library (Redis ≥ 7.0) is loaded once per Redis and called with FCALL. A
// Redis that lost it (restarted without persistence, a new replica
// promoted) answers "Function not found": the Runner loads the library
// again, on every master of a Cluster, and retries. A Redis without
// Functions (< 7.0), or an ACL user without the function commands (NOPERM),
// turns the Runner to EVALSHA of each function's Script for good.
type Runner struct {
	rdb     redis.UniversalClient
	library func() string
	// evalOnly is set once Redis turns out to have no Functions.
	evalOnly atomic.Bool
}

// NewRunner returns a Runner on rdb. library returns the source of the
// Functions library (FUNCTION LOAD, "#!lua name=…" header first), called
// when the library is loaded; nil when the caller has none (RunFunction
// then always runs the Script).
func NewRunner(rdb redis.UniversalClient, library func() string) *Runner {
	return &Runner{rdb: rdb, library: library}
}

// Run runs s with keys and args by EVALSHA, or by EVAL (which loads it) when
// Redis does not know the script. Errors name the script; a nil reply is an
// error wrapping ErrUnexpectedReply.
func (r *Runner) Run(ctx context.Context, s *Script, keys []string, args ...any) (Reply, error) {
	v, err := r.eval(ctx, s, keys, args)
	r.learn(err)
	return reply(s.name, v, err)
}

// learn has a Cluster client reload its map of slots after a call got no
// answer from Redis (a master dead or unreachable). go-redis reloads it
// on MOVED, or when it is 10s old: until then it sends a dead master's
// slots to that address, though a replica took over — calls that the
// rest of the fleet, having learned, makes fine. The reload runs in the
// background, at most one every 200ms.
func (r *Runner) learn(err error) {
	if c, ok := r.rdb.(*redis.ClusterClient); ok && err != nil && !Answered(err) && !errors.Is(err, context.Canceled) {
		c.ReloadState(context.Background())
	}
}

// RunStatus is Run read by the convention of Sluice's scripts
// (Reply.Status): the Decoder of a StatusOK reply; a refusal as a
// *Refusal error, with the Decoder of what follows its status.
func (r *Runner) RunStatus(ctx context.Context, s *Script, keys []string, args ...any) (Decoder, error) {
	reply, err := r.Run(ctx, s, keys, args...)
	if err != nil {
		return Decoder{}, err
	}
	return reply.Status(Refused)
}

// RunFunction runs function fn of the library with keys and args by FCALL,
// loading the library when Redis does not know the function. On a Redis
// without Functions, for a user who may not call or load them, or on a
// Runner without a library, it runs s — the same code as a script — as Run
// does. Errors as Run's.
func (r *Runner) RunFunction(ctx context.Context, fn string, s *Script, keys []string, args ...any) (Reply, error) {
	if r.library == nil || r.evalOnly.Load() {
		return r.Run(ctx, s, keys, args...)
	}
	v, err := r.rdb.FCall(ctx, fn, keys, args...).Result()
	r.learn(err)
	if err == nil || !isFunctionMissing(err) && !noFunctions(err) {
		return reply(s.name, v, err)
	}
	if !noFunctions(err) {
		err = r.LoadLibrary(ctx)
		if err == nil {
			v, err = r.rdb.FCall(ctx, fn, keys, args...).Result()
			return reply(s.name, v, err)
		}
		if !noFunctions(err) {
			return Reply{}, fmt.Errorf("script %s: load the functions library: %w", s.name, err)
		}
	}
	r.evalOnly.Store(true)
	return r.Run(ctx, s, keys, args...)
}

// UsesFunctions reports whether RunFunction calls functions: false once
// Redis turned out to have no Functions (or after DisableFunctions), and on
// a Runner without a library.
func (r *Runner) UsesFunctions() bool { return r.library != nil && !r.evalOnly.Load() }

// DisableFunctions makes RunFunction run Scripts from now on, as on a Redis
// without Functions.
func (r *Runner) DisableFunctions() { r.evalOnly.Store(true) }

// LoadLibrary loads (or replaces with the same code) the Functions library
// on Redis — on every master of a Cluster, every shard of a Ring.
// RunFunction does it by itself when Redis reports a function missing;
// calling it at start saves that first round trip. Without a library it
// does nothing.
func (r *Runner) LoadLibrary(ctx context.Context) error {
	if r.library == nil {
		return nil
	}
	source := r.library()
	return ForEachMaster(ctx, r.rdb, func(ctx context.Context, c redis.UniversalClient) error {
		return c.FunctionLoadReplace(ctx, source).Err()
	})
}

// Load loads scripts with SCRIPT LOAD on every master of a Cluster and every
// shard of a Ring, and checks that Redis hashed each as expected.
func (r *Runner) Load(ctx context.Context, scripts ...*Script) error {
	return ForEachMaster(ctx, r.rdb, func(ctx context.Context, c redis.UniversalClient) error {
		for _, s := range scripts {
			sha, err := c.ScriptLoad(ctx, s.src).Result()
			if err != nil {
				return fmt.Errorf("load %s script: %w", s.name, err)
			}
			if sha != s.sha {
				return fmt.Errorf("load %s script: Redis hashed it %s, want %s: %w", s.name, sha, s.sha, ErrUnexpectedReply)
			}
		}
		return nil
	})
}

// ForEachMaster runs f on every master behind rdb — each master of a
// Cluster or shard of a Ring, concurrently; else on rdb itself — and
// returns the first error. For commands that see one node's keys (SCAN).
func ForEachMaster(ctx context.Context, rdb redis.UniversalClient, f func(context.Context, redis.UniversalClient) error) error {
	each := func(ctx context.Context, c *redis.Client) error { return f(ctx, c) }
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, each)
	case *redis.Ring:
		return c.ForEachShard(ctx, each)
	default:
		return f(ctx, rdb)
	}
}

// eval is EVALSHA, then EVAL on NOSCRIPT.
func (r *Runner) eval(ctx context.Context, s *Script, keys []string, args []any) (any, error) {
	v, err := r.rdb.EvalSha(ctx, s.sha, keys, args...).Result()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		return r.rdb.Eval(ctx, s.src, keys, args...).Result()
	}
	return v, err
}

// reply wraps a script's result: errors name the script, and redis.Nil
// becomes ErrUnexpectedReply.
func reply(script string, v any, err error) (Reply, error) {
	switch {
	case errors.Is(err, redis.Nil):
		return Reply{}, fmt.Errorf("script %s: %w: nil reply", script, ErrUnexpectedReply)
	case err != nil:
		return Reply{}, fmt.Errorf("script %s: %w", script, err)
	}
	return Reply{script: script, v: v}, nil
}

func isFunctionMissing(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.Contains(rerr.Error(), "Function not found")
}

// noFunctions reports an error saying that this Redis has no Functions
// (< 7.0: unknown command) or that the user may not use them (NOPERM).
func noFunctions(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.Contains(strings.ToLower(msg), "unknown command") || strings.HasPrefix(msg, "NOPERM")
}
