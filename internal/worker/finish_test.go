package worker

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/store"
)

// redisErr is an error as Redis answers it (go-redis's redis.Error).
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

// A finish is sent again only when Redis gave no answer or could not take
// the call now; never for the Store's answer, another Redis error (a
// script's error would come back the same) or the finish's own deadline.
func TestFinishRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("finish job %q: script finish: %w", "j", errors.New("dial tcp 127.0.0.1:1: connect: connection refused")), true},
		{fmt.Errorf("script finish: %w", redisErr("CLUSTERDOWN The cluster is down")), true},
		{fmt.Errorf("script finish: %w", redisErr("TRYAGAIN Multiple keys request during rehashing of slot")), true},
		{fmt.Errorf("script finish: %w", redisErr("LOADING Redis is loading the dataset in memory")), true},
		{fmt.Errorf("script finish: %w", redisErr("READONLY You can't write against a read only replica.")), true},
		{fmt.Errorf("script finish: %w", redisErr("OOM command not allowed when used memory > 'maxmemory'.")), true},
		{fmt.Errorf("script finish: %w", redisErr("BUSY Redis is busy running a script.")), true},
		{fmt.Errorf("script finish: %w", redisErr("ERR sluice finish: bad arguments of attempt 1")), false},
		{fmt.Errorf("finish job %q at gen 3: %w (job is succeeded)", "j", store.ErrStale), false},
		{fmt.Errorf("finish job %q: %w", "j", store.ErrNotFound), false},
		{fmt.Errorf("finish: %w", store.ErrInvalid), false},
		{fmt.Errorf("finish: %w", store.ErrProtocol), false},
		{fmt.Errorf("script finish: %w", context.DeadlineExceeded), false},
		{context.Canceled, false},
	} {
		if got := finishRetryable(tc.err); got != tc.want {
			t.Errorf("finishRetryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
