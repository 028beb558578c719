package redisscript

import "errors"

// The refusals every Sluice script may answer instead of StatusOK (the
// first element of its reply; Reply.Status), and the sentinels a Refusal of
// each is (errors.Is). The store and the upstream and worker registries
// export these same values as their own sentinels, so a caller tests one
// error whichever package answered.
const (
	StatusNotFound        = "not_found"
	StatusConflict        = "conflict"
	StatusVersionMismatch = "version_mismatch"
	StatusInvalid         = "invalid"
)

var (
	// ErrNotFound: what the call names does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the state of what the call names does not allow it.
	ErrConflict = errors.New("conflict")
	// ErrVersionMismatch: a write's If-Match version is not current.
	ErrVersionMismatch = errors.New("policy version mismatch")
	// ErrInvalid: an argument is out of range or malformed.
	ErrInvalid = errors.New("invalid")
)

// Refusal is a script's refusal: a reply whose status is not StatusOK
// ({'not_found'}, {'conflict', state}, …). Pass Refused to Reply.Status.
type Refusal struct {
	Script string
	Status string
}

// Refused is the Refusal of script with status, as an error.
func Refused(script, status string) error { return &Refusal{Script: script, Status: status} }

func (e *Refusal) Error() string { return "script " + e.Script + ": " + e.Status }

// Is maps the status to its sentinel; an unknown status is
// ErrUnexpectedReply.
func (e *Refusal) Is(target error) bool {
	switch e.Status {
	case StatusNotFound:
		return target == ErrNotFound
	case StatusConflict:
		return target == ErrConflict
	case StatusVersionMismatch:
		return target == ErrVersionMismatch
	case StatusInvalid:
		return target == ErrInvalid
	}
	return target == ErrUnexpectedReply
}

// RefusalStatus is the status of the Refusal in err's tree; "" when none.
func RefusalStatus(err error) string {
	if r, ok := errors.AsType[*Refusal](err); ok {
		return r.Status
	}
	return ""
}
