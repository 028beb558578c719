package redistest

import (
	"context"
	"os"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

func TestNewGivesWorkingClientAndDistinctPrefixes(t *testing.T) {
	t.Parallel()
	rdb, p1 := New(t)
	_, p2 := New(t)
	if p1 == p2 {
		t.Fatalf("two prefixes for one test are equal: %q", p1)
	}
	if strings.ContainsAny(p1, "{}:") {
		t.Fatalf("prefix %q holds a hash-tag brace or key separator", p1)
	}
	ctx := context.Background()
	if err := rdb.Set(ctx, p1+":k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := rdb.Get(ctx, p1+":k").Result()
	if err != nil || got != "v" {
		t.Fatalf("GET after SET = %q, %v; want v", got, err)
	}
	policy, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv(EnvURL) == "" && policy["maxmemory-policy"] != "noeviction" {
		t.Fatalf("maxmemory-policy = %q, want noeviction", policy["maxmemory-policy"])
	}
}
