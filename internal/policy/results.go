package policy

import (
	"fmt"
	"net/textproto"
	"strings"
)

// Results of http jobs (GET /v1/jobs/{id} "result"): how much of the last
// attempt's response a job keeps.
const (
	// MaxResultBytesDefault is max_result_bytes's default: 64 KiB of the
	// response body.
	MaxResultBytesDefault = 64 * KiB
	// MaxResultBytesLimit bounds max_result_bytes (1 MiB).
	MaxResultBytesLimit = MiB
	// MaxResultHeaders bounds result_headers' length.
	MaxResultHeaders = 32
)

// ResultHeadersDefault is result_headers' default: Content-Type and the
// rate-limit headers (IETF RateLimit and RateLimit-Policy, every
// X-RateLimit-*, Retry-After). An entry ending in "*" matches every header
// name with that prefix; matching ignores case.
func ResultHeadersDefault() []string {
	return []string{"Content-Type", "RateLimit", "RateLimit-Policy", "X-RateLimit-*", "Retry-After"}
}

// ResultHeaderAllowed reports whether the response header name is kept by
// the allow-list allow (result_headers): equal ignoring case, or, for an
// entry "Prefix*", starting with Prefix ignoring case.
func ResultHeaderAllowed(allow []string, name string) bool {
	for _, a := range allow {
		if p, ok := strings.CutSuffix(a, "*"); ok {
			if len(name) >= len(p) && strings.EqualFold(name[:len(p)], p) {
				return true
			}
		} else if strings.EqualFold(a, name) {
			return true
		}
	}
	return false
}

// resultHeaders checks result_headers: at most MaxResultHeaders
// entries, each a header name token, optionally ending in "*".
func (c *checker) resultHeaders(h []string) {
	if len(h) > MaxResultHeaders {
		c.add("result_headers", "at most %d names, got %d", MaxResultHeaders, len(h))
	}
	for i, name := range h {
		base := strings.TrimSuffix(name, "*")
		if base == "" || strings.ContainsAny(base, "*") || !validToken(base) {
			c.errs = append(c.errs, &FieldError{Field: fmt.Sprintf("result_headers[%d]", i),
				Err: fmt.Errorf("%q is not a header name (optionally ending in *)", name)})
		}
	}
}

// validToken reports whether s is an HTTP token (RFC 9110 §5.6.2).
func validToken(s string) bool {
	return s != "" && textproto.TrimString(s) == s && !strings.ContainsFunc(s, func(r rune) bool {
		return r <= ' ' || r >= 0x7f || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", r)
	})
}
