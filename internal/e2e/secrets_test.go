package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/deliverytest"
)

// secretsSection is the configuration's secrets section with a fresh
// random key: secrets by API on.
func secretsSection(t *testing.T) string {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("{key: %q}", base64.StdEncoding.EncodeToString(key))
}

// createdSecret is the 201 of POST /v1/tenants/{t}/secrets.
type createdSecret struct {
	ID        string `json:"id"`
	Secret    string `json:"secret"`
	CreatedAt string `json:"created_at"`
}

// createSecret POSTs body (nil: none) to tenant's secrets on p and returns
// the 201's id, secret and creation time.
func (c *cluster) createSecret(p *proc, tenant string, body any) createdSecret {
	c.t.Helper()
	var s createdSecret
	if st := c.call(p, http.MethodPost, "/v1/tenants/"+tenant+"/secrets", body, &s); st != http.StatusCreated ||
		s.ID == "" || !strings.HasPrefix(s.Secret, "whsec_") {
		c.t.Fatalf("POST /v1/tenants/%s/secrets: %d, want 201 with an id and a whsec_ secret", tenant, st)
	}
	return s
}

// arrivalOf waits until a request with webhook-id id (or, for a callback,
// one whose webhook-id starts with "cb_<id>_") has reached the receiver's
// path tenant, and returns the first.
func (c *cluster) arrivalOf(tenant, id string, within time.Duration) arrival {
	c.t.Helper()
	var got arrival
	find := func() bool {
		for _, a := range c.recv.arrivals(tenant) {
			if a.id == id || strings.HasPrefix(a.id, "cb_"+id+"_") {
				got = a
				return true
			}
		}
		return false
	}
	c.recv.waitUntil(c.t, within, find, func() string { return fmt.Sprintf("no request for %s arrived at /hooks/%s", id, tenant) })
	return got
}

// signedBy is deliverytest.SignedBy of a.
func signedBy(t *testing.T, a arrival, secrets ...string) ([]bool, int) {
	t.Helper()
	return deliverytest.SignedBy(t, a.body, a.header, secrets...)
}

// secretForms are the ways a whsec_ secret could show: whole, its base64,
// its raw bytes, and those bytes in hex and in the other base64 alphabets.
func secretForms(t *testing.T, secret string) []string {
	t.Helper()
	b64 := strings.TrimPrefix(secret, "whsec_")
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) < 24 {
		t.Fatalf("secret %q: %d bytes, %v", secret, len(raw), err)
	}
	return []string{secret, b64, string(raw), hex.EncodeToString(raw),
		base64.RawStdEncoding.EncodeToString(raw), base64.RawURLEncoding.EncodeToString(raw)}
}

// noSecretIn fails the test when text (named what) holds any form of a
// secret or anything that starts like one.
func noSecretIn(t *testing.T, what string, text []byte, secrets ...string) {
	t.Helper()
	if bytes.Contains(text, []byte("whsec_")) {
		t.Errorf("%s shows a whsec_ secret: %s", what, text)
	}
	for _, s := range secrets {
		for _, form := range secretForms(t, s) {
			if bytes.Contains(text, []byte(form)) {
				t.Errorf("%s holds the secret's bytes (%d-byte form): %s", what, len(form), text)
			}
		}
	}
}

