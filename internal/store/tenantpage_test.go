package store

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/wire"
)

// walkNames walks TenantNames of prefix n at a time from the start, failing
// on a repeat or a name out of order, and returns the names.
func (e *env) walkNames(prefix string, n int) []string {
	e.t.Helper()
	var all []string
	for after := ""; ; {
		names, more, err := e.store.TenantNames(e.ctx, prefix, after, n)
		if err != nil {
			e.t.Fatal(err)
		}
		if len(names) > n || (more && len(names) < n) {
			e.t.Fatalf("after %q: %d names, more %v, n %d", after, len(names), more, n)
		}
		for _, tn := range names {
			if len(all) > 0 && tn <= all[len(all)-1] {
				e.t.Fatalf("%q after %q: not in name order or repeated", tn, all[len(all)-1])
			}
			all = append(all, tn)
		}
		if !more {
			return all
		}
		after = names[len(names)-1]
	}
}

// makeTenants makes n tenants t000… with i%4 jobs each, every fourth one
// paused, and a tenant with policy overrides only; it returns their names
// in order.
func (e *env) makeTenants(n int) []string {
	e.t.Helper()
	var want []string
	for i := range n {
		tn := fmt.Sprintf("t%03d", i)
		want = append(want, tn)
		for range i % 4 {
			e.enqueueOne(tn, item(`{}`))
		}
		if i%4 == 0 {
			if err := e.store.Pause(e.ctx, tn, time.Time{}); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	if _, err := e.store.PutTenantPolicy(e.ctx, "policy-only", Overrides{Burst: ptr(int64(3))}, AnyVersion); err != nil {
		e.t.Fatal(err)
	}
	return append(want, "policy-only")
}

// TenantNames pages every tenant with state in name order, each once,
// across the shards; TenantViews reads what TenantState reads, leaves out a
// tenant whose state is gone and drops it from the index and name set.
func TestTenantNamesAndViews(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	want := e.makeTenants(200)
	slices.Sort(want)
	for _, n := range []int{1, 7, 1000} {
		if got := e.walkNames("", n); !slices.Equal(got, want) {
			t.Fatalf("n %d: %d names %q…, want %d", n, len(got), got[:min(3, len(got))], len(want))
		}
	}
	page, more, err := e.store.TenantNames(e.ctx, "", "t010", 5)
	if err != nil || !more || !slices.Equal(page, []string{"t011", "t012", "t013", "t014", "t015"}) {
		t.Fatalf("after t010: %q, %v, %v", page, more, err)
	}
	views, err := e.store.TenantViews(e.ctx, append(page, "policy-only"))
	if err != nil || len(views) != 6 {
		t.Fatalf("views: %d, %v", len(views), err)
	}
	for _, st := range views[:5] {
		if ref := e.state(st.Tenant); st.Backlog != ref.Backlog || st.AdminPaused != ref.AdminPaused ||
			st.OldestQueuedAt != ref.OldestQueuedAt || !st.Exists {
			t.Fatalf("view %+v, TenantState %+v", st, ref)
		}
	}
	if st := views[5]; st.Tenant != "policy-only" || st.Exists || st.Policy.Burst != 3 {
		t.Fatalf("policy-only: %+v", st)
	}

	// State gone and its entry due (an hour after the hash was made, when
	// no job ended since): left out of the views, out of the index and the
	// name set.
	if err := e.rdb.Del(e.ctx, e.store.keys.tenant("t012")).Err(); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Hour + time.Second)
	views, err = e.store.TenantViews(e.ctx, page)
	if err != nil || len(views) != 4 || slices.ContainsFunc(views, func(st TenantState) bool { return st.Tenant == "t012" }) {
		t.Fatalf("views after t012's state went: %d, %v", len(views), err)
	}
	if got := e.walkNames("", 50); slices.Contains(got, "t012") || len(got) != len(want)-1 {
		t.Fatalf("t012 still named (%d names)", len(got))
	}
	e.requireConsistent()

	for _, n := range []int{0, MaxTenantNames + 1} {
		if _, _, err := e.store.TenantNames(e.ctx, "", "", n); !errors.Is(err, ErrInvalid) {
			t.Errorf("TenantNames n %d: %v, want ErrInvalid", n, err)
		}
	}
	if _, err := e.store.TenantViews(e.ctx, []string{"t001", "a:b"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("TenantViews of a bad id: %v, want ErrInvalid", err)
	}
}

// TenantNames with a prefix pages only the names that begin with it, in
// name order, each once, across the shards, from wherever the cursor is;
// a prefix that cannot begin a tenant id is ErrInvalid.
func TestTenantNamesPrefix(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	all := e.makeTenants(200)
	with := func(prefix string) []string {
		return slices.DeleteFunc(slices.Clone(all), func(tn string) bool { return !strings.HasPrefix(tn, prefix) })
	}
	for _, prefix := range []string{"t01", "t1", "t", "policy", "t199", "zz", "T"} {
		want := with(prefix)
		slices.Sort(want)
		for _, n := range []int{1, 3, 1000} {
			if got := e.walkNames(prefix, n); !slices.Equal(got, want) {
				t.Fatalf("prefix %q, n %d: %q, want %q", prefix, n, got, want)
			}
		}
	}
	for after, want := range map[string]string{
		"t015": "[t016 t017 t018 t019] false", // within the prefix's range
		"a":    "[t010 t011 t012] true",       // below it: from its first name
		"t02":  "[] false",                    // above it
	} {
		page, more, err := e.store.TenantNames(e.ctx, "t01", after, 3+len(after)/4)
		if err != nil || fmt.Sprint(page, " ", more) != want {
			t.Errorf("prefix t01 after %q: %q %v (%v), want %s", after, page, more, err, want)
		}
	}
	for _, bad := range []string{"a:b", "{s1}", "t*", strings.Repeat("t", 129)} {
		if _, _, err := e.store.TenantNames(e.ctx, bad, "", 10); !errors.Is(err, ErrInvalid) {
			t.Errorf("prefix %.20q: %v, want ErrInvalid", bad, err)
		}
	}
}

// TenantKeys reads each tenant once with its backlog or its oldest queued
// job's creation, and its state; a tenant whose state is gone leaves.
func TestTenantKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	want := e.makeTenants(120)
	if err := e.store.Pause(e.ctx, "t001", e.clock.Now().Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Del(e.ctx, e.store.keys.tenant("t004")).Err(); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Hour + time.Second) // its index entry due (tenants.lua)
	want = slices.DeleteFunc(want, func(tn string) bool { return tn == "t004" })
	for _, key := range []string{"backlog", "oldest"} {
		keys, err := e.store.TenantKeys(e.ctx, key)
		if err != nil || len(keys) != len(want) {
			t.Fatalf("%s: %d keys, want %d: %v", key, len(keys), len(want), err)
		}
		for _, k := range keys {
			ref := e.state(k.Tenant)
			wantKey, wantState := ref.Backlog, TenantActive
			if key == "oldest" {
				wantKey = -1
				if !ref.OldestQueuedAt.IsZero() {
					wantKey = ref.OldestQueuedAt.UnixMicro()
				}
			}
			if ref.Paused() {
				wantState = TenantPaused
			}
			if k.Key != wantKey || k.State != wantState {
				t.Fatalf("%s: %+v, want key %d state %s", key, k, wantKey, wantState)
			}
		}
	}
	if e.rdb.ZScore(e.ctx, e.store.keys.tenantIndex(e.store.keys.shardOf("t004")), "t004").Err() == nil {
		t.Fatal("t002 still in the index after a walk found it empty")
	}
	if _, err := e.store.TenantKeys(e.ctx, "size"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("key size: %v, want ErrInvalid", err)
	}
	e.requireConsistent()
}

// forgetIndex deletes every shard's tenant index and name set, as a release
// before the index left a deployment, and the backfill markers.
func (e *env) forgetIndex() {
	e.t.Helper()
	for shard := range e.store.Shards() {
		k := e.store.keys
		if err := e.rdb.Del(e.ctx, k.tenantIndex(shard), k.tenantNames(shard), k.backfilled(shard)).Err(); err != nil {
			e.t.Fatal(err)
		}
	}
}

// indexSnapshot is every shard's index entries with their scores.
func (e *env) indexSnapshot() map[string]float64 {
	e.t.Helper()
	out := map[string]float64{}
	for shard := range e.store.Shards() {
		zs, err := e.rdb.ZRangeWithScores(e.ctx, e.store.keys.tenantIndex(shard), 0, -1).Result()
		if err != nil {
			e.t.Fatal(err)
		}
		for _, z := range zs {
			out[z.Member.(string)] = z.Score
		}
	}
	return out
}

// Tenants written before the index existed — a hash, dead letters only, a
// policy only — enter it by the backfill with index_check's scores and are
// listed; a second run, with or without the markers, changes nothing.
func TestBackfillTenantIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(fastDeadParams))
	want := e.makeTenants(150)
	e.deadLetters("dead-only", 3, wire.FinishPermanent)
	if err := e.rdb.Del(e.ctx, e.store.keys.tenant("dead-only")).Err(); err != nil { // as its expiry would
		t.Fatal(err)
	}
	want = append(want, "dead-only")
	slices.Sort(want)
	e.forgetIndex()
	if got := e.walkNames("", 100); len(got) != 0 {
		t.Fatalf("names before the backfill: %q", got)
	}

	added, err := e.store.BackfillTenantIndex(e.ctx)
	if err != nil || added != len(want) {
		t.Fatalf("backfill: added %d, %v; want %d", added, err, len(want))
	}
	if got := e.walkNames("", 100); !slices.Equal(got, want) {
		t.Fatalf("after the backfill: %d names, want %d", len(got), len(want))
	}
	now := e.clock.Now().UnixMicro()
	index := e.indexSnapshot()
	for tn, score := range index {
		if int64(score) <= now || int64(score) > now+time.Hour.Microseconds() {
			t.Fatalf("%s: next check in %dµs, want within (0, 1h]", tn, int64(score)-now)
		}
	}
	if busy := int64(index["t001"]); busy != now+time.Hour.Microseconds() {
		t.Fatalf("a busy tenant's check in %dµs, want an hour", busy-now)
	}
	e.requireConsistent()

	// Marked: a second run scans nothing (an entry removed now stays out).
	if err := e.rdb.ZRem(e.ctx, e.store.keys.tenantIndex(e.store.keys.shardOf("t003")), "t003").Err(); err != nil {
		t.Fatal(err)
	}
	if added, err := e.store.BackfillTenantIndex(e.ctx); err != nil || added != 0 {
		t.Fatalf("second run: added %d, %v", added, err)
	}
	if e.rdb.ZScore(e.ctx, e.store.keys.tenantIndex(e.store.keys.shardOf("t003")), "t003").Err() != redis.Nil {
		t.Fatal("a marked shard was backfilled again")
	}
	if err := e.rdb.ZAdd(e.ctx, e.store.keys.tenantIndex(e.store.keys.shardOf("t003")), redis.Z{Score: index["t003"], Member: "t003"}).Err(); err != nil {
		t.Fatal(err)
	}

	// Markers gone: the run finds everything indexed and changes no score.
	for shard := range e.store.Shards() {
		e.rdb.Del(e.ctx, e.store.keys.backfilled(shard))
	}
	e.clock.Advance(time.Minute)
	if added, err := e.store.BackfillTenantIndex(e.ctx); err != nil || added != 0 {
		t.Fatalf("unmarked run: added %d, %v", added, err)
	}
	if again := e.indexSnapshot(); !maps.Equal(again, index) {
		t.Fatal("an unmarked second run changed the index's scores")
	}
	e.requireConsistent()
}

// A tenant key's shard and tenant parse back; other keys do not.
func TestTenantOfKey(t *testing.T) {
	t.Parallel()
	k := keyspace{prefix: "p", shards: 16}
	tn := "acme"
	for _, key := range []string{k.tenant(tn), k.tenantQueue(tn), k.tenantHead(tn), k.tenantDead(tn)} {
		if shard, got, ok := k.tenantOfKey(key); !ok || got != tn || shard != k.shardOf(tn) {
			t.Errorf("%s: %d %q %v", key, shard, got, ok)
		}
	}
	wrongShard := fmt.Sprintf("p:{s%d}:t:acme", (k.shardOf(tn)+1)%16)
	for _, key := range []string{k.ready(1), "q:{s1}:t:acme", "p:{s99}:t:acme", wrongShard, "p:{s1}:t:", k.idem(tn, "x")} {
		if _, _, ok := k.tenantOfKey(key); ok {
			t.Errorf("%s parsed as a tenant key", key)
		}
	}
	if got := globEscape(`a*b?[c]\`); got != `a\*b\?\[c\]\\` {
		t.Errorf("globEscape: %s", got)
	}
}
