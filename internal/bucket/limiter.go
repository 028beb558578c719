package bucket

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Allower is what a caller of a limiter needs: one decision for cost tokens
// of key, at Redis' clock.
type Allower interface {
	Allow(ctx context.Context, key string, cost int64) (Decision, error)
}

var _ Allower = (*Limiter)(nil)

// Limiter is one named limit applied per key, on Redis: every decision is one
// atomic script on the key <prefix>:rl:{<name>:<key>}, which expires once
// idle (a missing key reads as full capacity). Concurrent calls, of this and
// of every Limiter sharing its Batcher, are coalesced into pipelines.
//
// A Limiter is safe for concurrent use. Close it when done.
type Limiter struct {
	name   string
	prefix string
	limit  Limit
	script *script
	p1, p2 any // ARGV[3], ARGV[4] (see scriptParams), boxed once

	batcher     *Batcher
	ownsBatcher bool
}

// Option configures NewLimiter.
type Option func(*options)

type options struct {
	batcher *Batcher
}

// WithBatcher makes the Limiter send through b, shared with other Limiters,
// instead of a Batcher of its own. b must have been built on the same client;
// closing the Limiter does not close b.
func WithBatcher(b *Batcher) Option {
	return func(o *options) { o.batcher = b }
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// NewLimiter returns a Limiter for the limit l named name (1–64 characters of
// [A-Za-z0-9._-]) whose keys live under prefix (non-empty, no hash-tag
// braces). It validates l (Limit.Validate) and that its products stay exact in
// the scripts (L·W for the sliding window and b·T for the bucket algorithms at
// most 2^52 µs, window or interval at most 2^50 µs). It does no I/O.
//
// A sliding log holds one sorted-set member per admitted token: up to
// l.Limit members per key.
func NewLimiter(rdb redis.UniversalClient, prefix, name string, l Limit, opts ...Option) (*Limiter, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkLimiter(rdb, prefix, name, l, o); err != nil {
		return nil, fmt.Errorf("new limiter %q: %w", name, err)
	}
	lim := &Limiter{name: name, prefix: prefix, limit: l, script: scripts[l.Algorithm], batcher: o.batcher}
	p1, p2 := scriptParams(l)
	lim.p1, lim.p2 = p1, p2
	if lim.batcher == nil {
		b, err := NewBatcher(rdb, BatcherConfig{})
		if err != nil {
			return nil, fmt.Errorf("new limiter %q: %w", name, err)
		}
		lim.batcher, lim.ownsBatcher = b, true
	}
	return lim, nil
}

// checkLimiter reports every problem with NewLimiter's arguments at once.
func checkLimiter(rdb redis.UniversalClient, prefix, name string, l Limit, o options) error {
	var errs []error
	if rdb == nil {
		errs = append(errs, errors.New("nil Redis client"))
	}
	if o.batcher != nil && !sameClient(o.batcher.rdb, rdb) {
		errs = append(errs, errors.New("the batcher was built on another Redis client"))
	}
	if prefix == "" || strings.ContainsAny(prefix, "{}") {
		errs = append(errs, fmt.Errorf("prefix %q must be non-empty, without { or }", prefix))
	}
	if !namePattern.MatchString(name) {
		errs = append(errs, fmt.Errorf("name %q must be 1-64 characters of [A-Za-z0-9._-]", name))
	}
	if err := l.Validate(); err != nil {
		errs = append(errs, err)
	} else if !checkExact(l) {
		errs = append(errs, fmt.Errorf("limit %+v is too large for exact integer arithmetic", l))
	}
	return errors.Join(errs...)
}

func sameClient(a, b redis.UniversalClient) bool {
	ta := reflect.TypeOf(a)
	return ta != nil && ta == reflect.TypeOf(b) && ta.Comparable() && a == b
}

// Name is the limit's name, as given to NewLimiter.
func (l *Limiter) Name() string { return l.name }

// Limit is the limit's parameters, as given to NewLimiter.
func (l *Limiter) Limit() Limit { return l.limit }

// Allow decides whether cost tokens of key may pass now, by Redis' clock
// (TIME), and takes them if so. A refusal changes nothing.
//
// Errors, wrapped with the key and the limit's name: ErrInvalidCost (cost <
// 1), ErrCostExceedsCapacity (cost > Limit().Capacity(), which would never
// pass), ErrInvalidKey (empty, or longer than MaxKeyLen bytes) — all without
// a round trip; ErrClosed after Close; ctx.Err() as soon as ctx is done (a
// call already sent may still take its tokens); Redis errors.
func (l *Limiter) Allow(ctx context.Context, key string, cost int64) (Decision, error) {
	return l.allow(ctx, key, cost, 0)
}

// AllowAt is Allow at the given time instead of Redis' clock: for tests and
// simulations with a fake clock. now must be after the Unix epoch; its
// precision is one microsecond.
func (l *Limiter) AllowAt(ctx context.Context, key string, cost int64, now time.Time) (Decision, error) {
	us := now.UnixMicro()
	if us < 1 {
		return Decision{}, fmt.Errorf("allow %q on limit %q: time %s is not after the Unix epoch", shortKey(key), l.name, now)
	}
	return l.allow(ctx, key, cost, us)
}

// Close releases the Limiter's own Batcher (not one given WithBatcher),
// after answering the calls in flight. Later calls fail with ErrClosed.
// It is idempotent.
func (l *Limiter) Close() error {
	if l.ownsBatcher {
		return l.batcher.Close()
	}
	return nil
}

// allow runs the limit's script at nowUS (0: Redis TIME).
func (l *Limiter) allow(ctx context.Context, key string, cost, nowUS int64) (Decision, error) {
	if err := l.check(key, cost); err != nil {
		return Decision{}, fmt.Errorf("allow %q on limit %q: %w", shortKey(key), l.name, err)
	}
	args := []any{nowUS, cost, l.p1, l.p2}
	reply, err := l.batcher.do(ctx, l.script, redisKey(l.prefix, l.name, key), args)
	if err != nil {
		return Decision{}, fmt.Errorf("allow %q on limit %q: %w", shortKey(key), l.name, err)
	}
	d, err := l.decision(reply)
	if err != nil {
		return Decision{}, fmt.Errorf("allow %q on limit %q: %w", shortKey(key), l.name, err)
	}
	return d, nil
}

func (l *Limiter) check(key string, cost int64) error {
	switch {
	case cost < 1:
		return fmt.Errorf("cost %d: %w", cost, ErrInvalidCost)
	case cost > l.limit.Capacity():
		return fmt.Errorf("cost %d > capacity %d: %w", cost, l.limit.Capacity(), ErrCostExceedsCapacity)
	case key == "" || len(key) > MaxKeyLen:
		return fmt.Errorf("key of %d bytes, want 1 to %d: %w", len(key), MaxKeyLen, ErrInvalidKey)
	}
	return nil
}

// decision checks a script reply {allowed, remaining, retry_after_us,
// reset_after_us} against the contract and converts it.
func (l *Limiter) decision(r [4]int64) (Decision, error) {
	allowed, remaining, retry, reset := r[0], r[1], r[2], r[3]
	capacity := l.limit.Capacity()
	ok := (allowed == 0 || allowed == 1) &&
		remaining >= 0 && remaining <= capacity &&
		(allowed == 1) == (retry == 0) && retry >= 0 &&
		reset >= 0
	if !ok {
		return Decision{}, fmt.Errorf("%s script replied %v: %w", l.script.Name(), r, ErrUnexpectedReply)
	}
	return Decision{
		Allowed:    allowed == 1,
		Limit:      capacity,
		Remaining:  remaining,
		RetryAfter: time.Duration(retry) * time.Microsecond,
		ResetAfter: time.Duration(reset) * time.Microsecond,
	}, nil
}

// shortKey is key for error messages: at most 64 bytes.
func shortKey(key string) string {
	if len(key) > 64 {
		return key[:61] + "..."
	}
	return key
}
