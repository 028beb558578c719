package dispatch

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// ShardOwners names the holder of each held lease by its token's first 8
// hex digits, and "" for a free shard.
func TestShardOwners(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	ctx := context.Background()
	a, err := newLeases(rdb, prefix, 60_000)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newLeases(rdb, prefix, 60_000)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []struct {
		l     *leases
		shard int
	}{{a, 0}, {b, 2}, {a, 3}} {
		if ok, err := h.l.hold(ctx, h.shard); !ok || err != nil {
			t.Fatalf("hold shard %d: %v %v", h.shard, ok, err)
		}
	}
	got, err := ShardOwners(ctx, rdb, prefix, 4)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{a.owner[:8], "", b.owner[:8], a.owner[:8]}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("owners %q, want %q", got, want)
		}
	}
}
