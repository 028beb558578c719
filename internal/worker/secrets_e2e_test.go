package worker_test

import (
	"context"
	"crypto/rand"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/deliverytest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/secretbox"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/webhook"
	"github.com/sluicehq/sluice/internal/worker"
)

// shiftClock is time.Now moved forward by an offset the test sets: the
// workers' clock for secret expiry and cache refresh.
type shiftClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *shiftClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *shiftClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

func newKeyring(t *testing.T) *secretbox.Keyring {
	t.Helper()
	key := make([]byte, secretbox.KeyBytes)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	ring, err := secretbox.NewKeyring(secretbox.Key{ID: "test", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return ring
}

// addSecret seals secret for tenant and stores it as the API does.
func (h *harness) addSecret(ring *secretbox.Keyring, tenant, secret string, expirePrevious time.Duration) string {
	h.t.Helper()
	id, err := store.NewSecretID(time.Now())
	if err != nil {
		h.t.Fatal(err)
	}
	sealed, err := ring.Seal([]byte(secret), []byte(tenant))
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.st.AddSecret(h.ctx, tenant, id, sealed, expirePrevious); err != nil {
		h.t.Fatal(err)
	}
	return id
}

// verifies reports which of secrets verify call's signature, and how many
// signatures it carries.
func verifies(t *testing.T, c hookCall, secrets ...string) ([]bool, int) {
	t.Helper()
	return deliverytest.SignedBy(t, c.body, c.header, secrets...)
}

// Secrets by API sign at once, a rotation signs with both until the
// previous one expires, a deleted secret stops signing at the next send
// (each claim carries the tenant's secrets, so the worker reads none and
// caches none), and a tenant with no secret gets no unsigned delivery.
func TestSecretsByAPISignRotateDelete(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	recv := newHookServer(t, answer(""))
	ring := newKeyring(t)
	clock := &shiftClock{}
	h.policy("acme", store.Overrides{RateUS: ptr(10_000), Concurrency: ptr(5)})
	client := loopbackClient(t)
	st := &countingSecrets{SecretReader: h.st}
	signing := &worker.SigningKeys{Store: st, Keyring: ring, Now: clock.Now}
	h.startWorker(5, &worker.WebhookExecutor{Client: client, Signing: signing},
		func(c *worker.Config) { c.Settings.Tolerance = 10 * time.Millisecond })
	h.startDispatcher(nil)
	n := 0
	deliver := func() hookCall { // one job, and its request
		t.Helper()
		h.enqueueTo("acme", recv.srv.URL+"/hooks", 1)
		n++
		return recv.waitCalls(t, n, 5*time.Second)[n-1]
	}

	s1, s2, s3 := newSecret(t), newSecret(t), newSecret(t)
	h.addSecret(ring, "acme", s1, time.Hour)
	if ok, sigs := verifies(t, deliver(), s1); !ok[0] || sigs != 1 {
		t.Fatalf("after create: s1 verifies %v, %d signatures; want s1 alone", ok[0], sigs)
	}

	h.addSecret(ring, "acme", s2, time.Minute) // rotate: s1 signs for one more minute
	clock.Advance(worker.SigningRefreshDefault)
	if ok, sigs := verifies(t, deliver(), s1, s2); !ok[0] || !ok[1] || sigs != 2 {
		t.Fatalf("during the rotation: s1 %v, s2 %v, %d signatures; want both", ok[0], ok[1], sigs)
	}
	clock.Advance(time.Minute)
	if ok, sigs := verifies(t, deliver(), s1, s2); ok[0] || !ok[1] || sigs != 1 {
		t.Fatalf("after s1 expired: s1 %v, s2 %v, %d signatures; want s2 alone", ok[0], ok[1], sigs)
	}

	id3 := h.addSecret(ring, "acme", s3, time.Hour)
	clock.Advance(worker.SigningRefreshDefault)
	if ok, sigs := verifies(t, deliver(), s2, s3); !ok[0] || !ok[1] || sigs != 2 {
		t.Fatalf("with s3: s2 %v, s3 %v, %d signatures", ok[0], ok[1], sigs)
	}
	if err := h.st.DeleteSecret(h.ctx, "acme", id3); err != nil {
		t.Fatal(err)
	}
	// The claim carries the secrets: a deletion counts from the next send
	// on (no cache to wait for), and the sends read nothing themselves.
	if ok, sigs := verifies(t, deliver(), s2, s3); !ok[0] || ok[1] || sigs != 1 {
		t.Fatalf("after deleting s3: s2 %v, s3 %v, %d signatures; want s2 alone", ok[0], ok[1], sigs)
	}
	if r, v := st.reads.Load(), st.versions.Load(); r != 0 || v != 0 {
		t.Fatalf("%d secret reads and %d version reads for %d sends, want none: the claims carry the secrets", r, v, n)
	}

	// A second worker process (a restart) reads the same secrets.
	again, err := (&worker.SigningKeys{Store: h.st, Keyring: ring, Now: clock.Now}).Keys(h.ctx, "acme")
	if err != nil || len(again) != 1 {
		t.Fatalf("a new SigningKeys: %d keys, %v; want s2", len(again), err)
	}
	h.noStall(t)
}

// A tenant whose every secret is gone (and whose policy is not unsigned)
// gets no unsigned request: its job fails permanently with
// no_webhook_secret; with unsigned it is sent without a signature.
func TestNoSecretIsNeverSentUnsigned(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	recv := newHookServer(t, answer(""))
	ring := newKeyring(t)
	client := loopbackClient(t)
	h.startWorker(5, &worker.WebhookExecutor{Client: client, Signing: &worker.SigningKeys{Store: h.st, Keyring: ring}},
		func(c *worker.Config) { c.Settings.Tolerance = 10 * time.Millisecond })
	h.startDispatcher(nil)
	id := h.enqueueTo("bare", recv.srv.URL+"/hooks", 1)[0]
	redistest.Poll(t, 5*time.Second, "the job dead", func() bool { return h.jobOf(id).State == store.StateDead })
	if j := h.jobOf(id); len(j.Attempts) != 1 || j.Attempts[0].Error != "no_webhook_secret" || len(recv.snapshot()) != 0 {
		t.Fatalf("job %+v, %d requests; want dead of no_webhook_secret, nothing sent", j, len(recv.snapshot()))
	}
	h.policy("open", store.Overrides{Unsigned: ptr(1)})
	h.enqueueTo("open", recv.srv.URL+"/hooks", 1)
	c := recv.waitCalls(t, 1, 5*time.Second)[0]
	if c.status != http.StatusOK || c.header.Get(webhook.HeaderSignature) != "" {
		t.Fatalf("unsigned tenant: status %d, signature %q; want sent, unsigned", c.status, c.header.Get(webhook.HeaderSignature))
	}
	h.noStall(t)
}

// countingSecrets counts the reads of a SecretReader.
type countingSecrets struct {
	worker.SecretReader
	reads, versions atomic.Int64
}

func (c *countingSecrets) Secrets(ctx context.Context, tenant string) (store.SecretSet, error) {
	c.reads.Add(1)
	return c.SecretReader.Secrets(ctx, tenant)
}

func (c *countingSecrets) SettingsVersion(ctx context.Context, shard int) (string, error) {
	c.versions.Add(1)
	return c.SecretReader.SettingsVersion(ctx, shard)
}

// A worker reads a tenant's secrets again only when its shard's secrets or
// policies changed (the shard's version, read at most once per half
// refresh for all its tenants): steady signing costs one small read per
// shard, and a new secret, a deleted one or a policy change is still used
// within the refresh.
func TestSigningKeysReadAgainOnlyWhenTheShardChanged(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	ring := newKeyring(t)
	clock := &shiftClock{}
	st := &countingSecrets{SecretReader: h.st}
	signing := &worker.SigningKeys{Store: st, Keyring: ring, Now: clock.Now}
	tenants := []string{"acme", "globex", "initech"}
	s1 := newSecret(t)
	for _, tn := range tenants {
		h.addSecret(ring, tn, s1, time.Hour)
	}
	keys := func(tn string) int {
		t.Helper()
		k, err := signing.Keys(h.ctx, tn)
		if err != nil {
			t.Fatal(err)
		}
		return len(k)
	}
	for _, tn := range tenants {
		keys(tn)
	}
	if r, v := st.reads.Load(), st.versions.Load(); r != 3 || v != 1 {
		t.Fatalf("first use of 3 tenants: %d secret reads, %d version reads; want 3 and 1", r, v)
	}
	for range 5 { // nothing changes: only the shard's version is read
		clock.Advance(worker.SigningRefreshDefault)
		for _, tn := range tenants {
			keys(tn)
		}
	}
	if r, v := st.reads.Load(), st.versions.Load(); r != 3 || v != 6 {
		t.Fatalf("5 refreshes without a change: %d secret reads, %d version reads; want 3 and 6", r, v)
	}

	h.addSecret(ring, "acme", newSecret(t), time.Hour) // a rotation: both sign
	clock.Advance(worker.SigningRefreshDefault)
	if n := keys("acme"); n != 2 {
		t.Fatalf("a refresh after the rotation: %d keys, want 2", n)
	}
	if r := st.reads.Load(); r != 4 {
		t.Fatalf("%d secret reads after the rotation, want 4 (acme again)", r)
	}

	h.policy("globex", store.Overrides{Unsigned: ptr(int64(1))}) // a policy write moves the version too
	clock.Advance(worker.SigningRefreshDefault)
	keys("globex")
	if r := st.reads.Load(); r != 5 {
		t.Fatalf("%d secret reads after a policy write, want 5 (globex again)", r)
	}
}

// countingPolicies counts the policy reads of a PolicyReader.
type countingPolicies struct {
	worker.PolicyReader
	reads atomic.Int64
}

func (c *countingPolicies) TenantPolicy(ctx context.Context, tenant string) (store.PolicyRecord, error) {
	c.reads.Add(1)
	return c.PolicyReader.TenantPolicy(ctx, tenant)
}

// An http job's result settings are read again only when the shard's
// settings moved, and a policy write is used within the refresh.
func TestResultSettingsReadAgainOnlyWhenTheShardChanged(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	st := &countingPolicies{PolicyReader: h.st}
	const refresh = 40 * time.Millisecond
	r := &worker.ResultSettings{Store: st, Refresh: refresh}
	h.policy("acme", store.Overrides{MaxResultBytes: ptr(int64(100))})
	if n, _ := r.Of(h.ctx, "acme"); n != 100 {
		t.Fatalf("max result bytes %d, want 100", n)
	}
	before := st.reads.Load()
	redistest.Hold(t, 3*refresh, "no policy read while nothing changes", func() bool {
		n, _ := r.Of(h.ctx, "acme")
		return n == 100 && st.reads.Load() == before
	})
	if _, err := h.st.PutTenantPolicy(h.ctx, "acme", store.Overrides{MaxResultBytes: ptr(int64(200))}, 1); err != nil {
		t.Fatal(err)
	}
	redistest.Poll(t, 5*time.Second, "the new max_result_bytes used", func() bool {
		n, _ := r.Of(h.ctx, "acme")
		return n == 200
	})
	if got := st.reads.Load() - before; got != 1 {
		t.Fatalf("%d policy reads for one policy write, want 1", got)
	}
}
