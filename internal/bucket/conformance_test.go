package bucket

import (
	"context"
	"testing"
	"time"
)

// step is one decision on a fake clock and the exact Decision expected.
type step struct {
	at        time.Duration // fake time since epoch
	cost      int64
	allowed   bool
	remaining int64
	retry     time.Duration // RetryAfter
	reset     time.Duration // ResetAfter
}

const us = time.Microsecond

// bucketSteps serve both bucket algorithms: token bucket (capacity 5, a token
// every 2s) and GCRA (burst 5, T = 2s) decide identically.
var bucketSteps = []step{
	{0, 1, true, 4, 0, 2 * time.Second}, // fresh key: full
	{0, 4, true, 0, 0, 10 * time.Second},
	{1 * time.Second, 1, false, 0, 1 * time.Second, 9 * time.Second},
	{3 * time.Second, 2, false, 1, 1 * time.Second, 7 * time.Second}, // 1 token back, 2 asked
	{4 * time.Second, 2, true, 0, 0, 10 * time.Second},
	{100 * time.Second, 5, true, 0, 0, 10 * time.Second}, // refilled, capped at 5
	{101500 * time.Millisecond, 1, false, 0, 500 * time.Millisecond, 8500 * time.Millisecond},
	{103 * time.Second, 1, true, 0, 0, 9 * time.Second}, // 1.5 intervals: the half carries over
	{104 * time.Second, 1, true, 0, 0, 10 * time.Second},
}

// conformance holds, per algorithm, a limit and its step table. Every
// table starts on a fresh key, runs it out, shows refusals with exact
// RetryAfter and ResetAfter, a refill or window roll, and cost > 1.
var conformance = map[Algorithm]struct {
	limit Limit
	steps []step
}{
	FixedWindow: {equivalent[FixedWindow], []step{ // 5 per 10s
		{1 * time.Second, 1, true, 4, 0, 9 * time.Second},
		{1 * time.Second, 3, true, 1, 0, 9 * time.Second},
		{2 * time.Second, 2, false, 1, 8 * time.Second, 8 * time.Second},
		{2 * time.Second, 1, true, 0, 0, 8 * time.Second},
		{9500 * time.Millisecond, 1, false, 0, 500 * time.Millisecond, 500 * time.Millisecond},
		{10 * time.Second, 5, true, 0, 0, 10 * time.Second}, // new window
		{20*time.Second - us, 1, false, 0, us, us},
		{25 * time.Second, 2, true, 3, 0, 5 * time.Second},
	}},
	SlidingLog: {equivalent[SlidingLog], []step{ // 5 in any 10s
		{1 * time.Second, 1, true, 4, 0, 10 * time.Second},
		{2 * time.Second, 2, true, 2, 0, 10 * time.Second},
		{3 * time.Second, 2, true, 0, 0, 10 * time.Second},
		{4 * time.Second, 1, false, 0, 7 * time.Second, 9 * time.Second}, // the token of 1s leaves at 11s
		{4 * time.Second, 3, false, 0, 8 * time.Second, 9 * time.Second}, // 3 must leave: the 3rd oldest at 2s
		{11 * time.Second, 1, true, 0, 0, 10 * time.Second},
		{12*time.Second - us, 3, false, 0, time.Second + us, 9*time.Second + us},
		{13 * time.Second, 3, true, 1, 0, 10 * time.Second},
		{30 * time.Second, 5, true, 0, 0, 10 * time.Second},
	}},
	SlidingWindow: {Limit{Algorithm: SlidingWindow, Limit: 10, Window: 10 * time.Second}, []step{
		{1 * time.Second, 4, true, 6, 0, 19 * time.Second},
		{5 * time.Second, 6, true, 0, 0, 15 * time.Second},
		{6 * time.Second, 1, false, 0, 5 * time.Second, 14 * time.Second}, // at 11s: 10·9/10 + 1 = 10
		{11 * time.Second, 1, true, 0, 0, 19 * time.Second},
		{12 * time.Second, 2, false, 1, 1 * time.Second, 18 * time.Second}, // ⌈10·8/10⌉ + 1 + 2 = 11
		{13 * time.Second, 2, true, 0, 0, 17 * time.Second},
		{14500 * time.Millisecond, 1, true, 0, 0, 15500 * time.Millisecond}, // ⌈5.5⌉ + 3 + 1 = 10
		{14600 * time.Millisecond, 1, false, 0, 400 * time.Millisecond, 15400 * time.Millisecond},
		{35 * time.Second, 10, true, 0, 0, 15 * time.Second}, // idle for a whole window
	}},
	TokenBucket: {equivalent[TokenBucket], bucketSteps},
	GCRA:        {equivalent[GCRA], bucketSteps},
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, a := range Algorithms {
		t.Run(string(a), func(t *testing.T) {
			t.Parallel()
			t.Run("steps", func(t *testing.T) { t.Parallel(); testSteps(t, a) })
			t.Run("fresh key is full", func(t *testing.T) { t.Parallel(); testFresh(t, a) })
			t.Run("exhaustion and refusal change nothing", func(t *testing.T) { t.Parallel(); testExhaustion(t, a) })
			t.Run("retry after is exact", func(t *testing.T) { t.Parallel(); testRetryAfterExact(t, a) })
			t.Run("reset after is exact", func(t *testing.T) { t.Parallel(); testResetAfterExact(t, a) })
			t.Run("redis clock", func(t *testing.T) { t.Parallel(); testRedisClock(t, a) })
		})
	}
}

