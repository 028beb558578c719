package store

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestKeyLayout(t *testing.T) {
	t.Parallel()
	k := keyspace{prefix: "sluice", shards: 16}
	// crc32-IEEE("123456789") = 0xCBF43926, the standard check value; mod 16 = 6.
	if got := ShardOf("123456789", 16); got != 6 {
		t.Fatalf("ShardOf: %d, want 6", got)
	}
	const tn = "123456789"
	id := "j6_01KJMMA2G0WAAKMBBJK9MDDZKB"
	jobKey, err := k.job(id)
	if err != nil {
		t.Fatal(err)
	}
	for got, want := range map[string]string{
		k.ready(6):            "sluice:{s6}:ready",
		k.delayed(6):          "sluice:{s6}:delayed",
		k.leases(6):           "sluice:{s6}:leases",
		k.policy(6):           "sluice:{s6}:policy",
		k.wake(6):             "sluice:{s6}:wake",
		k.vclock(6):           "sluice:{s6}:vclock",
		k.tenantIndex(6):      "sluice:{s6}:tenants",
		k.tenantNames(6):      "sluice:{s6}:tenant_names",
		k.backfilled(6):       "sluice:{s6}:tenants_backfilled",
		k.finished(6):         "sluice:{s6}:finished",
		k.fair(6):             "sluice:{s6}:fair",
		k.agg(6, "gate:p"):    "sluice:{s6}:gate:p",
		k.tenant(tn):          "sluice:{s6}:t:123456789",
		k.tenantQueue(tn):     "sluice:{s6}:t:123456789:q",
		k.tenantHead(tn):      "sluice:{s6}:t:123456789:head",
		k.tenantDead(tn):      "sluice:{s6}:t:123456789:dead",
		k.tenantRecent(tn):    "sluice:{s6}:t:123456789:ra",
		jobKey:                "sluice:{s6}:j:j6_01KJMMA2G0WAAKMBBJK9MDDZKB",
		k.idem(tn, "order:1"): "sluice:{s6}:idem:123456789:order:1",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestJobIDsCarryTheirShard(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for shard := range 20 {
		id, err := NewJobID(shard, epoch)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ShardOfJobID(id)
		if err != nil || got != shard || seen[id] {
			t.Fatalf("%s: shard %d (%v), want %d, unique", id, got, err, shard)
		}
		seen[id] = true
	}
	for _, bad := range []string{"", "j", "j_01KJMMA2G0WAAKMBBJK9MDDZKB", "x3_01KJMMA2G0WAAKMBBJK9MDDZKB",
		"j03_01KJMMA2G0WAAKMBBJK9MDDZKB", "j3_", "j3_notaulid", "j-1_01KJMMA2G0WAAKMBBJK9MDDZKB"} {
		if _, err := ShardOfJobID(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ShardOfJobID(%q): %v, want ErrInvalid", bad, err)
		}
	}
}

// The scripts build the keys that keys.go names: after a scenario touching
// every kind of key, each Go-named key exists and the audit finds no other.
func TestScriptsUseTheKeyLayout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.store.PutTenantPolicy(e.ctx, "acme", Overrides{Burst: ptr(2)}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	later := idemItem("k1", `{"later":1}`)
	later.Delay = time.Minute
	rs := e.enqueue("acme", idemItem("k0", `{}`), later, item(`{}`))
	if _, ok := e.pop("acme", 0); !ok {
		t.Fatal("pop: nothing due")
	}
	k, shard := e.store.keys, e.store.keys.shardOf("acme")
	for _, key := range []string{k.policy(shard), k.ready(shard), k.delayed(shard), k.leases(shard),
		k.tenant("acme"), k.tenantQueue("acme"), k.idem("acme", "k0"), k.idem("acme", "k1")} {
		if n := e.rdb.Exists(e.ctx, key).Val(); n != 1 {
			t.Errorf("key %s does not exist", key)
		}
	}
	for _, r := range rs {
		key, _ := k.job(r.ID)
		if !strings.Contains(key, "{s") || e.rdb.Exists(e.ctx, key).Val() != 1 {
			t.Errorf("job key %s does not exist", key)
		}
	}
	e.requireConsistent()
}

func TestNewStoreValidatesConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{{Prefix: "a{b}"}, {Shards: -1}, {Shards: 16385}, {CanceledRetention: time.Microsecond}} {
		if _, err := NewStore(nil, cfg); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", cfg, err)
		}
	}
	s, err := NewStore(nil, Config{})
	if err != nil || s.Shards() != ShardsDefault || s.keys.prefix != PrefixDefault {
		t.Fatalf("defaults: %+v, %v", s, err)
	}
}
