package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/secretbox"
	"github.com/sluicehq/sluice/internal/store"
)

// secretsFixture is a store fixture whose tenants have no file secrets,
// with secrets by API sealed by a fresh key, logging at debug into logs.
type secretsFixture struct {
	*fixture
	ring   *secretbox.Keyring
	rdb    redis.UniversalClient
	prefix string
	logs   *redistest.SyncBuffer
}

func testKeyring(t *testing.T, id string) *secretbox.Keyring {
	t.Helper()
	key := make([]byte, secretbox.KeyBytes)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	ring, err := secretbox.NewKeyring(secretbox.Key{ID: id, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return ring
}

func newSecretsFixture(t *testing.T, ring *secretbox.Keyring) *secretsFixture {
	t.Helper()
	sf := &secretsFixture{ring: ring, logs: &redistest.SyncBuffer{}}
	sf.fixture = newStoreFixture(t, func(o *Options, rdb redis.UniversalClient, prefix string) {
		o.FileSigned, o.Secrets = nil, ring
		o.Logger = slog.New(slog.NewTextHandler(sf.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		sf.rdb, sf.prefix = rdb, prefix
	})
	return sf
}

// raw sends a request and returns the status and body as they are.
func (f *fixture) raw(t *testing.T, method, path, token, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, f.http.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := f.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type listedSecret struct {
	ID        string  `json:"id"`
	CreatedAt string  `json:"created_at"`
	ExpiresAt *string `json:"expires_at"`
}

func (f *fixture) listSecrets(t *testing.T, tenant string) []listedSecret {
	t.Helper()
	status, b := f.raw(t, "GET", "/v1/tenants/"+tenant+"/secrets", adminToken, "")
	var out []listedSecret
	if err := json.Unmarshal(b, &out); status != http.StatusOK || err != nil {
		t.Fatalf("list secrets: %d %s (%v)", status, b, err)
	}
	if bytes.Contains(b, []byte(policy.SecretPrefix)) {
		t.Fatalf("the list shows a secret: %s", b)
	}
	return out
}

// createSecret POSTs body and returns the 201's id and secret.
func (f *fixture) createSecret(t *testing.T, tenant, body string) (string, string) {
	t.Helper()
	r := f.post(t, "/v1/tenants/"+tenant+"/secrets", adminToken, body)
	id, _ := r.body["id"].(string)
	secret, _ := r.body["secret"].(string)
	created, _ := r.body["created_at"].(string)
	if r.status != http.StatusCreated || store.ValidSecretID(id) != nil || !etaPattern.MatchString(created) {
		t.Fatalf("create secret: %d %v", r.status, r.body)
	}
	if _, err := policy.ParseWebhookSecret(secret); err != nil {
		t.Fatalf("created secret is not a whsec_ secret: %v", err)
	}
	return id, secret
}

// storedValues is every value of tenant's secrets hash in Redis.
func (sf *secretsFixture) storedValues(t *testing.T, tenant string) map[string]string {
	t.Helper()
	key := sf.prefix + ":{s" + strconv.Itoa(store.ShardOf(tenant, 4)) + "}:sec:" + tenant
	m, err := sf.rdb.HGetAll(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Create, import with rotation, list, delete; the secret is shown only by
// the POST, stored encrypted (not the secret; another key or tenant cannot
// open it), kept across a restart, and never logged or shown elsewhere.
func TestSecretsRoutes(t *testing.T) {
	t.Parallel()
	sf := newSecretsFixture(t, testKeyring(t, "k1"))
	id1, s1 := sf.createSecret(t, "acme", "")
	if got := sf.listSecrets(t, "acme"); len(got) != 1 || got[0].ID != id1 || got[0].ExpiresAt != nil {
		t.Fatalf("list after create: %+v", got)
	}
	stored := sf.storedValues(t, "acme")
	body := strings.TrimPrefix(s1, policy.SecretPrefix)
	for f, v := range stored {
		if strings.Contains(v, s1) || strings.Contains(v, body) {
			t.Fatalf("Redis field %s holds the secret in clear: %q", f, v)
		}
	}
	sealed := strings.Fields(stored[id1])[2]
	if got, err := sf.ring.Open(sealed, []byte("acme")); err != nil || string(got) != s1 {
		t.Fatalf("the right key opens %q, %v; want the secret", got, err)
	}
	if _, err := testKeyring(t, "k1").Open(sealed, []byte("acme")); !errors.Is(err, secretbox.ErrOpen) {
		t.Fatalf("another key opens the stored value: %v", err)
	}
	if _, err := sf.ring.Open(sealed, []byte("globex")); !errors.Is(err, secretbox.ErrOpen) {
		t.Fatalf("the value opens for another tenant: %v", err)
	}

	imported := policy.SecretPrefix + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	id2, s2 := sf.createSecret(t, "acme", `{"secret":"`+imported+`","expire_previous_in":"1h"}`)
	if s2 != imported {
		t.Fatal("the import answered another secret")
	}
	got := sf.listSecrets(t, "acme")
	if len(got) != 2 || got[0].ID != id1 || got[1].ID != id2 || got[0].ExpiresAt == nil || got[1].ExpiresAt != nil {
		t.Fatalf("list after the rotation: %+v, want %s expiring, then %s", got, id1, id2)
	}
	created, _ := time.Parse(time.RFC3339, got[1].CreatedAt)
	expires, _ := time.Parse(time.RFC3339, *got[0].ExpiresAt)
	if d := expires.Sub(created); d < time.Hour-time.Second || d > time.Hour+time.Second {
		t.Fatalf("the previous secret expires %s after the rotation, want 1h", d)
	}

	// A restart: a new store and server on the same Redis list the same.
	st, err := store.NewStore(sf.rdb, store.Config{Prefix: sf.prefix, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	opts := sf.srv.opts
	opts.Store, opts.Registry = st, prometheus.NewRegistry()
	restarted := serveFixture(t, opts)
	if again := restarted.listSecrets(t, "acme"); len(again) != 2 || again[1].ID != id2 {
		t.Fatalf("after a restart: %+v", again)
	}

	if status, _ := sf.raw(t, "DELETE", "/v1/tenants/acme/secrets/"+id2, adminToken, ""); status != http.StatusNoContent {
		t.Fatalf("delete: %d", status)
	}
	if got := sf.listSecrets(t, "acme"); len(got) != 1 || got[0].ID != id1 {
		t.Fatalf("after delete: %+v", got)
	}
	for _, path := range []string{"/v1/tenants/acme/secrets/" + id2, "/v1/tenants/acme/secrets/nope", "/v1/tenants/globex/secrets/" + id1} {
		if status, b := sf.raw(t, "DELETE", path, adminToken, ""); status != http.StatusNotFound {
			t.Errorf("DELETE %s: %d %s, want 404", path, status, b)
		}
	}

	// Nothing else ever shows a secret: logs, metrics, the tenant view.
	_, tenant := sf.raw(t, "GET", "/v1/tenants/acme", adminToken, "")
	_, metrics := sf.raw(t, "GET", "/metrics", adminToken, "")
	for what, text := range map[string]string{"logs": sf.logs.String(), "metrics": string(metrics), "tenant view": string(tenant)} {
		for _, s := range []string{s1, s2, strings.TrimPrefix(s1, policy.SecretPrefix)} {
			if strings.Contains(text, s) {
				t.Errorf("the %s show a secret", what)
			}
		}
	}
}

// Bad input gets a 4xx and changes nothing; a producer key gets 403; a
// tenant at store.MaxSecrets gets 409.
func TestSecretsBadInput(t *testing.T) {
	t.Parallel()
	sf := newSecretsFixture(t, testKeyring(t, "k1"))
	id, _ := sf.createSecret(t, "acme", "")
	before := sf.storedValues(t, "acme")
	short := policy.SecretPrefix + base64.StdEncoding.EncodeToString(make([]byte, 8))
	for _, c := range []struct {
		body   string
		status int
	}{
		{`{"secret":"` + short + `"}`, 422},
		{`{"secret":"whsec_%%%garbled"}`, 422},
		{`{"secret":"sk_live_abcdefghijklmnopqrstuvwxyz0123456789"}`, 422},
		{`{"secret":12}`, 422},
		{`{"expire_previous_in":"-1s"}`, 422},
		{`{"expire_previous_in":"soon"}`, 400},
		{`{"expire_in":"1h"}`, 400},
		{`{"secret":`, 400},
	} {
		status, b := sf.raw(t, "POST", "/v1/tenants/acme/secrets", adminToken, c.body)
		if status != c.status {
			t.Errorf("POST %s: %d %s, want %d", c.body, status, b, c.status)
		}
		if strings.Contains(string(b), "garbled") || strings.Contains(string(b), "sk_live") || strings.Contains(string(b), short) {
			t.Errorf("POST %s: the error repeats the secret: %s", c.body, b)
		}
	}
	if status, _ := sf.raw(t, "POST", "/v1/tenants/acme/secrets", producerToken, ""); status != http.StatusForbidden {
		t.Errorf("a producer key creates secrets: %d", status)
	}
	if status, _ := sf.raw(t, "GET", "/v1/tenants/acme/secrets", producerToken, ""); status != http.StatusForbidden {
		t.Errorf("a producer key lists secrets: %d", status)
	}
	after := sf.storedValues(t, "acme")
	if len(after) != len(before) || after[id] != before[id] {
		t.Fatalf("bad input changed the stored secrets: %v → %v", before, after)
	}
	for i := 1; i < store.MaxSecrets; i++ {
		sf.createSecret(t, "acme", `{"expire_previous_in":"1h"}`)
	}
	if status, b := sf.raw(t, "POST", "/v1/tenants/acme/secrets", adminToken, `{"expire_previous_in":"1h"}`); status != http.StatusConflict {
		t.Fatalf("secret %d: %d %s, want 409", store.MaxSecrets+1, status, b)
	}
	sf.createSecret(t, "acme", `{"expire_previous_in":"0s"}`) // expires the others at once
	if got := sf.listSecrets(t, "acme"); len(got) != 1 {
		t.Fatalf("after a rotation with 0s: %d secrets, want 1", len(got))
	}
}

// Without a key the routes answer 503 secrets_disabled.
func TestSecretsWithoutKey(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	for _, c := range []struct{ method, path string }{
		{"POST", "/v1/tenants/acme/secrets"}, {"GET", "/v1/tenants/acme/secrets"},
		{"DELETE", "/v1/tenants/acme/secrets/whs_01JDQ3Z9X8K2M4N6P8R0T2V4W6"},
	} {
		status, b := f.raw(t, c.method, c.path, adminToken, "")
		var e struct {
			Error errorDetail `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		if status != http.StatusServiceUnavailable || e.Error.Code != CodeSecretsDisabled || !strings.Contains(e.Error.Message, "secrets.key") {
			t.Errorf("%s %s: %d %s, want 503 secrets_disabled naming secrets.key", c.method, c.path, status, b)
		}
	}
}

// A webhook job of a tenant with no secret is refused 422
// no_webhook_secret (alone and in a batch) and stores nothing; a secret by
// API or unsigned: true admits it; http jobs need no secret.
func TestEnqueueNeedsAWebhookSecret(t *testing.T) {
	t.Parallel()
	sf := newSecretsFixture(t, testKeyring(t, "k1"))
	r := sf.post(t, "/v1/tenants/acme-a/jobs", producerToken, webhookJob)
	if r.status != http.StatusUnprocessableEntity || errorCode(r) != CodeNoWebhookSecret {
		t.Fatalf("webhook job without a secret: %d %v", r.status, r.body)
	}
	b := sf.post(t, "/v1/tenants/acme-a/jobs:batch", producerToken, batch(webhookJob, `{"type":"http","url":"https://example.com/x","method":"POST"}`))
	res := results(t, b)
	if b.status != http.StatusAccepted || res[0]["status"] != float64(422) || res[1]["status"] != float64(202) {
		t.Fatalf("batch: %d %v; want the webhook item 422, the http item 202", b.status, res)
	}
	if e, _ := res[0]["error"].(map[string]any); e["code"] != CodeNoWebhookSecret {
		t.Fatalf("batch webhook item: %v", res[0])
	}
	tv := sf.get(t, "/v1/tenants/acme-a", adminToken)
	if tv.body["backlog"] != float64(1) {
		t.Fatalf("backlog %v after the refusals, want 1 (the http job)", tv.body["backlog"])
	}
	id, _ := sf.createSecret(t, "acme-a", "")
	requireAccepted(t, sf.post(t, "/v1/tenants/acme-a/jobs", producerToken, webhookJob), "acme-a", "queued")
	if status, _ := sf.raw(t, "DELETE", "/v1/tenants/acme-a/secrets/"+id, adminToken, ""); status != http.StatusNoContent {
		t.Fatal("delete failed")
	}
	if r := sf.post(t, "/v1/tenants/acme-a/jobs", producerToken, webhookJob); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("after deleting the secret: %d, want 422", r.status)
	}
	if r := sf.send(t, "PUT", "/v1/tenants/acme-a/policy", adminToken, strings.NewReader(`{"unsigned":true}`)); r.status != http.StatusOK {
		t.Fatalf("PUT unsigned: %d %v", r.status, r.body)
	}
	requireAccepted(t, sf.post(t, "/v1/tenants/acme-a/jobs", producerToken, webhookJob), "acme-a", "queued")
}

// A rotation that does not give expire_previous_in (no body, or a body
// without the field) ends the previous secrets ExpirePreviousDefault (24 h)
// after the new one's created_at, to the millisecond the API shows; one
// already ending sooner keeps its end.
func TestRotationDefaultsTo24h(t *testing.T) {
	t.Parallel()
	if ExpirePreviousDefault != 24*time.Hour {
		t.Fatalf("ExpirePreviousDefault %s, the issue says 24h", ExpirePreviousDefault)
	}
	sf := newSecretsFixture(t, testKeyring(t, "k1"))
	id1, _ := sf.createSecret(t, "acme", "")
	id2, _ := sf.createSecret(t, "acme", "{}")
	id3, _ := sf.createSecret(t, "acme", `{"secret":"`+policy.SecretPrefix+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))+`"}`)
	got := sf.listSecrets(t, "acme")
	if len(got) != 3 || got[0].ID != id1 || got[1].ID != id2 || got[2].ID != id3 || got[0].ExpiresAt == nil || got[1].ExpiresAt == nil || got[2].ExpiresAt != nil {
		t.Fatalf("after two rotations: %+v, want %s and %s expiring, then %s", got, id1, id2, id3)
	}
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if want := at(got[1].CreatedAt).Add(24 * time.Hour); !at(*got[0].ExpiresAt).Equal(want) {
		t.Errorf("the first secret expires at %s, want the second's created_at + 24h = %s", *got[0].ExpiresAt, want.Format(time.RFC3339Nano))
	}
	if want := at(got[2].CreatedAt).Add(24 * time.Hour); !at(*got[1].ExpiresAt).Equal(want) {
		t.Errorf("the second secret expires at %s, want the third's created_at + 24h = %s", *got[1].ExpiresAt, want.Format(time.RFC3339Nano))
	}
}
