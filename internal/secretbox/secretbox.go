// Package secretbox encrypts small secrets at rest with AES-256-GCM (stdlib
// crypto/aes and crypto/cipher) under a keyring whose keys carry ids, so the
// key can be rotated: the first key seals, every key opens.
//
// A sealed value is the text "<key id>:<base64 of nonce ‖ ciphertext ‖ tag>"
// (standard base64, padded; the nonce is 12 random bytes). The caller's
// additional data (for Sluice, the tenant id) is authenticated but not
// stored: a value sealed for one tenant does not open for another. No error
// of this package contains a key or a plaintext. The package has no I/O.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// KeyBytes is the length of every key: AES-256.
const KeyBytes = 32

// MaxKeyIDLen bounds a key id, 1 … MaxKeyIDLen characters of [A-Za-z0-9_.-].
const MaxKeyIDLen = 32

// Errors wrapped by Open.
var (
	// ErrUnknownKey: the value names a key id the keyring does not hold.
	ErrUnknownKey = errors.New("secretbox: sealed with a key this keyring does not hold")
	// ErrOpen: the value is malformed, or fails authentication (another key
	// with the same id, other additional data, or a changed ciphertext).
	ErrOpen = errors.New("secretbox: cannot open the sealed value")
)

// Key is one keyring entry: an id and the 32 key bytes.
type Key struct {
	ID  string
	Key []byte
}

// ParseKey builds a Key from an id and the standard (padded) base64 of 32
// bytes. The error names the id, never the key.
func ParseKey(id, b64 string) (Key, error) {
	if err := ValidKeyID(id); err != nil {
		return Key{}, err
	}
	k, err := base64.StdEncoding.Strict().DecodeString(strings.TrimSpace(b64))
	if err != nil {
		return Key{}, fmt.Errorf("secretbox: key %q: not standard base64", id)
	}
	if len(k) != KeyBytes {
		return Key{}, fmt.Errorf("secretbox: key %q: %d bytes, want %d", id, len(k), KeyBytes)
	}
	return Key{ID: id, Key: k}, nil
}

// ValidKeyID checks a key id: 1 … MaxKeyIDLen characters of [A-Za-z0-9_.-].
func ValidKeyID(id string) error {
	if id == "" || len(id) > MaxKeyIDLen || strings.TrimLeft(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") != "" {
		return fmt.Errorf("secretbox: key id %q: want 1 to %d characters of [A-Za-z0-9_.-]", id, MaxKeyIDLen)
	}
	return nil
}

// Keyring seals with its first key and opens with any of them. The zero
// value (nil) holds no key: Seal and Open fail. A Keyring is immutable and
// safe for concurrent use.
type Keyring struct {
	first string
	aeads map[string]cipher.AEAD
}

// NewKeyring builds a keyring from keys, the first used by Seal. Ids must be
// unique; at least one key is required.
func NewKeyring(keys ...Key) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("secretbox: no key")
	}
	r := &Keyring{first: keys[0].ID, aeads: make(map[string]cipher.AEAD, len(keys))}
	for _, k := range keys {
		if err := ValidKeyID(k.ID); err != nil {
			return nil, err
		}
		if _, dup := r.aeads[k.ID]; dup {
			return nil, fmt.Errorf("secretbox: key id %q given twice", k.ID)
		}
		if len(k.Key) != KeyBytes {
			return nil, fmt.Errorf("secretbox: key %q: %d bytes, want %d", k.ID, len(k.Key), KeyBytes)
		}
		block, err := aes.NewCipher(k.Key)
		if err != nil {
			return nil, fmt.Errorf("secretbox: key %q: %w", k.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("secretbox: key %q: %w", k.ID, err)
		}
		r.aeads[k.ID] = aead
	}
	return r, nil
}

// KeyID is the id of the key Seal uses; "" for a nil Keyring.
func (r *Keyring) KeyID() string {
	if r == nil {
		return ""
	}
	return r.first
}

// Seal encrypts plaintext under the first key with a fresh random nonce,
// authenticating ad with it.
func (r *Keyring) Seal(plaintext, ad []byte) (string, error) {
	if r == nil {
		return "", errors.New("secretbox: no key")
	}
	aead := r.aeads[r.first]
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("secretbox: nonce: %w", err)
	}
	sealed := aead.Seal(nonce, nonce, plaintext, ad)
	return r.first + ":" + base64.StdEncoding.EncodeToString(sealed), nil
}

// Open decrypts a value Seal returned, with the same ad. ErrUnknownKey when
// its key id is not in the keyring; ErrOpen when it is malformed or fails
// authentication.
func (r *Keyring) Open(sealed string, ad []byte) ([]byte, error) {
	id, body, ok := strings.Cut(sealed, ":")
	if !ok {
		return nil, fmt.Errorf("%w: no key id", ErrOpen)
	}
	var aead cipher.AEAD
	if r != nil {
		aead = r.aeads[id]
	}
	if aead == nil {
		return nil, fmt.Errorf("%w (key id %q)", ErrUnknownKey, id)
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(body)
	if err != nil || len(raw) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("%w: malformed (key id %q)", ErrOpen, id)
	}
	n := aead.NonceSize()
	out, err := aead.Open(nil, raw[:n], raw[n:], ad)
	if err != nil {
		return nil, fmt.Errorf("%w: authentication failed (key id %q)", ErrOpen, id)
	}
	return out, nil
}
