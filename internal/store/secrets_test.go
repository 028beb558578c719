package store

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// addSecret adds a secret with a fresh id and returns the id.
func (e *env) addSecret(tenant, sealed string, expirePrevious time.Duration) string {
	e.t.Helper()
	id, err := NewSecretID(e.clock.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	at, err := e.store.AddSecret(e.ctx, tenant, id, sealed, expirePrevious)
	if err != nil {
		e.t.Fatal(err)
	}
	if !at.Equal(e.clock.Now()) {
		e.t.Fatalf("added at %s, want now %s", at, e.clock.Now())
	}
	return id
}

func (e *env) secrets(tenant string) SecretSet {
	e.t.Helper()
	set, err := e.store.Secrets(e.ctx, tenant)
	if err != nil {
		e.t.Fatal(err)
	}
	return set
}

func sealedOf(set SecretSet) string {
	var out []string
	for _, s := range set.Secrets {
		out = append(out, s.Sealed)
	}
	return strings.Join(out, ",")
}

// A rotation: the previous secret expires expire_previous_in after the
// add; until then both are live, then only the new one; an expired secret
// cannot be deleted (not found) and is dropped from the hash at the next
// write: deleting the last live secret leaves no key.
func TestSecretsRotateExpireDelete(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.addSecret("acme", "k1:AAAA", time.Hour)
	e.clock.Advance(time.Second)
	second := e.addSecret("acme", "k1:BBBB", time.Minute)
	set := e.secrets("acme")
	if sealedOf(set) != "k1:AAAA,k1:BBBB" || set.Secrets[0].ID != first || set.Secrets[1].ID != second {
		t.Fatalf("during the rotation: %+v", set)
	}
	if want := e.clock.Now().Add(time.Minute); !set.Secrets[0].Expires.Equal(want) || !set.Secrets[1].Expires.IsZero() {
		t.Fatalf("expiries %s and %s, want %s and never", set.Secrets[0].Expires, set.Secrets[1].Expires, want)
	}
	e.clock.Advance(time.Minute)
	if got := sealedOf(e.secrets("acme")); got != "k1:BBBB" {
		t.Fatalf("after the rotation: %q, want only the new secret", got)
	}
	if err := e.store.DeleteSecret(e.ctx, "acme", first); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete of the expired secret: %v, want ErrNotFound", err)
	}
	if err := e.store.DeleteSecret(e.ctx, "acme", second); err != nil {
		t.Fatal(err)
	}
	if set := e.secrets("acme"); len(set.Secrets) != 0 || e.rdb.Exists(e.ctx, e.store.keys.secrets("acme")).Val() != 0 {
		t.Fatalf("after deleting the last secret: %+v, key still there", set)
	}
}

// expire_previous_in 0 ends the previous secrets at once; at most
// MaxSecrets are live; bad input changes nothing.
func TestSecretsBoundsAndBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addSecret("acme", "k1:OLD", time.Hour)
	e.addSecret("acme", "k1:NEW", 0)
	if got := sealedOf(e.secrets("acme")); got != "k1:NEW" {
		t.Fatalf("after a rotation with 0: %q", got)
	}
	for i := 1; i < MaxSecrets; i++ {
		e.addSecret("acme", "k1:MORE", time.Hour)
	}
	id, _ := NewSecretID(e.clock.Now())
	if _, err := e.store.AddSecret(e.ctx, "acme", id, "k1:X", time.Hour); !errors.Is(err, ErrConflict) {
		t.Fatalf("secret %d: %v, want ErrConflict", MaxSecrets+1, err)
	}
	before := e.rdb.HGetAll(e.ctx, e.store.keys.secrets("acme")).Val()
	for _, c := range []struct {
		tenant, id, sealed string
		d                  time.Duration
	}{
		{"acme", "whs_bad", "k1:X", time.Hour}, {"acme", "~live", "k1:X", time.Hour},
		{"acme", id, "", time.Hour}, {"acme", id, "k1:A B", time.Hour},
		{"acme", id, "k1:X", -time.Second}, {"bad:tenant", id, "k1:X", time.Hour},
	} {
		if _, err := e.store.AddSecret(e.ctx, c.tenant, c.id, c.sealed, c.d); !errors.Is(err, ErrInvalid) {
			t.Errorf("AddSecret(%q, %q, %q, %s) = %v, want ErrInvalid", c.tenant, c.id, c.sealed, c.d, err)
		}
	}
	if err := e.store.DeleteSecret(e.ctx, "acme", "~live"); !errors.Is(err, ErrInvalid) {
		t.Errorf("DeleteSecret(~live) = %v, want ErrInvalid", err)
	}
	after := e.rdb.HGetAll(e.ctx, e.store.keys.secrets("acme")).Val()
	if len(after) != len(before) || after["~live"] != before["~live"] {
		t.Fatalf("bad input changed the hash: %d fields → %d", len(before), len(after))
	}
}

