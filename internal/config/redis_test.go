package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestClientHonoursContextDeadlines: every client the binaries build (one
// per kind) lets a context's deadline cut socket reads and writes short (the
// API's request timeout relies on it).
func TestClientHonoursContextDeadlines(t *testing.T) {
	for _, rc := range []RedisConfig{
		{URL: "redis://127.0.0.1:1/0"},
		{URL: "redis://127.0.0.1:1/0", Addrs: []string{"127.0.0.1:1"}},
		{URL: "redis+cluster://127.0.0.1:1?addr=127.0.0.1:2"},
		{URL: "redis://127.0.0.1:1/0", Sentinel: SentinelConfig{MasterName: "m", Addrs: []string{"127.0.0.1:1"}}},
		{URL: "redis+sentinel://127.0.0.1:1?master_name=m"},
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

// TestRedisForms: each way of naming a deployment gives the client kind,
// seeds, master name and credentials it says.
func TestRedisForms(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		rc := RedisConfig{URL: "redis://u:p@h:1/2"}
		c, err := rc.Client()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		o := c.(*redis.Client).Options()
		if rc.Kind() != RedisSingle || o.Addr != "h:1" || o.DB != 2 || o.Username != "u" || o.Password != "p" {
			t.Fatalf("kind %s, options %s db %d user %q pw %q", rc.Kind(), o.Addr, o.DB, o.Username, o.Password)
		}
	})
	for _, tc := range []struct {
		name  string
		rc    RedisConfig
		seeds []string
		user  string
		tls   bool
	}{
		{"addrs", RedisConfig{URL: "redis://u:p@x:9/0", Addrs: []string{"a:1", "b:2"}}, []string{"a:1", "b:2"}, "u", false},
		{"addrs and cluster", RedisConfig{URL: "rediss://u:p@x:9", Addrs: []string{"a:1"}, Cluster: true}, []string{"a:1"}, "u", true},
		{"cluster, the URL's host as seed", RedisConfig{URL: "redis://u:p@x:9/0", Cluster: true}, []string{"x:9"}, "u", false},
		{"redis+cluster URL", RedisConfig{URL: "redis+cluster://u:p@a:1?addr=b:2&addr=c:3"}, []string{"a:1", "b:2", "c:3"}, "u", false},
		{"rediss+cluster URL", RedisConfig{URL: "rediss+cluster://u:p@a:1?addr=b:2"}, []string{"a:1", "b:2"}, "u", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if k := tc.rc.Kind(); k != RedisCluster {
				t.Fatalf("kind %s, want cluster", k)
			}
			c, err := tc.rc.Client()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			o := c.(*redis.ClusterClient).Options()
			if !slices.Equal(o.Addrs, tc.seeds) || o.Username != tc.user || o.Password != "p" || (o.TLSConfig != nil) != tc.tls {
				t.Fatalf("seeds %v user %q pw %q tls %v; want %v %q p %v", o.Addrs, o.Username, o.Password, o.TLSConfig != nil, tc.seeds, tc.user, tc.tls)
			}
		})
	}
	for _, tc := range []struct {
		name string
		rc   RedisConfig
		want redis.FailoverOptions
	}{
		{"sentinel block", RedisConfig{URL: "redis://mu:mp@ignored:1/3",
			Sentinel: SentinelConfig{MasterName: "m", Addrs: []string{"s1:1", "s2:2"}, Username: "su", Password: "sp"}},
			redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"s1:1", "s2:2"}, SentinelUsername: "su", SentinelPassword: "sp",
				Username: "mu", Password: "mp", DB: 3}},
		{"redis+sentinel URL", RedisConfig{URL: "redis+sentinel://su:sp@s1:1/3?addr=s2:2&master_name=m&username=mu&password=mp"},
			redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"s1:1", "s2:2"}, SentinelUsername: "su", SentinelPassword: "sp",
				Username: "mu", Password: "mp", DB: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if k := tc.rc.Kind(); k != RedisSentinel {
				t.Fatalf("kind %s, want sentinel", k)
			}
			o, err := tc.rc.failoverOptions()
			if err != nil {
				t.Fatal(err)
			}
			w := tc.want
			if o.MasterName != w.MasterName || !slices.Equal(o.SentinelAddrs, w.SentinelAddrs) || o.SentinelUsername != w.SentinelUsername ||
				o.SentinelPassword != w.SentinelPassword || o.Username != w.Username || o.Password != w.Password || o.DB != w.DB {
				t.Fatalf("options %+v, want %+v", o, w)
			}
		})
	}
}

