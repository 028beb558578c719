package config

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestClientHonoursContextDeadlines: both clients the binaries build let a
// context's deadline cut socket reads and writes short (the API's request
// timeout relies on it).
func TestClientHonoursContextDeadlines(t *testing.T) {
	for _, rc := range []RedisConfig{
		{URL: "redis://127.0.0.1:1/0"},
		{URL: "redis://127.0.0.1:1/0", Addrs: []string{"127.0.0.1:1"}},
	} {
		c, err := rc.Client()
		if err != nil {
			t.Fatal(err)
		}
		var on bool
		switch c := c.(type) {
		case *redis.Client:
			on = c.Options().ContextTimeoutEnabled
		case *redis.ClusterClient:
			on = c.Options().ContextTimeoutEnabled
		default:
			t.Fatalf("Client() = %T", c)
		}
		if !on {
			t.Errorf("%T for %+v: ContextTimeoutEnabled is false", c, rc)
		}
		_ = c.Close()
	}
}
