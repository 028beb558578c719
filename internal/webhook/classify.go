package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// MinPause is the pause returned for a Retry-After (or a quota reset) that
// is zero or already past. Retry-After has whole-second resolution, and a
// zero pause means "absent, use the configured default" (docs/design.md §7
// throttle.default_pause), so "retry now" becomes one second.
const MinPause = time.Second

// maxHeaderSeconds bounds any delay read from a header (about 31 years);
// the worker caps pauses at throttle.max_pause long before that.
const maxHeaderSeconds = 1e9

// Reasons Classify returns besides "http_<status>".
const (
	ReasonEgressDenied   = "egress_denied"
	ReasonInvalidJob     = "invalid_job"
	ReasonTimeout        = wire.ReasonTimeout // Outcome sets TimedOut with it
	ReasonCanceled       = "canceled"
	ReasonTLS            = "tls_error"
	ReasonDNS            = "dns_error"
	ReasonConnection     = "connection_error"
	ReasonQuotaExhausted = "quota_exhausted"
)

// Classify judges one attempt (docs/design.md §4.2) from its response status (0
// when none arrived), response header and error, at now (used to turn
// HTTP-dates and epoch resets into deltas). It returns the finish kind, a
// pause and a short reason for people ("http_503", "timeout", …; "" for a
// plain success). When status is non-zero err is ignored.
//
//   - 2xx: FinishSuccess. The pause is QuotaPause(header, now): a success
//     with a non-zero pause means "the upstream's quota is spent: pause the
//     tenant pre-emptively for this long" (reason quota_exhausted).
//   - 3xx: FinishPermanent (redirects are never followed).
//   - 429: FinishThrottled, pause from Retry-After (delay-seconds or
//     HTTP-date, at least MinPause), else from the rate-limit headers' reset,
//     else 0 meaning "the configured default".
//   - 503 with a valid Retry-After: FinishThrottled as for 429; without one:
//     FinishRetry.
//   - 408, 425, other 5xx: FinishRetry.
//   - 410: FinishGone (the job is dead; a webhook job's tenant is disabled).
//   - other 4xx, 1xx and anything else: FinishPermanent.
//   - no response: an *EgressError is FinishPermanent with reason
//     egress_denied, ErrInvalidJob FinishPermanent invalid_job; timeouts
//     (context deadline, net timeouts), cancellation, TLS, DNS and
//     connection errors are FinishRetry.
func Classify(status int, header http.Header, err error, now time.Time) (kind wire.FinishKind, pause time.Duration, reason string) {
	if status == 0 {
		return classifyErr(err)
	}
	if status >= 200 && status <= 299 {
		if p := QuotaPause(header, now); p > 0 {
			return wire.FinishSuccess, p, ReasonQuotaExhausted
		}
		return wire.FinishSuccess, 0, ""
	}
	code := "http_" + strconv.Itoa(status) // the reason of every other status
	switch {
	case status >= 300 && status <= 399:
		return wire.FinishPermanent, 0, code
	case status == http.StatusTooManyRequests:
		if d, ok := ParseRetryAfter(header.Get("Retry-After"), now); ok {
			return wire.FinishThrottled, d, code
		}
		return wire.FinishThrottled, quotaReset(header, now, false), code
	case status == http.StatusServiceUnavailable:
		if d, ok := ParseRetryAfter(header.Get("Retry-After"), now); ok {
			return wire.FinishThrottled, d, code
		}
		return wire.FinishRetry, 0, code
	case status == http.StatusRequestTimeout, status == http.StatusTooEarly, status >= 500 && status <= 599:
		return wire.FinishRetry, 0, code
	case status == http.StatusGone:
		return wire.FinishGone, 0, code
	}
	return wire.FinishPermanent, 0, code
}

func classifyErr(err error) (wire.FinishKind, time.Duration, string) {
	var (
		netErr   net.Error
		dnsErr   *net.DNSError
		verifErr *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostErr  x509.HostnameError
		invalid  x509.CertificateInvalidError
		recErr   tls.RecordHeaderError
		alert    tls.AlertError
	)
	switch {
	case errors.Is(err, ErrEgressDenied):
		return wire.FinishPermanent, 0, ReasonEgressDenied
	case errors.Is(err, ErrInvalidJob):
		return wire.FinishPermanent, 0, ReasonInvalidJob
	case errors.Is(err, context.Canceled):
		return wire.FinishRetry, 0, ReasonCanceled
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return wire.FinishRetry, 0, ReasonTimeout
	case errors.As(err, &verifErr), errors.As(err, &unknown), errors.As(err, &hostErr),
		errors.As(err, &invalid), errors.As(err, &recErr), errors.As(err, &alert):
		return wire.FinishRetry, 0, ReasonTLS
	case errors.As(err, &dnsErr):
		return wire.FinishRetry, 0, ReasonDNS
	}
	return wire.FinishRetry, 0, ReasonConnection
}

// ParseRetryAfter reads a Retry-After value (RFC 9110 §10.2.3) at now:
// delay-seconds (digits only) or an HTTP-date in any of the three formats
// http.ParseTime accepts. ok is false for an empty or malformed value. A
// zero delay or a date not after now gives MinPause; delays longer than
// about 31 years are clamped.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if strings.Trim(v, "0123456789") == "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return 0, false
		}
		return clampPause(float64(min(n, maxHeaderSeconds))), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return clampPause(t.Sub(now).Seconds()), true
}

// clampPause turns seconds into a pause of at least MinPause and at most
// maxHeaderSeconds.
func clampPause(sec float64) time.Duration {
	sec = min(sec, maxHeaderSeconds)
	return max(time.Duration(sec*float64(time.Second)), MinPause)
}
