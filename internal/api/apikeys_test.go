package api

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
)

// twoThrottlers serves two API servers on one Redis and prefix, each with
// its own memory (as two throttler processes), both Started.
func twoThrottlers(t *testing.T) (a, b *fixture) {
	t.Helper()
	var opts Options
	a = newStoreFixture(t, func(o *Options, _ redis.UniversalClient, _ string) { opts = *o })
	opts.Registry = prometheus.NewRegistry()
	b = serveFixture(t, opts)
	for _, f := range []*fixture{a, b} {
		if err := f.srv.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.srv.Stop)
	}
	return a, b
}

func keysOf(t *testing.T, r response) map[string]map[string]any {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("GET /v1/keys: %d %v", r.status, r.body)
	}
	out := map[string]map[string]any{}
	for _, k := range r.body["keys"].([]any) {
		m := k.(map[string]any)
		out[m["name"].(string)] = m
	}
	return out
}

// TestAPIKeysByAPI: a key made on one throttler works there at once and on
// another within a second; it is listed with its last use, never with the
// key or its hash; revoked, every throttler refuses it within a second.
func TestAPIKeysByAPI(t *testing.T) {
	t.Parallel()
	a, b := twoThrottlers(t)
	r := a.post(t, "/v1/keys", adminToken, `{"name":"integrator","tenants":["acme-*"],"limits":["search"]}`)
	if r.status != http.StatusCreated || r.body["source"] != KeySourceAPI || r.body["created_at"] == nil {
		t.Fatalf("create: %d %v", r.status, r.body)
	}
	token, _ := r.body["key"].(string)
	if !strings.HasPrefix(token, APIKeyPrefix) || len(token) < 40 {
		t.Fatalf("key %q, want %s and 32 random bytes", token, APIKeyPrefix)
	}
	if g := a.get(t, "/v1/tenants/acme-1", token); g.status != http.StatusOK {
		t.Fatalf("the new key on the throttler that made it: %d %v", g.status, g.body)
	}
	if g := a.get(t, "/v1/tenants/globex", token); g.status != http.StatusForbidden {
		t.Errorf("a tenant outside its globs: %d, want 403", g.status)
	}
	start := time.Now()
	redistest.Poll(t, 2*time.Second, "the new key accepted by the other throttler", func() bool {
		return b.get(t, "/v1/tenants/acme-1", token).status == http.StatusOK
	})
	if took := time.Since(start); took > time.Second {
		t.Errorf("the other throttler took %s to accept the key, want ≤ 1s", took)
	}

	// Listed, without the key; its use shows within a refresh.
	redistest.Poll(t, 2*time.Second, "the key's last use listed", func() bool {
		return keysOf(t, a.get(t, "/v1/keys", adminToken))["integrator"]["last_used_at"] != nil
	})
	r = a.get(t, "/v1/keys", adminToken)
	keys := keysOf(t, r)
	if k := keys["integrator"]; k["admin"] != false || k["expires_at"] != nil || k["tenants"].([]any)[0] != "acme-*" {
		t.Errorf("listed %v", k)
	}
	for _, name := range []string{"producer", "ops", "plain"} {
		if keys[name]["source"] != KeySourceConfig {
			t.Errorf("file key %q listed as %v, want source config", name, keys[name])
		}
	}
	for _, secret := range []string{token, config.HashKey(token), "sha256", `"key"`} {
		if raw := rawGet(t, a, "/v1/keys", adminToken); strings.Contains(raw, secret) {
			t.Fatalf("GET /v1/keys shows %q: %s", secret, raw)
		}
	}

	// Refusals.
	for _, tc := range []struct {
		name, token, body string
		status            int
	}{
		{"by a non-admin key", producerToken, `{"name":"x"}`, http.StatusForbidden},
		{"the name of a file key", adminToken, `{"name":"producer"}`, http.StatusConflict},
		{"a name taken by API", adminToken, `{"name":"integrator"}`, http.StatusConflict},
		{"bad fields", adminToken, `{"name":"a b","tenants":["[x"],"limits":["api"],"expires_at":"2001-01-01T00:00:00Z"}`, http.StatusUnprocessableEntity},
	} {
		if r := a.post(t, "/v1/keys", tc.token, tc.body); r.status != tc.status {
			t.Errorf("create %s: %d %v, want %d", tc.name, r.status, r.body, tc.status)
		} else if tc.status == http.StatusUnprocessableEntity {
			for _, field := range []string{"name:", "tenants[0]:", "limits[0]:", "expires_at:"} {
				if !strings.Contains(errorMessage(r), field) {
					t.Errorf("422 %q does not name %s", errorMessage(r), field)
				}
			}
		}
	}
	if r := a.do(t, "DELETE", "/v1/keys/producer", adminToken, "", ""); r.status != http.StatusConflict {
		t.Errorf("delete a file key: %d, want 409", r.status)
	}
	if r := a.do(t, "DELETE", "/v1/keys/nobody", adminToken, "", ""); r.status != http.StatusNotFound {
		t.Errorf("delete an unknown key: %d, want 404", r.status)
	}

	// Revoked on a, refused on a at once and on b within a second.
	if r := a.do(t, "DELETE", "/v1/keys/integrator", adminToken, "", ""); r.status != http.StatusNoContent {
		t.Fatalf("revoke: %d %v", r.status, r.body)
	}
	start = time.Now()
	if g := a.get(t, "/v1/tenants/acme-1", token); g.status != http.StatusUnauthorized {
		t.Errorf("the revoked key on the throttler that revoked it: %d, want 401", g.status)
	}
	redistest.Poll(t, 2*time.Second, "the revoked key refused by the other throttler", func() bool {
		return b.get(t, "/v1/tenants/acme-1", token).status == http.StatusUnauthorized
	})
	if took := time.Since(start); took > time.Second {
		t.Errorf("the other throttler took %s to refuse the revoked key, want ≤ 1s", took)
	}
	if _, listed := keysOf(t, a.get(t, "/v1/keys", adminToken))["integrator"]; listed {
		t.Error("the revoked key is still listed")
	}
}