// TestRedisFormContradictions: a config naming two deployments, or one
// incompletely, is refused with every problem listed and the password kept
// out of the message.
func TestRedisFormContradictions(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"sentinel and addrs", "redis: {addrs: [a:1], sentinel: {master_name: m, addrs: [s:1]}}", []string{"redis.sentinel"}},
		{"sentinel and cluster", "redis: {cluster: true, sentinel: {master_name: m, addrs: [s:1]}}", []string{"redis.sentinel"}},
		{"sentinel without master name", "redis: {sentinel: {addrs: [s:1, bad]}}", []string{"redis.sentinel.addrs[1]", "redis.sentinel.master_name"}},
		{"sentinel without addrs", "redis: {sentinel: {master_name: m}}", []string{"redis.sentinel.addrs"}},
		{"sentinel URL and block", "redis: {url: 'redis+sentinel://s:1?master_name=m', sentinel: {master_name: m, addrs: [s:1]}}", []string{"redis.sentinel"}},
		{"sentinel URL and cluster", "redis: {url: 'redis+sentinel://s:1?master_name=m', cluster: true}", []string{"redis.url"}},
		{"sentinel URL without master name", "redis: {url: 'redis+sentinel://s:1'}", []string{"redis.url"}},
		{"cluster URL and addrs", "redis: {url: 'redis+cluster://a:1', addrs: [b:2]}", []string{"redis.addrs"}},
		{"cluster URL and sentinel", "redis: {url: 'redis+cluster://a:1', sentinel: {master_name: m, addrs: [s:1]}}", []string{"redis.sentinel"}},
		{"cluster URL with an unknown option", "redis: {url: 'redis+cluster://u:hunter2@a:1?colour=red'}", []string{"redis.url"}},
		{"cluster with a database", "redis: {url: 'redis://a:1/2', cluster: true}", []string{"redis.url"}},
		{"cluster on a unix socket", "redis: {url: 'unix:///run/redis.sock', cluster: true}", []string{"redis.url"}},
		{"unknown scheme", "redis: {url: 'redis+mesh://a:1'}", []string{"redis.url"}},
		{"good cluster URL", "redis: {url: 'redis+cluster://a:1?addr=b:2', cluster: true}", nil},
		{"good sentinel", "redis: {url: 'redis://:pw@x:1/1', sentinel: {master_name: m, addrs: [s:1, s:2], password: sp}}", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadString(t, tc.yaml+"\n")
			if got := problemFields(t, err); !slices.Equal(got, tc.want) {
				t.Fatalf("problems %v, want %v (error: %v)", got, tc.want, err)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error reveals the password: %v", err)
			}
		})
	}
}

// TestSentinelAddrsNotShared: WithDefaults copies redis.sentinel.addrs.
func TestSentinelAddrsNotShared(t *testing.T) {
	in := &Config{Redis: RedisConfig{Sentinel: SentinelConfig{MasterName: "m", Addrs: []string{"s:1"}}}}
	out := in.WithDefaults()
	out.Redis.Sentinel.Addrs[0] = "changed"
	if in.Redis.Sentinel.Addrs[0] != "s:1" {
		t.Fatal("WithDefaults shares redis.sentinel.addrs with its input")
	}
}
