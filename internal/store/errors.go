package store

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// Sentinel errors; test with errors.Is. Every error this package returns for
// one of these conditions wraps the sentinel, with context in the message.
// They are the script runner's (redisscript), which internal/quota and
// internal/fleet export too: one error whichever package answered.
var (
	// ErrNotFound: no such job (or its record has expired).
	ErrNotFound = redisscript.ErrNotFound
	// ErrConflict: the job's state does not allow the operation (e.g. cancel
	// after the claim). Returned as a *ConflictError.
	ErrConflict = redisscript.ErrConflict
	// ErrVersionMismatch: a policy or upstream write's If-Match version is
	// not current.
	// Returned as a *VersionMismatchError (quota.VersionMismatchError for
	// an upstream's).
	ErrVersionMismatch = redisscript.ErrVersionMismatch
	// ErrInvalid: an argument is out of range or malformed (HTTP 422/400).
	ErrInvalid = redisscript.ErrInvalid
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

// VersionMismatchError reports the current version of a tenant's
// overrides a stale If-Match named (0 when it has none).
type VersionMismatchError struct {
	Tenant  string
	Want    int64
	Current int64
}

func (e *VersionMismatchError) Error() string {
	return fmt.Sprintf("policy of tenant %q is at version %d, not %d", e.Tenant, e.Current, e.Want)
}

// Is makes errors.Is(err, ErrVersionMismatch) true.
func (e *VersionMismatchError) Is(target error) bool { return target == ErrVersionMismatch }

// invalidf returns an error wrapping ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
