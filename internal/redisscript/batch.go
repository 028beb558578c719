package redisscript

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Call is one script execution of a Batch: the script, its keys and args,
// and — set by Batch — its reply or error (as Run's).
type Call struct {
	Script *Script
	Keys   []string
	Args   []any

	Reply Reply
	Err   error
}

// Batch runs calls as one pipeline of EVALSHA: one round trip, however many
// calls. Calls that come back NOSCRIPT (a fresh Redis, a failover, SCRIPT
// FLUSH) get their scripts loaded (Load) and are retried once in a second
// pipeline; go-redis does not fall back to EVAL inside a pipeline. A
// connection error fails every call of its pipeline. Batch sets each call's
// Reply or Err.
func (r *Runner) Batch(ctx context.Context, calls []*Call) {
	cmds := r.pipeline(ctx, calls)
	var retry []*Call
	for i, c := range calls {
		if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
			retry = append(retry, c)
			continue
		}
		c.Reply, c.Err = cmdReply(c.Script.name, cmds[i])
	}
	if len(retry) == 0 {
		return
	}
	if err := r.Load(ctx, distinct(retry)...); err != nil {
		for _, c := range retry {
			c.Reply, c.Err = Reply{}, err
		}
		return
	}
	cmds = r.pipeline(ctx, retry)
	for i, c := range retry {
		c.Reply, c.Err = cmdReply(c.Script.name, cmds[i])
	}
}

// pipeline sends one EVALSHA per call in one round trip. Errors are per
// command.
func (r *Runner) pipeline(ctx context.Context, calls []*Call) []*redis.Cmd {
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = pipe.EvalSha(ctx, c.Script.sha, c.Keys, c.Args...)
	}
	_, err := pipe.Exec(ctx) // errors are read per command
	r.learn(err)
	return cmds
}

// distinct is the scripts of calls, each once.
func distinct(calls []*Call) []*Script {
	var ss []*Script
	for _, c := range calls {
		seen := false
		for _, s := range ss {
			seen = seen || s == c.Script
		}
		if !seen {
			ss = append(ss, c.Script)
		}
	}
	return ss
}

// Pending is one script call queued in a caller's pipeline (Queue), for
// pipelines that mix a script with plain commands.
type Pending struct {
	script *Script
	cmd    *redis.Cmd
}

// Queue adds an EVALSHA of s to the pipeline p. After p's Exec, Result
// reads its reply; NoScript reports that Redis did not know the script (Load
// it, then run the pipeline again).
func (r *Runner) Queue(ctx context.Context, p redis.Pipeliner, s *Script, keys []string, args ...any) *Pending {
	return &Pending{script: s, cmd: p.EvalSha(ctx, s.sha, keys, args...)}
}

// NoScript reports that the call failed with NOSCRIPT.
func (p *Pending) NoScript() bool { return redis.HasErrorPrefix(p.cmd.Err(), "NOSCRIPT") }

// Result is the call's reply or error, as Run's.
func (p *Pending) Result() (Reply, error) { return cmdReply(p.script.name, p.cmd) }

func cmdReply(script string, cmd *redis.Cmd) (Reply, error) {
	v, err := cmd.Result()
	return reply(script, v, err)
}