// TestAPIKeyExpires: a key past its expires_at is refused by every
// throttler, by its own clock, and listed as expired.
func TestAPIKeyExpires(t *testing.T) {
	t.Parallel()
	a, b := twoThrottlers(t)
	expires := time.Now().Add(1500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	r := a.post(t, "/v1/keys", adminToken, `{"name":"temp","tenants":["*"],"admin":true,"expires_at":"`+expires+`"}`)
	if r.status != http.StatusCreated || r.body["admin"] != true || r.body["expires_at"] == nil {
		t.Fatalf("create: %d %v", r.status, r.body)
	}
	token := r.body["key"].(string)
	redistest.Poll(t, 2*time.Second, "the key accepted by the other throttler", func() bool {
		return b.get(t, "/v1/keys", token).status == http.StatusOK
	})
	for _, f := range []*fixture{a, b} {
		redistest.Poll(t, 3*time.Second, "the key refused once expired", func() bool {
			g := f.get(t, "/v1/keys", token)
			return g.status == http.StatusUnauthorized && strings.Contains(errorMessage(g), "expired")
		})
	}
	if k := keysOf(t, a.get(t, "/v1/keys", adminToken))["temp"]; k["expired"] != true {
		t.Errorf("listed %v, want expired", k)
	}
}

// rawGet returns the raw body of a GET.
func rawGet(t *testing.T, f *fixture, path, token string) string {
	t.Helper()
	req, err := http.NewRequest("GET", f.http.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := f.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// countingHook counts the commands a client sends (pipelines command by
// command).
type countingHook struct{ n atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

// TestKeyringHotPathNoRedis: authenticating a key by API sends nothing to
// Redis, however many requests; one refresh then costs one HSET of the
// last uses and one HGET of the version.
func TestKeyringHotPathNoRedis(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	token := "sk_hot-path"
	if err := st.CreateAPIKey(ctx, store.APIKey{Name: "hot", SHA256: config.HashKey(token), Tenants: []string{"*"}, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	kr := newKeyring(nil)
	if err := kr.reload(ctx, st); err != nil {
		t.Fatal(err)
	}
	hook := &countingHook{}
	rdb.AddHook(hook)
	req, _ := http.NewRequest("GET", "/v1/keys", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	for range 1000 {
		if k, err := kr.authenticate(req); err != nil || k.Name != "hot" {
			t.Fatalf("authenticate: %v, %v", k, err)
		}
	}
	if n := hook.n.Load(); n != 0 {
		t.Fatalf("1000 authentications sent %d commands to Redis, want 0", n)
	}
	if err := kr.refresh(ctx, st); err != nil {
		t.Fatal(err)
	}
	if n := hook.n.Load(); n != 2 {
		t.Errorf("one refresh sent %d commands, want 2 (HSET of the last uses, HGET of the version)", n)
	}
	used, err := st.APIKeysUsed(ctx)
	if err != nil || used["hot"].IsZero() {
		t.Errorf("last use after the refresh: %v, %v", used, err)
	}
}
