package policy

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

func TestSigningKeysPerTenantAndDefaults(t *testing.T) {
	timeout := Duration(time.Minute)
	defaults := Overrides{WebhookSecrets: Secrets{secretA}}
	tenants := map[string]Overrides{
		"acme": {WebhookSecrets: Secrets{secretA, secretB}, Timeout: &timeout},
		"bare": {WebhookSecrets: Secrets{}},
	}
	keys, maxTimeout, err := SigningKeys(defaults, tenants)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := ParseWebhookSecret(secretA)
	b, _ := ParseWebhookSecret(secretB)
	if got := keys("acme"); len(got) != 2 || !bytes.Equal(got[0], a) || !bytes.Equal(got[1], b) {
		t.Errorf("acme's keys: %d keys, want its two secrets", len(got))
	}
	if got := keys("bare"); len(got) != 0 {
		t.Errorf("bare's keys: %d keys, want none", len(got))
	}
	if got := keys("other"); len(got) != 1 || !bytes.Equal(got[0], a) {
		t.Errorf("an unconfigured tenant's keys: %d keys, want the defaults' one", len(got))
	}
	if maxTimeout != time.Minute {
		t.Errorf("max timeout %s, want 1m", maxTimeout)
	}
	tenants["bad"] = Overrides{WebhookSecrets: Secrets{"nope"}}
	if _, _, err := SigningKeys(defaults, tenants); !errors.Is(err, ErrInvalidSecret) {
		t.Errorf("a bad secret: %v, want ErrInvalidSecret", err)
	}
}
