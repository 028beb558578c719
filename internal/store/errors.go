package store

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// Sentinel errors; test with errors.Is. Every error this package returns for
// one of these conditions wraps the sentinel, with context in the message.
var (
	// ErrNotFound: no such job (or its record has expired).
	ErrNotFound = errors.New("not found")
	// ErrConflict: the job's state does not allow the operation (e.g. cancel
	// after the claim). Returned as a *ConflictError.
	ErrConflict = errors.New("conflict")
	// ErrVersionMismatch: a policy or upstream write's If-Match version is
	// not current.
	// Returned as a *VersionMismatchError.
	ErrVersionMismatch = errors.New("policy version mismatch")
	// ErrInvalid: an argument is out of range or malformed (HTTP 422/400).
	ErrInvalid = errors.New("invalid")
	// ErrProtocol: a script reply did not have the expected shape. It means a
	// bug or a version skew between this binary and the data, never bad input.
	// It is redisscript.ErrUnexpectedReply, the script runner's.
	ErrProtocol = redisscript.ErrUnexpectedReply
)

// ConflictError reports the state that made an operation impossible.
type ConflictError struct {
	ID    string
	State State
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("job %s is %s", e.ID, e.State)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// VersionMismatchError reports the current version of what a stale
// If-Match named: a tenant's overrides (Tenant set; 0 when it has none) or
// an upstream (Upstream set; 0 when it does not exist).
type VersionMismatchError struct {
	Tenant   string
	Upstream string
	Want     int64
	Current  int64
}

func (e *VersionMismatchError) Error() string {
	if e.Upstream != "" {
		return fmt.Sprintf("upstream %q is at version %d, not %d", e.Upstream, e.Current, e.Want)
	}
	return fmt.Sprintf("policy of tenant %q is at version %d, not %d", e.Tenant, e.Current, e.Want)
}

// Is makes errors.Is(err, ErrVersionMismatch) true.
func (e *VersionMismatchError) Is(target error) bool { return target == ErrVersionMismatch }

// invalidf returns an error wrapping ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
