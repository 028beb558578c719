package store

import (
	"context"
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
