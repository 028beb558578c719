package secretbox

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func randomKey(t *testing.T, id string) Key {
	t.Helper()
	b := make([]byte, KeyBytes)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	k, err := ParseKey(id, base64.StdEncoding.EncodeToString(b))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpenRoundTripAndBinding(t *testing.T) {
	t.Parallel()
	ring, err := NewKeyring(randomKey(t, "k1"))
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0")
	sealed, err := ring.Seal(secret, []byte("acme"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sealed, "k1:") || strings.Contains(sealed, string(secret)) {
		t.Fatalf("sealed %q: want k1:<base64>, not containing the secret", sealed)
	}
	again, _ := ring.Seal(secret, []byte("acme"))
	if again == sealed {
		t.Fatal("two seals of one secret are equal: the nonce is not fresh")
	}
	got, err := ring.Open(sealed, []byte("acme"))
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Open = %q, %v; want the secret", got, err)
	}
	if _, err := ring.Open(sealed, []byte("globex")); !errors.Is(err, ErrOpen) {
		t.Fatalf("Open for another tenant: %v, want ErrOpen", err)
	}
	flipped := []byte(sealed)
	flipped[len(flipped)-3] ^= 1
	if _, err := ring.Open(string(flipped), []byte("acme")); !errors.Is(err, ErrOpen) {
		t.Fatalf("Open of a changed value: %v, want ErrOpen", err)
	}
	other, _ := NewKeyring(randomKey(t, "k1"))
	if _, err := other.Open(sealed, []byte("acme")); !errors.Is(err, ErrOpen) {
		t.Fatalf("Open with another key of the same id: %v, want ErrOpen", err)
	}
	var none *Keyring
	if _, err := none.Open(sealed, []byte("acme")); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("Open without keys: %v, want ErrUnknownKey", err)
	}
}

func TestRotationSealsWithFirstOpensWithAll(t *testing.T) {
	t.Parallel()
	old, cur := randomKey(t, "old"), randomKey(t, "new")
	before, _ := NewKeyring(old)
	sealedOld, err := before.Seal([]byte("s1"), []byte("t"))
	if err != nil {
		t.Fatal(err)
	}
	after, err := NewKeyring(cur, old)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := after.Open(sealedOld, []byte("t")); err != nil || string(got) != "s1" {
		t.Fatalf("rotated keyring opens the old value: %q, %v", got, err)
	}
	sealedNew, _ := after.Seal([]byte("s2"), []byte("t"))
	if !strings.HasPrefix(sealedNew, "new:") || after.KeyID() != "new" {
		t.Fatalf("sealed %q with key %q; want the first key, new", sealedNew, after.KeyID())
	}
	if _, err := before.Open(sealedNew, []byte("t")); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("old keyring opens a new value: %v, want ErrUnknownKey", err)
	}
}

func TestBadKeysAndValues(t *testing.T) {
	t.Parallel()
	short := base64.StdEncoding.EncodeToString(make([]byte, 16))
	for _, c := range []struct{ id, key string }{
		{"k1", short}, {"k1", "not base64!"}, {"", base64.StdEncoding.EncodeToString(make([]byte, 32))},
		{"bad:id", base64.StdEncoding.EncodeToString(make([]byte, 32))},
	} {
		_, err := ParseKey(c.id, c.key)
		if err == nil {
			t.Errorf("ParseKey(%q, %q) accepted", c.id, c.key)
			continue
		}
		if strings.Contains(err.Error(), c.key) && c.key != "" {
			t.Errorf("error %q contains the key", err)
		}
	}
	k := randomKey(t, "k")
	if _, err := NewKeyring(k, k); err == nil {
		t.Error("NewKeyring accepted a duplicate id")
	}
	if _, err := NewKeyring(); err == nil {
		t.Error("NewKeyring accepted no key")
	}
	ring, _ := NewKeyring(k)
	for _, v := range []string{"", "k", "k:", "k:!!!", "k:" + base64.StdEncoding.EncodeToString([]byte("short"))} {
		if _, err := ring.Open(v, nil); !errors.Is(err, ErrOpen) {
			t.Errorf("Open(%q) = %v, want ErrOpen", v, err)
		}
	}
}
