package bucket

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestInvalidCallsFailWithoutARoundTrip: bad costs and keys are refused with
// their sentinel errors, wrapped with the key and the limit's name, before
// Redis is asked (no key appears). A cost above capacity is an error, never
// an endless wait.
func TestInvalidCallsFailWithoutARoundTrip(t *testing.T) {
	t.Parallel()
	for _, a := range Algorithms {
		t.Run(string(a), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, equivalent[a]) // capacity 5
			long := strings.Repeat("k", MaxKeyLen+1)
			cases := []struct {
				key  string
				cost int64
				want error
			}{
				{"k", 0, ErrInvalidCost},
				{"k", -1, ErrInvalidCost},
				{"k", 6, ErrCostExceedsCapacity},
				{"k", 1 << 40, ErrCostExceedsCapacity},
				{"", 1, ErrInvalidKey},
				{long, 1, ErrInvalidKey},
			}
			for _, c := range cases {
				_, err := f.lim.AllowAt(context.Background(), c.key, c.cost, at(base))
				if !errors.Is(err, c.want) {
					t.Fatalf("key of %d bytes, cost %d: error %v, want %v", len(c.key), c.cost, err, c.want)
				}
				if !strings.Contains(err.Error(), `on limit "lim"`) {
					t.Fatalf("error %q does not name the limit", err)
				}
				if _, err := f.lim.Allow(context.Background(), c.key, c.cost); !errors.Is(err, c.want) {
					t.Fatalf("Allow: key of %d bytes, cost %d: error %v, want %v", len(c.key), c.cost, err, c.want)
				}
				if n := f.rdb.Exists(context.Background(), f.redisKey(c.key)).Val(); n != 0 {
					t.Fatalf("an invalid call created its key")
				}
			}
			if d := f.allowAt(strings.Repeat("k", MaxKeyLen), 5, at(base)); !d.Allowed {
				t.Fatalf("a key of MaxKeyLen bytes with cost = capacity: %+v, want allowed", d)
			}
			if _, err := f.lim.AllowAt(context.Background(), "k", 1, time.Unix(0, 0)); err == nil {
				t.Fatalf("AllowAt at the Unix epoch: no error")
			}
		})
	}
}

func TestNewLimiterValidates(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	other, _ := redistest.New(t)
	foreign := newBatcher(t, other, BatcherConfig{})
	good := equivalent[GCRA]
	cases := []struct {
		name   string
		rdb    redis.UniversalClient
		prefix string
		limit  string
		l      Limit
		opts   []Option
		want   string // in the error
	}{
		{"nil client", nil, prefix, "lim", good, nil, "nil Redis client"},
		{"empty prefix", rdb, "", "lim", good, nil, "prefix"},
		{"brace in prefix", rdb, "a{b", "lim", good, nil, "prefix"},
		{"empty name", rdb, prefix, "", good, nil, "name"},
		{"colon in name", rdb, prefix, "a:b", good, nil, "name"},
		{"invalid limit", rdb, prefix, "lim", Limit{Algorithm: GCRA}, nil, "burst must be at least 1"},
		{"window algorithm with a rate", rdb, prefix, "lim", Limit{Algorithm: SlidingLog, Limit: 1, Window: time.Second, Burst: 1}, nil, "takes limit and window"},
		{"inexact product", rdb, prefix, "lim", Limit{Algorithm: GCRA, Rate: Rate{1, time.Hour}, Burst: 1 << 30}, nil, "exact integer"},
		{"inexact sliding window", rdb, prefix, "lim", Limit{Algorithm: SlidingWindow, Limit: 1 << 40, Window: time.Hour}, nil, "exact integer"},
		{"batcher of another client", rdb, prefix, "lim", good, []Option{WithBatcher(foreign)}, "another Redis client"},
	}
	for _, c := range cases {
		lim, err := NewLimiter(c.rdb, c.prefix, c.limit, c.l, c.opts...)
		if err == nil {
			_ = lim.Close()
			t.Errorf("%s: no error", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q, want it to mention %q", c.name, err, c.want)
		}
	}
	big, err := NewLimiter(rdb, prefix, "big", Limit{Algorithm: FixedWindow, Limit: 1 << 40, Window: time.Hour})
	if err != nil {
		t.Fatalf("a fixed window multiplies nothing, any limit is exact: %v", err)
	}
	_ = big.Close()
	lim, err := NewLimiter(rdb, prefix, "api.v1_x-y", Limit{Algorithm: SlidingLog, Limit: 3, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	if lim.Name() != "api.v1_x-y" || lim.Limit().Limit != 3 || lim.Limit().Capacity() != 3 {
		t.Fatalf("Name() %q, Limit() %+v: not what was given", lim.Name(), lim.Limit())
	}
}

// TestClosedLimiter: after Close (idempotent), calls fail with ErrClosed.
func TestClosedLimiter(t *testing.T) {
	t.Parallel()
	f := newFixture(t, equivalent[TokenBucket])
	if d := f.allowAt("k", 1, at(base)); !d.Allowed {
		t.Fatalf("before Close: %+v", d)
	}
	if err := f.lim.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.lim.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := f.lim.AllowAt(context.Background(), "k", 1, at(base)); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: error %v, want ErrClosed", err)
	}
}

// TestCanceledContext: a done context returns its error and asks nothing of
// Redis.
func TestCanceledContext(t *testing.T) {
	t.Parallel()
	f := newFixture(t, equivalent[GCRA])
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.lim.AllowAt(ctx, "k", 1, at(base)); !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	f.checkTTL("k", false)
}
