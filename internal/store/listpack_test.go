package store

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/wire"
)

// With hash-max-listpack-value at HashListpackValueWant a queued job with a
// 1 KiB payload is one listpack record of at most 1.5 KiB of Redis, and so
// is its tenant's hash a listpack; LowHashListpack names no master. At
// Redis's default, 64, both are tables — the record about 2.1 KB — and
// LowHashListpack names the master with its value.
func TestHashListpackKeepsQueuedJobsSmall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	spec, err := job.Parse([]byte(`{"type":"webhook","url":"https://hooks.example.com/in","event":"order.paid",` +
		`"payload":{"pad":"` + strings.Repeat("x", 1024-len(`{"pad":""}`)) + `"}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		value    string
		low      bool
		encoding string
	}{{"64", true, "hashtable"}, {"2048", false, "listpack"}} {
		p := redistest.NewPrivate(t, "--hash-max-listpack-value", c.value)
		rdb := p.Client(t)
		low, err := LowHashListpack(ctx, rdb)
		if err != nil {
			t.Fatal(err)
		}
		if want := p.Addr() + ": " + c.value; c.low != (len(low) == 1 && low[0] == want) || (!c.low && len(low) > 0) {
			t.Fatalf("hash-max-listpack-value %s: LowHashListpack = %q, want low %v (%q)", c.value, low, c.low, want)
		}
		st, err := NewStore(rdb, Config{Prefix: "lp", Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		rs, err := st.Enqueue(ctx, "acme", []Item{{Type: wire.TypeWebhook, Cost: 1, Body: spec.Canonical()}})
		if err != nil || rs[0].Outcome != Accepted {
			t.Fatalf("enqueue: %+v, %v", rs, err)
		}
		key, err := st.JobKey(rs[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{key, st.keys.tenant("acme")} {
			if enc := rdb.ObjectEncoding(ctx, k).Val(); enc != c.encoding {
				t.Errorf("hash-max-listpack-value %s: %s is a %s, want a %s", c.value, k, enc, c.encoding)
			}
		}
		if n := rdb.MemoryUsage(ctx, key, 0).Val(); c.encoding == "listpack" && n > 1536 {
			t.Errorf("hash-max-listpack-value %s: the record of a job with %d bytes stored takes %d bytes, want ≤ 1536",
				c.value, len(spec.Canonical()), n)
		}
	}
}

// Bytes of Redis (hash-max-listpack-value 2048) a queued job with a 1 KiB
// payload costs, pinned as bounds (docs/operations.md, Sizing): its record
// stays in the 1 280-byte listpack class — with room for a URL 40 bytes
// longer than bench/dispatch's, as the fields left at their default are not
// written —, its tenant's hash is a listpack of at most 320 bytes (the
// packed state's trailing zeros trimmed), and used_memory grows by at most
// 1 840 bytes a job with 1 000 tenants holding 2 each on 16 shards, their
// state included (the shards' sets still listpacks; at 100 000 tenants they are skip lists,
// ~200 bytes a job more: BenchmarkManyTenants).
func TestQueuedJobBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.NewPrivate(t, "--hash-max-listpack-value", strconv.Itoa(HashListpackValueWant)).Client(t)
	st, err := NewStore(rdb, Config{Prefix: "sluice", Shards: 16})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SeedDefaults(ctx, DefaultParams()); err != nil {
		t.Fatal(err)
	}
	body := kibJob(t)
	longer, err := job.Parse([]byte(strings.Replace(string(body), "/million", "/million/"+strings.Repeat("u", 40), 1)))
	if err != nil {
		t.Fatal(err)
	}
	// The first call loads the scripts: not a job's cost.
	if rs, err := st.Enqueue(ctx, "warm", []Item{{Type: wire.TypeWebhook, Cost: 1, Body: body}}); err != nil || rs[0].Outcome != Accepted {
		t.Fatalf("enqueue: %+v, %v", rs, err)
	}
	const tenants = 1000
	mem0 := redistest.UsedMemory(t, rdb)
	var first string
	for i := range tenants {
		it := Item{Type: wire.TypeWebhook, Cost: 1, Body: body}
		rs, err := st.Enqueue(ctx, fmt.Sprintf("m%07d", i), []Item{it, it})
		if err != nil || rs[0].Outcome != Accepted || rs[1].Outcome != Accepted {
			t.Fatalf("enqueue: %+v, %v", rs, err)
		}
		first = cmp.Or(first, rs[0].ID)
	}
	perJob := float64(redistest.UsedMemory(t, rdb)-mem0) / (2 * tenants)
	rs, err := st.Enqueue(ctx, "long", []Item{{Type: wire.TypeWebhook, Cost: 1, Body: longer.Canonical()}})
	if err != nil || rs[0].Outcome != Accepted {
		t.Fatalf("enqueue: %+v, %v", rs, err)
	}
	usage := func(key string) int64 {
		n, err := rdb.MemoryUsage(ctx, key, 0).Result()
		if err != nil {
			t.Fatalf("memory usage %s: %v", key, err)
		}
		return n
	}
	tenant := st.keys.tenant("m0000000")
	for _, c := range []struct {
		what  string
		key   string
		bytes int64
	}{
		{fmt.Sprintf("the record of a job of %d bytes", len(body)), first, 1400},
		{fmt.Sprintf("the record of a job of %d bytes", len(longer.Canonical())), rs[0].ID, 1400},
		{"a tenant's hash (2 jobs queued)", "", 400},
		{"a tenant's backlog list (2 jobs)", "q", 240},
	} {
		key := tenant
		switch c.key {
		case "":
		case "q":
			key = st.BacklogKey("m0000000")
		default:
			if key, err = st.JobKey(c.key); err != nil {
				t.Fatal(err)
			}
		}
		if n := usage(key); n > c.bytes {
			t.Errorf("%s: MEMORY USAGE %d bytes, want ≤ %d", c.what, n, c.bytes)
		}
	}
	if perJob > 1840 {
		t.Errorf("used_memory grew by %.0f bytes a queued job (its tenant's state included), want ≤ 1840", perJob)
	}
	t.Logf("used_memory a queued job, its tenant's state included: %.0f bytes", perJob)
}
