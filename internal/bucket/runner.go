package bucket

import (
	"context"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// ErrUnexpectedReply: a script's reply did not have the shape its header
// promises (a bug). A key of another type under the limiter's key (an
// algorithm changed under the same limit name) fails with Redis' WRONGTYPE.
// It is redisscript.ErrUnexpectedReply, the runner's.
var ErrUnexpectedReply = redisscript.ErrUnexpectedReply

// call is one script execution: it waits in a Batcher's queue, travels in a
// pipeline (redisscript.Runner.Batch), and carries its reply back to the
// caller blocked in Batcher.do.
type call struct {
	ctx context.Context // the caller's; checked once before sending
	run redisscript.Call
	// Set by the flusher before it signals done.
	reply [4]int64
	err   error
	done  chan struct{} // buffered 1: the flusher never blocks on it
}

// runBatch executes calls as one pipeline (NOSCRIPT: loaded and retried
// once, see redisscript.Runner.Batch) and answers each call. scratch is
// reused for the runner's slice of calls.
func runBatch(ctx context.Context, r *redisscript.Runner, calls []*call, scratch []*redisscript.Call) []*redisscript.Call {
	scratch = scratch[:0]
	for _, c := range calls {
		scratch = append(scratch, &c.run)
	}
	r.Batch(ctx, scratch)
	for _, c := range calls {
		c.answer()
	}
	clear(scratch) // drop the pointers into pooled calls
	return scratch
}

// answer decodes c's reply — exactly four integers — and wakes the caller.
// Errors name the script; redis.Nil never escapes (it becomes
// ErrUnexpectedReply).
func (c *call) answer() {
	c.err = c.run.Err
	if c.err == nil {
		c.err = c.run.Reply.Ints(c.reply[:])
	}
	c.done <- struct{}{}
}

// fail answers c with err.
func (c *call) fail(err error) {
	c.err = err
	c.done <- struct{}{}
}
