package bucket

import (
	"context"
	"testing"
	"time"
)

// TestSlidingLogMemoryIsBounded: the log holds one member per admitted
// token, never more than the limit: refusals store nothing, and expired
// members are trimmed on the next admission. A cost above the ZADD chunk
// (500 tokens) is stored whole.
func TestSlidingLogMemoryIsBounded(t *testing.T) {
	t.Parallel()
	const limit = 1500
	f := newFixture(t, Limit{Algorithm: SlidingLog, Limit: limit, Window: 10 * time.Second})
	key := newKey()
	card := func() int64 {
		t.Helper()
		n, err := f.rdb.ZCard(context.Background(), f.redisKey(key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if d := f.allowAt(key, limit, at(base)); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("cost = limit on a fresh key: %+v", d)
	}
	if n := card(); n != limit {
		t.Fatalf("%d members after admitting %d tokens", n, limit)
	}
	for i := range 3 {
		if d := f.allowAt(key, 1, at(base+time.Duration(i)*time.Second)); d.Allowed {
			t.Fatalf("admitted past the limit: %+v", d)
		}
	}
	if n := card(); n != limit {
		t.Fatalf("%d members after refusals, want %d", n, limit)
	}
	if d := f.allowAt(key, 1, at(base+10*time.Second)); !d.Allowed || d.Remaining != limit-1 {
		t.Fatalf("after the window: %+v, want allowed with %d remaining", d, limit-1)
	}
	if n := card(); n != 1 {
		t.Fatalf("%d members after the window passed, want 1 (expired ones trimmed)", n)
	}
	f.checkTTL(key, true)
}
