package wire

import (
	"errors"
	"fmt"
)

// CheckName is the rule of the names Sluice puts in URL paths and Redis
// keys — tenant ids (policy.ValidTenantID) and upstream names
// (upstream.ValidName): 1 … maxLen bytes of [A-Za-z0-9._@-], neither "."
// nor "..". Such a name is one URL path segment and holds no Redis key
// separator (':') or hash-tag brace. The error says what is wrong ("empty",
// "byte 3 is not one of …") without echoing name (it may be untrusted input
// of any size); the callers wrap it with their own sentinel.
func CheckName(name string, maxLen int) error {
	switch {
	case name == "":
		return errors.New("empty")
	case len(name) > maxLen:
		return fmt.Errorf("%d bytes, at most %d allowed", len(name), maxLen)
	case name == "." || name == "..":
		return fmt.Errorf("%q is reserved", name)
	}
	return CheckNameBytes(name, "")
}

// CheckNameBytes reports the first byte of s outside [A-Za-z0-9._@-] (what
// names the byte in the error: "" or "prefix "), or nil.
func CheckNameBytes(s, what string) error {
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) {
			return fmt.Errorf("%sbyte %d is not one of [A-Za-z0-9._@-]", what, i)
		}
	}
	return nil
}

func nameByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c == '.' || c == '_' || c == '@' || c == '-'
}