// A webhook item carrying CodeNoWebhookSecret is refused unless the tenant
// holds a live secret by API or its policy says unsigned.
func TestEnqueueNoWebhookSecret(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	unsignedRefused := func(body string) Item {
		it := item(body)
		it.Unless = &Refusal{Code: CodeNoWebhookSecret, Detail: "no secret"}
		return it
	}
	if r := e.enqueue("acme", unsignedRefused(`1`))[0]; r.Outcome != Refused || r.Code != CodeNoWebhookSecret {
		t.Fatalf("no secret: %+v, want refused no_webhook_secret", r)
	}
	if st := e.state("acme"); st.Backlog != 0 {
		t.Fatalf("a refused item was stored: %+v", st)
	}
	id := e.addSecret("acme", "k1:S", time.Hour)
	if r := e.enqueue("acme", unsignedRefused(`2`))[0]; r.Outcome != Accepted {
		t.Fatalf("with a secret: %+v, want accepted", r)
	}
	if err := e.store.DeleteSecret(e.ctx, "acme", id); err != nil {
		t.Fatal(err)
	}
	if r := e.enqueue("acme", unsignedRefused(`3`))[0]; r.Outcome != Refused {
		t.Fatalf("after the delete: %+v, want refused", r)
	}
	// A secret that expires: live until its expiry, then refused again.
	e.addSecret("acme", "k1:A", time.Hour)
	b := e.addSecret("acme", "k1:B", time.Minute) // A now expires in a minute
	if err := e.store.DeleteSecret(e.ctx, "acme", b); err != nil {
		t.Fatal(err)
	}
	if r := e.enqueue("acme", unsignedRefused(`4`))[0]; r.Outcome != Accepted {
		t.Fatalf("with a secret expiring in a minute: %+v", r)
	}
	e.clock.Advance(time.Minute)
	if r := e.enqueue("acme", unsignedRefused(`5`))[0]; r.Outcome != Refused {
		t.Fatalf("after the last secret expired: %+v, want refused", r)
	}
	if _, err := e.store.PutTenantPolicy(e.ctx, "acme", Overrides{Unsigned: ptr(1)}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	if r := e.enqueue("acme", unsignedRefused(`6`))[0]; r.Outcome != Accepted {
		t.Fatalf("with unsigned: %+v, want accepted", r)
	}
	if set := e.secrets("acme"); !set.Unsigned || len(set.Secrets) != 0 {
		t.Fatalf("Secrets: %+v, want unsigned and none live", set)
	}
}

// The shard's secrets version moves with every secret added or deleted and
// every policy write on the shard, and with nothing else; a policy hash
// left without an epoch by an earlier release has no version ("").
func TestSettingsVersionMovesWithSecretsAndPolicies(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	version := func() string {
		t.Helper()
		v, err := e.store.SettingsVersion(e.ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if shard, err := e.store.TenantShard("acme"); err != nil || shard != 0 {
		t.Fatalf("shard of acme: %d, %v", shard, err)
	}
	if _, err := e.store.TenantShard("no tenant"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a bad tenant id: %v, want ErrInvalid", err)
	}
	if _, err := e.store.SettingsVersion(e.ctx, 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("shard 1 of 1: %v, want ErrInvalid", err)
	}
	seen := map[string]bool{}
	moved := func(what string) {
		t.Helper()
		v := version()
		if v == "" || seen[v] {
			t.Fatalf("after %s: version %q, want a new one (seen %v)", what, v, seen)
		}
		seen[v] = true
	}
	moved("nothing")
	id := e.addSecret("acme", "sealed-1", time.Hour)
	moved("a secret added")
	e.enqueueOne("acme", item(`{}`))
	if v := version(); !seen[v] {
		t.Fatalf("an enqueue moved the version to %q", v)
	}
	if err := e.store.DeleteSecret(e.ctx, "acme", id); err != nil {
		t.Fatal(err)
	}
	moved("a secret deleted")
	if _, err := e.store.PutTenantPolicy(e.ctx, "globex", Overrides{Unsigned: ptr(int64(1))}, 0); err != nil {
		t.Fatal(err)
	}
	moved("a policy written")
	if err := e.rdb.HDel(e.ctx, e.store.keys.policy(0), "#v").Err(); err != nil { // as an earlier release left it
		t.Fatal(err)
	}
	if v := version(); v != "" {
		t.Fatalf("policies without an epoch: version %q, want none", v)
	}
}

// A webhook job's claim carries its tenant's signing state — the live
// secrets by API (oldest first) and the unsigned flag, what Secrets reads at
// the claim's now — so the worker signs without a read of its own; other
// jobs' claims carry none, and neither does a claim whose tenant holds a
// corrupt secret (the worker's own read then reports it).
func TestClaimCarriesTheSigningState(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.Burst = 10 }))
	first := e.addSecret("acme", "k1:AAAA", time.Hour)
	e.clock.Advance(time.Second)
	second := e.addSecret("acme", "k1:BBBB", time.Minute) // the first expires in a minute
	e.enqueue("acme", item(`1`), Item{Type: "http", Body: []byte(`2`)}, item(`3`), item(`4`))
	rel := e.passTenant("acme", time.Second, -1)
	if len(rel) != 4 {
		t.Fatalf("released %d of 4", len(rel))
	}
	hook := e.claimAt(rel[0])
	if s := hook.Signing; s == nil || s.Unsigned || !s.Now.Equal(e.clock.Now()) || sealedOf(*s) != "k1:AAAA,k1:BBBB" ||
		s.Secrets[0].ID != first || s.Secrets[1].ID != second || !s.Secrets[1].Expires.IsZero() {
		t.Fatalf("webhook claim's signing state %+v, want both secrets, signed", s)
	}
	if want := e.secrets("acme"); hook.Signing.Secrets[0] != want.Secrets[0] || hook.Signing.Secrets[1] != want.Secrets[1] {
		t.Fatalf("claim's secrets %+v, Secrets reads %+v", hook.Signing.Secrets, want.Secrets)
	}
	if http := e.claimAt(rel[1]); http.Signing != nil {
		t.Fatalf("http claim's signing state %+v, want none", http.Signing)
	}

	// The first secret expired; the policy says unsigned: the next claim says so.
	e.clock.Advance(time.Minute)
	if _, err := e.store.PutTenantPolicy(e.ctx, "acme", Overrides{Unsigned: ptr(int64(1))}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	if s := e.claimAt(rel[2]).Signing; s == nil || !s.Unsigned || sealedOf(*s) != "k1:BBBB" {
		t.Fatalf("after the expiry and the policy write: %+v, want the second secret alone, unsigned", s)
	}

	// A corrupt secret: no signing state in the claim, which still succeeds.
	// Written around secrets_write.lua, it renews the shard's policy epoch
	// as that script does (claims remember the secrets per epoch).
	if err := e.rdb.HSet(e.ctx, e.store.keys.secrets("acme"), "whs_corrupt", "not a secret").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.HSet(e.ctx, e.store.keys.policy(e.store.keys.shardOf("acme")), "#v", "corrupted").Err(); err != nil {
		t.Fatal(err)
	}
	if c := e.claimAt(rel[3]); c.Signing != nil || c.ID != rel[3].ID {
		t.Fatalf("claim with a corrupt secret: %+v, want claimed without a signing state", c)
	}
	if _, err := e.store.Secrets(e.ctx, "acme"); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("Secrets with a corrupt secret: %v, want it named", err)
	}
}

