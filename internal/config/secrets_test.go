package config

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

const sharedSecret = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

// A secret in defaults is shared by every tenant without its own: a
// configuration error unless secrets.allow_shared_secret.
func TestSharedDefaultsSecretNeedsAllow(t *testing.T) {
	t.Parallel()
	_, err := loadString(t, "defaults: {webhook_secrets: [\""+sharedSecret+"\"]}\n")
	if got := problemFields(t, err); !slices.Equal(got, []string{"defaults.webhook_secrets"}) {
		t.Fatalf("problems %v, want defaults.webhook_secrets", got)
	}
	if strings.Contains(err.Error(), sharedSecret) {
		t.Fatalf("the error shows the secret: %v", err)
	}
	c, err := loadString(t, "defaults: {webhook_secrets: [\""+sharedSecret+"\"]}\nsecrets: {allow_shared_secret: true}\n")
	if err != nil || !c.Secrets.AllowSharedSecret {
		t.Fatalf("with allow_shared_secret: %v", err)
	}
}

// The key comes from the file or $SLUICE_SECRETS_KEY; a bad key is named
// without being shown; a keyring seals with the current key and opens
// values of the previous ones.
func TestSecretsKeyFromFileAndEnv(t *testing.T) {
	t.Parallel()
	c, err := Load("", env{EnvSecretsKey: testSecretsKey, EnvSecretsKeyID: "env-key"}.get)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Secrets.Enabled() || c.Secrets.Key != testSecretsKey || c.Secrets.KeyID != "env-key" {
		t.Fatalf("env key not applied: %v", c.Secrets)
	}
	for _, s := range []string{fmt.Sprint(c.Secrets), fmt.Sprintf("%+v", c.Secrets), fmt.Sprintf("%#v", c.Secrets), slog.AnyValue(c.Secrets).Resolve().String()} {
		if strings.Contains(s, testSecretsKey) {
			t.Fatalf("printed config shows the key: %s", s)
		}
	}
	old, err := Load("", env{EnvSecretsKey: testSecretsKeyOld, EnvSecretsKeyID: "old"}.get)
	if err != nil {
		t.Fatal(err)
	}
	oldRing, _ := old.Secrets.Keyring()
	sealed, err := oldRing.Seal([]byte("s"), []byte("acme"))
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := loadString(t, fmt.Sprintf("secrets: {key: %q, key_id: new, previous_keys: [{id: old, key: %q}]}\n", testSecretsKey, testSecretsKeyOld))
	if err != nil {
		t.Fatal(err)
	}
	ring, err := rotated.Secrets.Keyring()
	if err != nil || ring.KeyID() != "new" {
		t.Fatalf("keyring %v, %v; want one sealing with key new", ring.KeyID(), err)
	}
	if got, err := ring.Open(sealed, []byte("acme")); err != nil || string(got) != "s" {
		t.Fatalf("rotated keyring opens the old value: %q, %v", got, err)
	}
	none, _ := Load("", nil)
	if r, err := none.Secrets.Keyring(); r != nil || err != nil || none.Secrets.Enabled() {
		t.Fatalf("no key: keyring %v, %v; want none", r, err)
	}
}

func TestSecretsBadKeys(t *testing.T) {
	t.Parallel()
	_, err := loadString(t, `secrets:
  key: "c2hvcnQ="
  key_id: "bad id"
  previous_keys: [{id: k1, key: "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}, {id: k1, key: "nope"}]
`)
	got := problemFields(t, err)
	want := []string{"secrets.key", "secrets.previous_keys[1]", "secrets.previous_keys[1].id"}
	if !slices.Equal(got, want) {
		t.Fatalf("problems %v, want %v", got, want)
	}
	if strings.Contains(err.Error(), "c2hvcnQ=") || strings.Contains(err.Error(), "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=") {
		t.Fatalf("the error shows a key: %v", err)
	}
	_, err = loadString(t, "secrets: {previous_keys: [{id: k0, key: \"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\"}]}\n")
	if got := problemFields(t, err); !slices.Equal(got, []string{"secrets.previous_keys"}) {
		t.Fatalf("previous keys without a key: %v", got)
	}
}
