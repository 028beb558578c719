package policy

import (
	"errors"
	"fmt"
)

// MaxTenantIDLen is the longest valid tenant id, in bytes.
const MaxTenantIDLen = 128

// ErrInvalidTenantID is wrapped by every error ValidTenantID returns.
var ErrInvalidTenantID = errors.New("invalid tenant id")

// ValidTenantID reports whether id is a valid tenant id: 1 to MaxTenantIDLen
// characters of [A-Za-z0-9._@-], and neither "." nor "..". Such an id is one
// URL path segment and holds no Redis key separator (':') or hash-tag brace.
// The error wraps ErrInvalidTenantID and never echoes id itself (it may be
// untrusted input of any size).
func ValidTenantID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty", ErrInvalidTenantID)
	case len(id) > MaxTenantIDLen:
		return fmt.Errorf("%w: %d bytes, at most %d allowed", ErrInvalidTenantID, len(id), MaxTenantIDLen)
	case id == "." || id == "..":
		return fmt.Errorf("%w: %q is reserved", ErrInvalidTenantID, id)
	}
	for i := 0; i < len(id); i++ {
		if !tenantByte(id[i]) {
			return fmt.Errorf("%w: byte %d is not one of [A-Za-z0-9._@-]", ErrInvalidTenantID, i)
		}
	}
	return nil
}

func tenantByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c == '.' || c == '_' || c == '@' || c == '-'
}

// ValidTenantPrefix reports whether p can begin a tenant id: empty, or up to
// MaxTenantIDLen characters of [A-Za-z0-9._@-]. The error wraps
// ErrInvalidTenantID and never echoes p.
func ValidTenantPrefix(p string) error {
	if len(p) > MaxTenantIDLen {
		return fmt.Errorf("%w: prefix of %d bytes, at most %d allowed", ErrInvalidTenantID, len(p), MaxTenantIDLen)
	}
	for i := 0; i < len(p); i++ {
		if !tenantByte(p[i]) {
			return fmt.Errorf("%w: prefix byte %d is not one of [A-Za-z0-9._@-]", ErrInvalidTenantID, i)
		}
	}
	return nil
}
