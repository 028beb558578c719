package bucket

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestKeyLayout: a decision writes exactly the key
// <prefix>:rl:{<name>:<key>}, for every algorithm.
func TestKeyLayout(t *testing.T) {
	t.Parallel()
	if got := redisKey("sluice", "api", "user-1"); got != "sluice:rl:{api:user-1}" {
		t.Fatalf("redisKey = %q", got)
	}
	for _, a := range Algorithms {
		f := newFixture(t, equivalent[a])
		f.allowAt("user-1", 1, at(base))
		keys, err := redistest.Keys(context.Background(), f.rdb, f.lim.prefix+":*")
		if err != nil {
			t.Fatal(err)
		}
		if want := f.lim.prefix + ":rl:{lim:user-1}"; len(keys) != 1 || keys[0] != want {
			t.Fatalf("%s wrote keys %q, want only %q", a, keys, want)
		}
	}
}