// Claims remember a tenant's secrets across calls per the shard's policy
// epoch, which every secrets write renews (lib.lua signing_set): every add, rotation and delete is in the very
// next claim's signing state — a deleted secret never signs again — and a
// claim call with several webhook tenants reads each one's secrets once.
// Not parallel: it counts the server's HGETALLs.
func TestClaimSigningFollowsEverySecretWrite(t *testing.T) {
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.Burst = 10 }))
	e.enqueue("acme", item(`1`), item(`2`), item(`3`), item(`4`), item(`5`))
	rel := e.passTenant("acme", time.Second, -1)
	if len(rel) != 5 {
		t.Fatalf("released %d of 5", len(rel))
	}
	signing := func(r wire.Release) string {
		t.Helper()
		s := e.claimAt(r).Signing
		if s == nil {
			t.Fatalf("claim of %s: no signing state", r.ID)
		}
		return sealedOf(*s)
	}
	if got := signing(rel[0]); got != "" {
		t.Fatalf("no secrets: signing with %q", got)
	}
	first := e.addSecret("acme", "k1:AAAA", time.Hour)
	if got := signing(rel[1]); got != "k1:AAAA" {
		t.Fatalf("after an add: signing with %q, want k1:AAAA", got)
	}
	e.clock.Advance(time.Second)
	e.addSecret("acme", "k1:BBBB", 0) // a rotation: the first expires at once
	if got := signing(rel[2]); got != "k1:BBBB" {
		t.Fatalf("after a rotation: signing with %q, want k1:BBBB", got)
	}
	if err := e.store.DeleteSecret(e.ctx, "acme", first); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete of the expired secret: %v, want not found", err)
	}
	set, err := e.store.Secrets(e.ctx, "acme")
	if err != nil || len(set.Secrets) != 1 {
		t.Fatalf("secrets %+v, %v: want the second alone", set, err)
	}
	if err := e.store.DeleteSecret(e.ctx, "acme", set.Secrets[0].ID); err != nil {
		t.Fatal(err)
	}
	if got := signing(rel[3]); got != "" {
		t.Fatalf("after the last delete: signing with %q, want no secret", got)
	}

	// One call, three webhook tenants with secrets: one HGETALL each, and
	// none in the next call of the same epoch.
	e = newEnvShards(t, 1)
	e.seed(params(func(p *Params) { p.Burst = 10 }))
	tenants := []string{"t1", "t2", "t3"}
	for _, tn := range tenants {
		e.addSecret(tn, "k1:"+tn, time.Hour)
		e.enqueue(tn, item(`1`), item(`2`))
	}
	rel = e.passTenant("t1", time.Second, -1)
	if len(rel) != 6 {
		t.Fatalf("released %d of 6", len(rel))
	}
	slices.SortFunc(rel, func(a, b wire.Release) int { return strings.Compare(a.ID, b.ID) }) // t1's, t2's, t3's
	var reqs, second []ClaimRequest
	for k := range tenants {
		reqs = append(reqs, ClaimRequest{ID: rel[2*k].ID, Gen: rel[2*k].Gen})
		second = append(second, ClaimRequest{ID: rel[2*k+1].ID, Gen: rel[2*k+1].Gen})
		if s := rel[2*k+1].Slot; s.After(e.clock.Now()) {
			e.clock.Set(s)
		}
	}
	for i, reqs := range [][]ClaimRequest{reqs, second} {
		before := e.hgetalls()
		cs := e.claimBatch(0, reqs...)
		for k, c := range cs {
			if c.Outcome != ClaimOK || c.Job.Signing == nil || sealedOf(*c.Job.Signing) != "k1:"+tenants[k] {
				t.Fatalf("call %d, claim %d: %+v", i, k, c)
			}
		}
		if n, want := e.hgetalls()-before, int64(3*(1-i)); n != want+int64(len(tenants)) {
			t.Fatalf("call %d: %d HGETALLs, want %d for the tenants' states and %d for their secrets", i, n, len(tenants), want)
		}
	}
}

// hgetalls is the server's count of HGETALL calls so far.
func (e *env) hgetalls() int64 {
	e.t.Helper()
	info, err := e.rdb.Info(e.ctx, "commandstats").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_hgetall:calls="); ok {
			n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			return n
		}
	}
	return 0
}
