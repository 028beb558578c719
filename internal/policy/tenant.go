package policy

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/internal/wire"
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
	if err := wire.CheckName(id, MaxTenantIDLen); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidTenantID, err)
	}
	return nil
}

// ValidTenantPrefix reports whether p can begin a tenant id: empty, or up to
// MaxTenantIDLen characters of [A-Za-z0-9._@-]. The error wraps
// ErrInvalidTenantID and never echoes p.
func ValidTenantPrefix(p string) error {
	if len(p) > MaxTenantIDLen {
		return fmt.Errorf("%w: prefix of %d bytes, at most %d allowed", ErrInvalidTenantID, len(p), MaxTenantIDLen)
	}
	if err := wire.CheckNameBytes(p, "prefix "); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidTenantID, err)
	}
	return nil
}
