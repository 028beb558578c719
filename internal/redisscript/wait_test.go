package redisscript

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestRunFunctionWaitLoadsAndWaits: on a Runner without a library the call
// is EVALSHA; a script Redis does not know is loaded and run again, and
// the WAIT after it answers how many replicas confirmed (every one, when
// asked for no more than exist or for one more).
func TestRunFunctionWaitLoadsAndWaits(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	ctx := context.Background()
	key := prefix + ":{w}:k"
	replicas := redistest.ConnectedReplicas(t, rdb, key)
	s := fresh(prefix, "redis.call('SET', KEYS[1], ARGV[1]) return tonumber(ARGV[1]) + 1")
	r := NewRunner(rdb, nil)
	for i, want := range []int{replicas, replicas + 1} {
		rep, acked, err := r.RunFunctionWait(ctx, Wait{Replicas: want, Timeout: 50 * time.Millisecond}, "unused", s, []string{key}, 41+i)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if n, err := rep.Int(); err != nil || n != int64(42+i) {
			t.Fatalf("run %d: reply %d, %v", i, n, err)
		}
		if acked != replicas {
			t.Fatalf("run %d: WAIT %d answered %d, want %d", i, want, acked, replicas)
		}
		if got := rdb.Get(ctx, key).Val(); got != strconv.Itoa(41+i) {
			t.Fatalf("run %d: the script's write: %q", i, got)
		}
	}
	if !loaded(t, rdb, s) {
		t.Fatal("script not loaded")
	}
	n, err := r.Confirm(ctx, Wait{Replicas: replicas, Timeout: 50 * time.Millisecond}, prefix+":{w}:mark")
	if err != nil || n != replicas {
		t.Fatalf("Confirm: %d, %v; want %d", n, err, replicas)
	}
}

// A Ring cannot say which connection a write went to: no WAIT, and no
// command sent.
func TestRunFunctionWaitRefusesARing(t *testing.T) {
	t.Parallel()
	_, prefix := redistest.New(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}) // never dialled
	t.Cleanup(func() { _ = ring.Close() })
	s := fresh(prefix, "return 1")
	_, _, err := NewRunner(ring, nil).RunFunctionWait(context.Background(), Wait{Replicas: 1, Timeout: time.Millisecond}, "f", s, []string{prefix + ":k"})
	if !errors.Is(err, ErrNoWaitNode) {
		t.Fatalf("err %v, want ErrNoWaitNode", err)
	}
}
