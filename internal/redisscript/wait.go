package redisscript

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Wait asks for a write's replication: WAIT Replicas Timeout after it, on
// the connection that ran it. Replicas ≤ 0 asks for nothing.
type Wait struct {
	Replicas int
	Timeout  time.Duration
}

// ErrNoWaitNode is returned when the Runner's client cannot name the
// connection a write ran on (a Ring): WAIT needs a plain client (one Redis,
// or Sentinel's failover client) or a Cluster client.
var ErrNoWaitNode = errors.New("WAIT after a script needs a single-node, Sentinel or Cluster client")

// RunFunctionWait is RunFunction followed by WAIT w.Replicas w.Timeout in
// the same pipeline, so on the same connection and node as the call: on a
// Cluster, the master of keys[0]'s slot (every key of a call shares it).
// It returns the reply and how many replicas confirmed every write the
// connection had made by then (WAIT's answer). A caller that needs a
// confirmation of writes this call did not make (the call found its work
// already done) follows it with Confirm.
//
// Like RunFunction, it loads the library or turns to EVALSHA when Redis
// asks, and then runs the call (and its WAIT) again. On a Cluster whose
// slot moved (a failover), it reloads the slot map and tries once more; a
// connection error (a dead master) has the map reloaded for the next call.
func (r *Runner) RunFunctionWait(ctx context.Context, w Wait, fn string, s *Script, keys []string, args ...any) (Reply, int, error) {
	node, err := r.nodeFor(ctx, keys)
	if err != nil {
		return Reply{}, 0, fmt.Errorf("script %s: %w", s.name, err)
	}
	v, acked, err := r.callWait(ctx, node, w, fn, s, keys, args, true)
	r.learn(err) // a dead master: learn its successor before the next call
	if c, ok := r.rdb.(*redis.ClusterClient); ok && redis.HasErrorPrefix(err, "MOVED") {
		c.ReloadState(ctx)
		if node, err = r.nodeFor(ctx, keys); err != nil {
			return Reply{}, 0, fmt.Errorf("script %s: %w", s.name, err)
		}
		v, acked, err = r.callWait(ctx, node, w, fn, s, keys, args, true)
	}
	out, err := reply(s.name, v, err)
	return out, acked, err
}

// Answered reports an error Redis answered (not a connection's: refused,
// reset, timed out): the Runner reloads a Cluster's slot map after one
// that is not, and the worker sends such a finish again.
func Answered(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// Confirm writes nothing of value — a short-lived marker key in key's
// slot, so that the connection's replication offset reaches every write
// the master had made before it — and then WAITs for w on that connection.
// It is how a caller confirms writes made earlier, on other connections:
// a request retried after a replication timeout finds its job stored and
// must still not be answered before the job reached the replicas.
func (r *Runner) Confirm(ctx context.Context, w Wait, key string) (int, error) {
	node, err := r.nodeFor(ctx, []string{key})
	if err != nil {
		return 0, err
	}
	pipe := node.Pipeline()
	pipe.Set(ctx, key, "1", time.Minute)
	wait := w.queue(ctx, pipe)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("confirm replication: %w", err)
	}
	n, err := wait.Int()
	if err != nil {
		return 0, fmt.Errorf("confirm replication: %w", err)
	}
	return n, nil
}

// callWait sends the call and WAIT in one pipeline on node, retrying once
// (when retry is set) the way RunFunction does when Redis lacks the
// library or the script.
func (r *Runner) callWait(ctx context.Context, node *redis.Client, w Wait, fn string, s *Script, keys []string, args []any, retry bool) (any, int, error) {
	useFn := r.library != nil && !r.evalOnly.Load()
	v, acked, err := pipeWait(ctx, node, w, func(p redis.Pipeliner) *redis.Cmd {
		if useFn {
			return p.FCall(ctx, fn, keys, args...)
		}
		return p.EvalSha(ctx, s.sha, keys, args...)
	})
	switch {
	case err == nil || !retry:
		return v, acked, err
	case useFn && noFunctions(err):
		r.evalOnly.Store(true)
	case useFn && isFunctionMissing(err):
		if lerr := r.LoadLibrary(ctx); lerr != nil {
			return nil, 0, fmt.Errorf("load the functions library: %w", lerr)
		}
	case !useFn && redis.HasErrorPrefix(err, "NOSCRIPT"):
		if lerr := r.Load(ctx, s); lerr != nil {
			return nil, 0, lerr
		}
	default:
		return nil, 0, err
	}
	return r.callWait(ctx, node, w, fn, s, keys, args, false)
}

// pipeWait runs call and then WAIT in one pipeline on node. The error is
// the call's (WAIT's when the call succeeded).
func pipeWait(ctx context.Context, node *redis.Client, w Wait, call func(redis.Pipeliner) *redis.Cmd) (any, int, error) {
	pipe := node.Pipeline()
	cmd := call(pipe)
	wait := w.queue(ctx, pipe)
	_, _ = pipe.Exec(ctx) // errors are read per command
	v, err := cmd.Result()
	if err != nil {
		return nil, 0, err
	}
	acked, err := wait.Int()
	if err != nil {
		return nil, 0, fmt.Errorf("WAIT %d %s: %w", w.Replicas, w.Timeout, err)
	}
	return v, acked, nil
}

// queue adds WAIT to p (Pipeliner has no Wait method).
func (w Wait) queue(ctx context.Context, p redis.Pipeliner) *redis.Cmd {
	return p.Do(ctx, "WAIT", w.Replicas, w.Timeout.Milliseconds())
}

// nodeFor is the client of the one connection pool a write of keys goes
// to: the master of keys[0]'s slot on a Cluster, the client itself else.
func (r *Runner) nodeFor(ctx context.Context, keys []string) (*redis.Client, error) {
	switch c := r.rdb.(type) {
	case *redis.ClusterClient:
		if len(keys) == 0 {
			return nil, fmt.Errorf("%w: a keyless call has no slot", ErrNoWaitNode)
		}
		node, err := c.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, fmt.Errorf("the master of key %q: %w", keys[0], err)
		}
		return node, nil
	case *redis.Client:
		return c, nil
	default:
		return nil, fmt.Errorf("%w, not %T", ErrNoWaitNode, r.rdb)
	}
}
