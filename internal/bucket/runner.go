package bucket

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ErrUnexpectedReply: a script's reply did not have the shape its header
// promises (a bug). A key of another type under the limiter's key (an
// algorithm changed under the same limit name) fails with Redis' WRONGTYPE.
var ErrUnexpectedReply = errors.New("unexpected script reply")

// call is one script execution: it waits in a Batcher's queue, travels in a
// pipeline, and carries its reply back to the caller blocked in Batcher.do.
type call struct {
	ctx  context.Context // the caller's; checked once before sending
	s    *script
	keys []string
	args []any
	// Set by the flusher before it signals done.
	reply [4]int64
	err   error
	done  chan struct{} // buffered 1: the flusher never blocks on it
}

// runBatch executes calls as one pipeline of EVALSHA and answers each call.
// Calls that come back NOSCRIPT (a fresh Redis, a failover, SCRIPT FLUSH)
// get their scripts loaded and are retried once in a second pipeline; go-redis
// does not fall back to EVAL inside a pipeline.
func runBatch(ctx context.Context, rdb redis.UniversalClient, calls []*call) {
	cmds := pipeline(ctx, rdb, calls)
	var retry []*call
	for i, c := range calls {
		if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
			retry = append(retry, c)
			continue
		}
		c.answer(cmds[i])
	}
	if len(retry) == 0 {
		return
	}
	if err := loadScripts(ctx, rdb, retry); err != nil {
		for _, c := range retry {
			c.fail(err)
		}
		return
	}
	cmds = pipeline(ctx, rdb, retry)
	for i, c := range retry {
		c.answer(cmds[i])
	}
}

// pipeline sends one EVALSHA per call in one round trip. Errors are per
// command (a connection error marks every command).
func pipeline(ctx context.Context, rdb redis.UniversalClient, calls []*call) []*redis.Cmd {
	pipe := rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = pipe.EvalSha(ctx, c.s.sha, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	return cmds
}

// loadScripts loads the distinct scripts of calls with SCRIPT LOAD, on every
// master of a Cluster and every shard of a Ring.
func loadScripts(ctx context.Context, rdb redis.UniversalClient, calls []*call) error {
	var ss []*script
	seen := make(map[*script]bool)
	for _, c := range calls {
		if !seen[c.s] {
			seen[c.s] = true
			ss = append(ss, c.s)
		}
	}
	load := func(ctx context.Context, c *redis.Client) error { return loadOn(ctx, c, ss) }
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, load)
	case *redis.Ring:
		return c.ForEachShard(ctx, load)
	default:
		return loadOn(ctx, rdb, ss)
	}
}

func loadOn(ctx context.Context, c redis.Scripter, ss []*script) error {
	for _, s := range ss {
		sha, err := c.ScriptLoad(ctx, s.src).Result()
		if err != nil {
			return fmt.Errorf("load %s script: %w", s.name, err)
		}
		if sha != s.sha {
			return fmt.Errorf("load %s script: Redis hashed it %s, want %s: %w", s.name, sha, s.sha, ErrUnexpectedReply)
		}
	}
	return nil
}

// answer decodes cmd's reply into c and wakes the caller.
func (c *call) answer(cmd *redis.Cmd) {
	c.reply, c.err = decodeReply(c.s, cmd)
	c.done <- struct{}{}
}

// fail answers c with err.
func (c *call) fail(err error) {
	c.err = err
	c.done <- struct{}{}
}

// decodeReply checks that cmd holds an array of exactly four integers. Errors
// name the script; redis.Nil never escapes (it becomes ErrUnexpectedReply).
func decodeReply(s *script, cmd *redis.Cmd) ([4]int64, error) {
	var out [4]int64
	v, err := cmd.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return out, fmt.Errorf("run %s script: nil reply: %w", s.name, ErrUnexpectedReply)
	case err != nil:
		return out, fmt.Errorf("run %s script: %w", s.name, err)
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != len(out) {
		return out, fmt.Errorf("run %s script: reply %v (%T), want %d integers: %w", s.name, v, v, len(out), ErrUnexpectedReply)
	}
	for i, x := range arr {
		n, ok := x.(int64)
		if !ok {
			return out, fmt.Errorf("run %s script: reply[%d] = %v (%T), want an integer: %w", s.name, i, x, x, ErrUnexpectedReply)
		}
		out[i] = n
	}
	return out, nil
}
