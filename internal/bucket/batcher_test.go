package bucket

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/redistest"
)

func newBatcher(t *testing.T, rdb redis.UniversalClient, cfg BatcherConfig) *Batcher {
	t.Helper()
	b, err := NewBatcher(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// newCall is a call as Batcher.do makes it.
func newCall(s *script, key string, args ...any) *call {
	return &call{ctx: context.Background(), run: redisscript.Call{Script: s, Keys: []string{key}, Args: args}, done: make(chan struct{}, 1)}
}

// TestBatcherCoalescesQueuedCalls: calls waiting in the queue leave in one
// pipeline, and each caller gets its own reply.
func TestBatcherCoalescesQueuedCalls(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	ctx := context.Background()
	if err := redisscript.NewRunner(rdb, nil).Load(ctx, scripts[GCRA]); err != nil {
		t.Fatal(err)
	}
	b := newBatcher(t, rdb, BatcherConfig{Flushers: 1, MaxBatch: 64})
	now := at(base).UnixMicro()
	var calls []*call
	for i := range 40 { // call i takes i%5+1 tokens of its own key, burst 5
		c := newCall(scripts[GCRA], fmt.Sprintf("%s:%d", prefix, i), now, int64(i%5+1), int64(1_000_000), int64(5))
		calls = append(calls, c)
		b.queue <- c
	}
	b.start.Do(b.startFlushers)
	for i, c := range calls {
		<-c.done
		if c.err != nil {
			t.Fatal(c.err)
		}
		if want := [4]int64{1, int64(4 - i%5), 0, int64(i%5+1) * 1_000_000}; c.reply != want {
			t.Fatalf("call %d: reply %v, want %v", i, c.reply, want)
		}
	}
	if n := b.pipelines.Load(); n != 1 {
		t.Fatalf("40 queued calls went in %d pipelines, want 1", n)
	}
}

// TestBatcherLoadsScriptsOnNoScript: a script Redis has never seen (as after
// a restart or SCRIPT FLUSH) comes back NOSCRIPT inside the pipeline; the
// batcher loads it and retries once.
func TestBatcherLoadsScriptsOnNoScript(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	ctx := context.Background()
	s := newScript("fresh", fmt.Sprintf("-- %s\nreturn {1, 2, 3, tonumber(ARGV[1])}", prefix))
	if exists := rdb.ScriptExists(ctx, s.Hash()).Val(); exists[0] {
		t.Fatalf("script already loaded")
	}
	b := newBatcher(t, rdb, BatcherConfig{})
	got, err := b.do(ctx, s, prefix+":k", []any{42})
	if err != nil {
		t.Fatal(err)
	}
	if got != [4]int64{1, 2, 3, 42} {
		t.Fatalf("reply %v, want [1 2 3 42]", got)
	}
	if exists := rdb.ScriptExists(ctx, s.Hash()).Val(); !exists[0] {
		t.Fatalf("script not loaded after the retry")
	}
}

// TestRunnerRejectsMalformedReplies: replies of the wrong shape become
// ErrUnexpectedReply (never redis.Nil); script errors keep Redis' message.
func TestRunnerRejectsMalformedReplies(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	b := newBatcher(t, rdb, BatcherConfig{})
	cases := []struct {
		lua  string
		want error  // errors.Is
		text string // in the message
	}{
		{"return nil", ErrUnexpectedReply, "nil reply"},
		{"return 7", ErrUnexpectedReply, "want 4 integers"},
		{"return {1, 2, 3}", ErrUnexpectedReply, "want 4 integers"},
		{"return {1, 2, 3, 'x'}", ErrUnexpectedReply, "want an integer"},
		{"return redis.error_reply('ERR boom')", nil, "boom"},
	}
	for _, c := range cases {
		s := newScript("bad", "-- "+prefix+"\n"+c.lua)
		_, err := b.do(context.Background(), s, prefix+":k", nil)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s: error %v, want %v mentioning %q", c.lua, err, c.want, c.text)
		}
		if errors.Is(err, redis.Nil) {
			t.Errorf("%s: redis.Nil escaped", c.lua)
		}
	}
}

// TestSharedBatcher: limiters of different algorithms share one Batcher;
// concurrent callers on both get correct, independent decisions.
func TestSharedBatcher(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	b := newBatcher(t, rdb, BatcherConfig{Flushers: 2, MaxBatch: 16})
	var lims []*Limiter
	for _, a := range Algorithms {
		lim, err := NewLimiter(rdb, prefix, string(a), withCapacity(a, 10), WithBatcher(b))
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, lim)
	}
	now := at(30 * time.Second)
	counts := make([]int, len(lims))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 20 * len(lims) {
		wg.Go(func() {
			lim := lims[i%len(lims)]
			d, err := lim.AllowAt(context.Background(), "shared", 1, now)
			if err != nil {
				t.Error(err)
				return
			}
			if d.Allowed {
				mu.Lock()
				counts[i%len(lims)]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for i, n := range counts {
		if n != 10 {
			t.Errorf("%s: admitted %d of 20, want 10", lims[i].Name(), n)
		}
	}
	for _, lim := range lims {
		if err := lim.Close(); err != nil { // not the shared batcher's owner
			t.Fatal(err)
		}
	}
	if _, err := lims[0].AllowAt(context.Background(), "other", 1, now); err != nil {
		t.Fatalf("closing a limiter closed the shared batcher: %v", err)
	}
}

// TestCloseWhileCalling: Close during a storm of calls answers every call
// either with a decision or ErrClosed, and returns (goleak in TestMain shows
// the flushers stopped).
func TestCloseWhileCalling(t *testing.T) {
	t.Parallel()
	f := newFixture(t, withCapacity(GCRA, 1000))
	var wg sync.WaitGroup
	var once sync.Once
	decided := make(chan struct{}) // closed after the first decision
	for range 64 {
		wg.Go(func() {
			for i := range 50 {
				_, err := f.lim.AllowAt(context.Background(), "k", 1, at(time.Duration(i)*time.Second))
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				once.Do(func() { close(decided) })
			}
		})
	}
	<-decided
	if err := f.lim.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// TestContextDeadlineWhileRedisHangs: a caller whose context ends while its
// call waits on a server that never answers returns promptly with the
// context's error.
func TestContextDeadlineWhileRedisHangs(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	accepted := make(chan struct{})
	go func() { // accept and never answer
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1, ReadTimeout: 5 * time.Second})
	lim, err := NewLimiter(rdb, "hang", "lim", equivalent[GCRA])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err = lim.AllowAt(ctx, "k", 1, at(base))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want context.DeadlineExceeded", err)
	}
	if took := time.Since(began); took > time.Second {
		t.Fatalf("returned after %v, want promptly after the 50ms deadline", took)
	}
	// Unblock the flusher: no more connections, and the open ones fail.
	_ = ln.Close()
	<-accepted
	mu.Lock()
	for _, c := range conns {
		_ = c.Close()
	}
	mu.Unlock()
	if err := lim.Close(); err != nil {
		t.Fatal(err)
	}
	_ = rdb.Close()
}
