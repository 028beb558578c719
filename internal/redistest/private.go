package redistest

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Private is a single redis-server of one test's own, for what the shared
// one must not see: a maxmemory, a CONFIG SET, a SIGSTOP. Started by
// NewPrivate; killed, its directory removed, when the test ends.
type Private struct {
	g    *group
	addr string
}

// NewPrivate starts a redis-server for t alone on a free loopback port —
// no persistence, maxmemory-policy noeviction, then args (e.g.
// "--maxmemory", "8mb") — and returns once it answers PING, whatever
// SLUICE_TEST_REDIS says.
func NewPrivate(t testing.TB, args ...string) *Private {
	t.Helper()
	dir, err := os.MkdirTemp("", "sluice-redis-private-")
	if err != nil {
		t.Fatal(err)
	}
	g := &group{dir: dir}
	t.Cleanup(g.stop)
	p, err := startProc(dir, false, append([]string{"--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction"}, args...)...)
	if err != nil {
		t.Fatalf("start a private redis-server: %v", err)
	}
	g.add(p)
	return &Private{g: g, addr: p.addr}
}

// Addr is the server's host:port.
func (p *Private) Addr() string { return p.addr }

// URL is the server as a redis:// URL (database 0).
func (p *Private) URL() string { return "redis://" + p.addr + "/0" }

// Client returns a client of the server, closed when t ends.
func (p *Private) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: p.addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// UsedMemory is INFO memory's used_memory of rdb (one node: a Cluster
// client answers for whichever node it asks), in bytes.
func UsedMemory(t testing.TB, rdb redis.UniversalClient) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no used_memory in INFO memory: %s", info)
	return 0
}

// Kill kills the server (kill -9), as a crash would, and waits until it is
// gone; clients' calls fail from then on.
func (p *Private) Kill(t testing.TB) {
	t.Helper()
	if err := p.g.kill(p.addr); err != nil {
		t.Fatalf("kill the private redis-server: %v", err)
	}
}
