package api

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/store"
)

// Webhook secrets by API (admin keys): POST, GET and DELETE
// /v1/tenants/{tenant}/secrets[/{id}]. A secret is shown only in the answer
// to the POST that made it; it is stored sealed by Options.Secrets
// (AES-256-GCM, the tenant id as additional data) and opened only by the
// workers that sign with it.

// ExpirePreviousDefault is expire_previous_in when a POST does not give it.
const ExpirePreviousDefault = 24 * time.Hour

// GeneratedSecretBytes is the size of a secret the API makes.
const GeneratedSecretBytes = 32

// secretRequest is the optional body of POST /v1/tenants/{tenant}/secrets.
type secretRequest struct {
	// Secret imports a "whsec_…" secret (policy.ParseWebhookSecret); absent:
	// one of GeneratedSecretBytes random bytes is made.
	Secret *string `json:"secret"`
	// ExpirePreviousIn is when the tenant's other live secrets stop signing
	// (0: at once); default ExpirePreviousDefault.
	ExpirePreviousIn *policy.Duration `json:"expire_previous_in"`
}

// secretCreated answers the POST: the only time the secret is shown.
type secretCreated struct {
	ID        string  `json:"id"`
	Secret    string  `json:"secret"`
	CreatedAt *string `json:"created_at"`
}

// secretView is one entry of GET /v1/tenants/{tenant}/secrets: never the
// secret. ExpiresAt is null while it has no expiry.
type secretView struct {
	ID        string  `json:"id"`
	CreatedAt *string `json:"created_at"`
	ExpiresAt *string `json:"expires_at"`
}

// secretsOff is the 503 of every secrets route while no key is configured.
func secretsOff() error {
	return &Error{Status: http.StatusServiceUnavailable, Code: CodeSecretsDisabled,
		Message: "webhook secrets by API are off: configure secrets.key (or $SLUICE_SECRETS_KEY) " +
			"on the throttler and the workers; secrets in the configuration file keep signing"}
}

// secretsTenant checks an admin key allowed the path's tenant, then that
// secrets by API are on (503 secrets_disabled otherwise).
func (s *Server) secretsTenant(r *http.Request, c *call) (string, error) {
	tenant, err := s.adminTenant(r, c)
	if err == nil && s.opts.Secrets == nil {
		err = secretsOff()
	}
	return tenant, err
}

// createSecret is POST /v1/tenants/{tenant}/secrets: 201 with the new
// secret; 422 for a bad import or expire_previous_in; 409 when the tenant
// already holds store.MaxSecrets live secrets; 503 without a key.
func (s *Server) createSecret(r *http.Request, c *call) (int, any, error) {
	tenant, err := s.secretsTenant(r, c)
	if err != nil {
		return 0, nil, err
	}
	var req secretRequest
	if err := decodeOptionalJSON(c.w, r, s.opts.MaxBodyBytes, &req); err != nil {
		return 0, nil, err
	}
	secret, expire, err := req.resolve()
	if err != nil {
		return 0, nil, err
	}
	id, err := store.NewSecretID(time.Now())
	if err != nil {
		return 0, nil, err
	}
	sealed, err := s.opts.Secrets.Seal([]byte(secret), []byte(tenant))
	if err != nil {
		return 0, nil, err
	}
	at, err := s.opts.Store.AddSecret(r.Context(), tenant, id, sealed, expire)
	if errors.Is(err, store.ErrConflict) {
		return 0, nil, errorf(http.StatusConflict, CodeConflict,
			"tenant %q holds %d live secrets, the most: delete one, or rotate with expire_previous_in 0", tenant, store.MaxSecrets)
	}
	if err != nil {
		return 0, nil, s.storeError(r, "add_secret", err)
	}
	return http.StatusCreated, secretCreated{ID: id, Secret: secret, CreatedAt: timeString(at)}, nil
}

// resolve validates the body: the secret to store (imported or made) and
// expire_previous_in. Errors never contain the secret.
func (req secretRequest) resolve() (string, time.Duration, error) {
	expire := ExpirePreviousDefault
	if req.ExpirePreviousIn != nil {
		expire = time.Duration(*req.ExpirePreviousIn)
		if expire < 0 || expire > policy.MaxDuration {
			return "", 0, errorf(http.StatusUnprocessableEntity, CodeInvalid,
				"expire_previous_in: want 0 (at once) to %s, got %s", policy.MaxDuration, expire)
		}
	}
	if req.Secret != nil {
		if _, err := policy.ParseWebhookSecret(*req.Secret); err != nil {
			return "", 0, errorf(http.StatusUnprocessableEntity, CodeInvalid, "secret: %s", err.Error())
		}
		return *req.Secret, expire, nil
	}
	key := make([]byte, GeneratedSecretBytes)
	if _, err := rand.Read(key); err != nil {
		return "", 0, err
	}
	return policy.SecretPrefix + base64.StdEncoding.EncodeToString(key), expire, nil
}

// listSecrets is GET /v1/tenants/{tenant}/secrets: the tenant's live
// secrets by API, oldest first, without the secrets.
func (s *Server) listSecrets(r *http.Request, c *call) (int, any, error) {
	tenant, err := s.secretsTenant(r, c)
	if err != nil {
		return 0, nil, err
	}
	set, err := s.opts.Store.Secrets(r.Context(), tenant)
	if err != nil {
		return 0, nil, s.storeError(r, "secrets", err)
	}
	out := make([]secretView, 0, len(set.Secrets))
	for _, sec := range set.Secrets {
		out = append(out, secretView{ID: sec.ID, CreatedAt: timeString(sec.Created), ExpiresAt: timeString(sec.Expires)})
	}
	return http.StatusOK, out, nil
}

// deleteSecret is DELETE /v1/tenants/{tenant}/secrets/{id}: 204; 404 for
// an id the tenant has no live secret by.
func (s *Server) deleteSecret(r *http.Request, c *call) (int, any, error) {
	tenant, err := s.secretsTenant(r, c)
	if err != nil {
		return 0, nil, err
	}
	id := r.PathValue("id")
	err = store.ValidSecretID(id)
	if err == nil {
		err = s.opts.Store.DeleteSecret(r.Context(), tenant, id)
	}
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalid) {
		return 0, nil, errorf(http.StatusNotFound, CodeNotFound, "tenant %q has no live secret %q", tenant, clipMessage(id))
	}
	if err != nil {
		return 0, nil, s.storeError(r, "delete_secret", err)
	}
	return http.StatusNoContent, nil, nil
}