// testSteps runs a's table and checks every field of every decision, and
// that the key has a TTL after every step.
func testSteps(t *testing.T, a Algorithm) {
	c := conformance[a]
	f := newFixture(t, c.limit)
	key := newKey()
	written := false
	for i, s := range c.steps {
		d := f.allowAt(key, s.cost, at(s.at))
		want := Decision{Allowed: s.allowed, Limit: c.limit.Capacity(), Remaining: s.remaining, RetryAfter: s.retry, ResetAfter: s.reset}
		if d != want {
			t.Errorf("step %d (at %v, cost %d): got %+v, want %+v", i, s.at, s.cost, d, want)
		}
		written = written || d.Allowed
		f.checkTTL(key, written)
	}
}

// base is where the generic checks start: mid-window, off any alignment.
const base = 2500 * time.Millisecond

func testFresh(t *testing.T, a Algorithm) {
	l := equivalent[a]
	f := newFixture(t, l)
	key := newKey()
	d := f.allowAt(key, 1, at(base))
	if !d.Allowed || d.Limit != 5 || d.Remaining != 4 || d.RetryAfter != 0 || d.ResetAfter <= 0 {
		t.Fatalf("fresh key, cost 1: %+v, want allowed, limit 5, remaining 4, no retry, a reset", d)
	}
	f.checkTTL(key, true)
	d = f.allowAt(newKey(), 5, at(base))
	if !d.Allowed || d.Remaining != 0 {
		t.Fatalf("fresh key, cost 5 (full capacity): %+v, want allowed with 0 remaining", d)
	}
}

// exhaust takes the capacity (5) one token at a time at base, checking the
// countdown.
func exhaust(f *fixture, key string) {
	f.t.Helper()
	for i := range int64(5) {
		d := f.allowAt(key, 1, at(base))
		if !d.Allowed || d.Remaining != 4-i {
			f.t.Fatalf("token %d of 5: %+v, want allowed with %d remaining", i+1, d, 4-i)
		}
		f.checkTTL(key, true)
	}
}

func testExhaustion(t *testing.T, a Algorithm) {
	f := newFixture(t, equivalent[a])
	key := newKey()
	exhaust(f, key)
	before, ttlBefore := f.dump(key), f.pttl(key)
	d1 := f.allowAt(key, 1, at(base))
	d2 := f.allowAt(key, 1, at(base))
	if d1.Allowed || d1.Remaining != 0 || d1.RetryAfter <= 0 || d1.ResetAfter <= 0 {
		t.Fatalf("6th token: %+v, want refused, 0 remaining, RetryAfter and ResetAfter > 0", d1)
	}
	if d2 != d1 {
		t.Fatalf("a refusal changed the next decision: %+v then %+v", d1, d2)
	}
	if after := f.dump(key); after != before {
		t.Fatalf("a refusal changed the key's value")
	}
	if ttl := f.pttl(key); ttl <= 0 || ttl > ttlBefore {
		t.Fatalf("a refusal changed the TTL: %v before, %v after", ttlBefore, ttl)
	}
}

func testRetryAfterExact(t *testing.T, a Algorithm) {
	for _, cost := range []int64{1, 3} {
		f := newFixture(t, equivalent[a])
		key := newKey()
		exhaust(f, key)
		d := f.allowAt(key, cost, at(base))
		if d.Allowed || d.RetryAfter <= 0 {
			t.Fatalf("cost %d after exhaustion: %+v, want refused with RetryAfter > 0", cost, d)
		}
		if early := f.allowAt(key, cost, at(base+d.RetryAfter-us)); early.Allowed {
			t.Fatalf("cost %d admitted 1µs before RetryAfter %v", cost, d.RetryAfter)
		}
		if onTime := f.allowAt(key, cost, at(base+d.RetryAfter)); !onTime.Allowed {
			t.Fatalf("cost %d refused at RetryAfter %v: %+v", cost, d.RetryAfter, onTime)
		}
		f.checkTTL(key, true)
	}
}

func testResetAfterExact(t *testing.T, a Algorithm) {
	f := newFixture(t, equivalent[a])
	key := newKey()
	exhaust(f, key)
	d := f.allowAt(key, 1, at(base))
	if early := f.allowAt(key, 5, at(base+d.ResetAfter-us)); early.Allowed {
		t.Fatalf("full capacity admitted 1µs before ResetAfter %v", d.ResetAfter)
	}
	full := f.allowAt(key, 5, at(base+d.ResetAfter))
	if !full.Allowed || full.Remaining != 0 {
		t.Fatalf("full capacity at ResetAfter %v: %+v, want allowed", d.ResetAfter, full)
	}
	f.checkTTL(key, true)
}

// testRedisClock uses Allow, whose clock is Redis TIME (present-day µs):
// a fresh key counts down from full capacity without losing a token.
func testRedisClock(t *testing.T, a Algorithm) {
	l := equivalent[a]
	f := newFixture(t, l)
	key := newKey()
	var prev Decision
	for i := range int64(2) {
		d, err := f.lim.Allow(context.Background(), key, 1)
		if err != nil {
			t.Fatal(err)
		}
		want := 4 - i
		if a == FixedWindow && i > 0 && d.ResetAfter > prev.ResetAfter {
			want = 4 // the calls straddled a window boundary
		}
		if !d.Allowed || d.Remaining != want || d.ResetAfter <= 0 || d.ResetAfter > 20*time.Second {
			t.Fatalf("call %d on Redis' clock: %+v, want allowed with %d remaining, reset in (0, 20s]", i+1, d, want)
		}
		prev = d
	}
	if ttl := f.pttl(key); ttl == -1 {
		t.Fatalf("key without TTL")
	}
}