// TestSecretByAPISignsAcrossRestarts: a tenant made at run time (no
// configuration, not unsigned) is refused webhook jobs until a secret is
// created through the API; then the real worker's webhook and the job's
// callback verify (Standard Webhooks) with the secret the POST returned,
// and the job views (a webhook job and an http job, with their callback
// and result) hold no form of it. A rotation without expire_previous_in
// ends the first secret 24 h after the second's creation. Then every
// process restarts (SIGTERM, start again): GET lists both secrets, and the
// next webhook carries both signatures, each verifying.
func TestSecretByAPISignsAcrossRestarts(t *testing.T) {
	t.Parallel()
	const tenant = "acme"
	c := newCluster(t, options{sections: map[string]string{"secrets": secretsSection(t)}})
	th, w := c.startThrottler(), c.startWorker()
	procs := []*proc{th, w}

	// The base configuration's defaults are unsigned: this tenant is not.
	if st := c.call(th, http.MethodPut, "/v1/tenants/"+tenant+"/policy", map[string]any{"unsigned": false}, nil); st != http.StatusOK {
		t.Fatalf("PUT policy: %d", st)
	}
	var refusal struct {
		Error struct{ Code string } `json:"error"`
	}
	if st := c.call(th, http.MethodPost, "/v1/tenants/"+tenant+"/jobs", c.webhookJob(tenant, 0), &refusal); st != http.StatusUnprocessableEntity ||
		refusal.Error.Code != "no_webhook_secret" {
		t.Fatalf("a webhook job before any secret: %d %+v, want 422 no_webhook_secret", st, refusal)
	}

	s1 := c.createSecret(th, tenant, nil)
	hook := c.webhookJob(tenant, 1)
	hook["callback"] = map[string]string{"url": c.recv.url("callbacks")}
	hookID := c.enqueueOne(th, tenant, hook, "")
	httpID := c.enqueueOne(th, tenant, map[string]any{"type": "http", "method": "POST", "url": c.recv.url("http"),
		"body": `{"i":2}`, "callback": map[string]string{"url": c.recv.url("callbacks")}}, "")

	got := c.arrivalOf(tenant, hookID, 30*time.Second)
	if ok, sigs := signedBy(t, got, s1.Secret); !ok[0] || sigs != 1 {
		t.Fatalf("the webhook: verifies with the created secret %v, %d signatures; want one, verifying", ok[0], sigs)
	}
	for _, id := range []string{hookID, httpID} {
		cb := c.arrivalOf("callbacks", id, 30*time.Second)
		if ok, sigs := signedBy(t, cb, s1.Secret); !ok[0] || sigs != 1 {
			t.Fatalf("the callback of %s: verifies %v, %d signatures", id, ok[0], sigs)
		}
		noSecretIn(t, "the callback of "+id, cb.body, s1.Secret)
	}
	c.waitSucceeded(th, []string{hookID, httpID}, 15*time.Second)
	for _, id := range []string{hookID, httpID} {
		var view json.RawMessage
		if st := c.call(th, http.MethodGet, "/v1/jobs/"+id, nil, &view); st != http.StatusOK {
			t.Fatalf("GET /v1/jobs/%s: %d", id, st)
		}
		var fields struct {
			Callback *struct{ URL string } `json:"callback"`
			Result   json.RawMessage       `json:"result"`
			Attempts []json.RawMessage     `json:"attempts"`
		}
		if err := json.Unmarshal(view, &fields); err != nil || fields.Callback == nil || len(fields.Attempts) != 1 {
			t.Fatalf("GET /v1/jobs/%s: %s (%v); want its callback and one attempt", id, view, err)
		}
		if id == httpID && len(fields.Result) == 0 {
			t.Fatalf("the http job's view has no result: %s", view)
		}
		noSecretIn(t, "the view of job "+id, view, s1.Secret)
	}

	// A rotation without expire_previous_in: s1 signs 24 h more.
	s2 := c.createSecret(th, tenant, map[string]any{})
	listed := apiSecrets(t, c, th, tenant)
	rotated, _ := time.Parse(time.RFC3339, s2.CreatedAt)
	if len(listed) != 2 || listed[0].ID != s1.ID || listed[1].ID != s2.ID || listed[0].ExpiresAt == nil || listed[1].ExpiresAt != nil {
		t.Fatalf("after the rotation: %+v, want %s expiring, then %s", listed, s1.ID, s2.ID)
	}
	if exp, err := time.Parse(time.RFC3339, *listed[0].ExpiresAt); err != nil || !exp.Equal(rotated.Add(24*time.Hour)) {
		t.Fatalf("the previous secret expires at %s, want the rotation's created_at %s + 24h (%v)", *listed[0].ExpiresAt, s2.CreatedAt, err)
	}

	// Every process restarts.
	w.term(10 * time.Second)
	th.term(15 * time.Second)
	th, w = c.startThrottler(), c.startWorker()
	procs = append(procs, th, w)
	if again := apiSecrets(t, c, th, tenant); len(again) != 2 || again[0].ID != s1.ID || again[0].ExpiresAt == nil ||
		*again[0].ExpiresAt != *listed[0].ExpiresAt || again[1].ID != s2.ID || again[1].ExpiresAt != nil {
		t.Fatalf("after the restart the API lists %+v, want %s expiring at %s, then %s", again, s1.ID, *listed[0].ExpiresAt, s2.ID)
	}
	after := c.arrivalOf(tenant, c.enqueueOne(th, tenant, c.webhookJob(tenant, 3), ""), 30*time.Second)
	if ok, sigs := signedBy(t, after, s1.Secret, s2.Secret); !ok[0] || !ok[1] || sigs != 2 {
		t.Fatalf("the webhook after the restart: s1 verifies %v, s2 %v, %d signatures; want both", ok[0], ok[1], sigs)
	}
	for _, p := range procs {
		noSecretIn(t, "the log of "+p.name, []byte(p.logs.String()), s1.Secret, s2.Secret)
	}
}
