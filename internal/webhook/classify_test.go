package webhook

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// now is a fixed, present-day instant for header arithmetic.
var now = time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestClassifyStatus(t *testing.T) {
	future := now.Add(90 * time.Second).Format(http.TimeFormat)
	for _, tc := range []struct {
		status int
		header http.Header
		kind   wire.FinishKind
		pause  time.Duration
		reason string
	}{
		{200, nil, wire.FinishSuccess, 0, ""},
		{201, nil, wire.FinishSuccess, 0, ""},
		{204, nil, wire.FinishSuccess, 0, ""},
		{299, nil, wire.FinishSuccess, 0, ""},
		{200, hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "20"), wire.FinishSuccess, 20 * time.Second, ReasonQuotaExhausted},
		{200, hdr("RateLimit", `"default";r=0;t=12`), wire.FinishSuccess, 12 * time.Second, ReasonQuotaExhausted},
		{200, hdr("RateLimit", `"default";r=3;t=12`), wire.FinishSuccess, 0, ""},
		{200, hdr("Retry-After", "30"), wire.FinishSuccess, 0, ""}, // Retry-After means nothing on a 2xx
		{301, nil, wire.FinishPermanent, 0, "http_301"},
		{302, hdr("Location", "http://127.0.0.1/"), wire.FinishPermanent, 0, "http_302"},
		{304, nil, wire.FinishPermanent, 0, "http_304"},
		{307, nil, wire.FinishPermanent, 0, "http_307"},
		{308, nil, wire.FinishPermanent, 0, "http_308"},
		{400, nil, wire.FinishPermanent, 0, "http_400"},
		{401, nil, wire.FinishPermanent, 0, "http_401"},
		{403, nil, wire.FinishPermanent, 0, "http_403"},
		{404, nil, wire.FinishPermanent, 0, "http_404"},
		{405, nil, wire.FinishPermanent, 0, "http_405"},
		{409, nil, wire.FinishPermanent, 0, "http_409"},
		{413, nil, wire.FinishPermanent, 0, "http_413"},
		{422, nil, wire.FinishPermanent, 0, "http_422"},
		{408, nil, wire.FinishRetry, 0, "http_408"},
		{425, nil, wire.FinishRetry, 0, "http_425"},
		{410, nil, wire.FinishGone, 0, "http_410"},
		{429, nil, wire.FinishThrottled, 0, "http_429"},
		{429, hdr("Retry-After", "120"), wire.FinishThrottled, 2 * time.Minute, "http_429"},
		{429, hdr("Retry-After", future), wire.FinishThrottled, 90 * time.Second, "http_429"},
		{429, hdr("Retry-After", "0"), wire.FinishThrottled, MinPause, "http_429"},
		{429, hdr("Retry-After", "soon"), wire.FinishThrottled, 0, "http_429"},
		{429, hdr("RateLimit", `"api";r=0;t=45`), wire.FinishThrottled, 45 * time.Second, "http_429"},
		{429, hdr("X-RateLimit-Reset", "30"), wire.FinishThrottled, 30 * time.Second, "http_429"},
		{429, hdr("Retry-After", "5", "RateLimit", `"api";r=0;t=45`), wire.FinishThrottled, 5 * time.Second, "http_429"}, // Retry-After wins
		{500, nil, wire.FinishRetry, 0, "http_500"},
		{502, nil, wire.FinishRetry, 0, "http_502"},
		{503, nil, wire.FinishRetry, 0, "http_503"},
		{503, hdr("Retry-After", "garbage"), wire.FinishRetry, 0, "http_503"},
		{503, hdr("Retry-After", "60"), wire.FinishThrottled, time.Minute, "http_503"},
		{503, hdr("Retry-After", future), wire.FinishThrottled, 90 * time.Second, "http_503"},
		{504, nil, wire.FinishRetry, 0, "http_504"},
		{599, nil, wire.FinishRetry, 0, "http_599"},
		{101, nil, wire.FinishPermanent, 0, "http_101"},
		{600, nil, wire.FinishPermanent, 0, "http_600"},
	} {
		kind, pause, reason := Classify(tc.status, tc.header, errors.New("ignored when a status arrived"), now)
		if kind != tc.kind || pause != tc.pause || reason != tc.reason {
			t.Errorf("Classify(%d, %v) = %v %v %q, want %v %v %q", tc.status, tc.header, kind, pause, reason, tc.kind, tc.pause, tc.reason)
		}
	}
}

// timeoutErr is a net.Error that timed out.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassifyError(t *testing.T) {
	wrapURL := func(err error) error { return &url.Error{Op: "Post", URL: "https://x.example", Err: err} }
	for _, tc := range []struct {
		name   string
		err    error
		kind   wire.FinishKind
		reason string
	}{
		{"egress denied", wrapURL(&net.OpError{Op: "dial", Err: &EgressError{Host: "10.0.0.1", Reason: "private"}}), wire.FinishPermanent, ReasonEgressDenied},
		{"invalid job", fmt.Errorf("job j1: %w", ErrInvalidJob), wire.FinishPermanent, ReasonInvalidJob},
		{"context deadline", wrapURL(context.DeadlineExceeded), wire.FinishRetry, ReasonTimeout},
		{"net timeout", wrapURL(&net.OpError{Op: "read", Err: timeoutErr{}}), wire.FinishRetry, ReasonTimeout},
		{"os deadline", wrapURL(os.ErrDeadlineExceeded), wire.FinishRetry, ReasonTimeout},
		{"canceled", wrapURL(context.Canceled), wire.FinishRetry, ReasonCanceled},
		{"unknown CA", wrapURL(x509.UnknownAuthorityError{}), wire.FinishRetry, ReasonTLS},
		{"hostname", wrapURL(x509.HostnameError{Host: "x"}), wire.FinishRetry, ReasonTLS},
		{"dns", wrapURL(&net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", IsNotFound: true}}), wire.FinishRetry, ReasonDNS},
		{"refused", wrapURL(&net.OpError{Op: "dial", Err: errors.New("connect: connection refused")}), wire.FinishRetry, ReasonConnection},
		{"reset", wrapURL(errors.New("read: connection reset by peer")), wire.FinishRetry, ReasonConnection},
		{"nil", nil, wire.FinishRetry, ReasonConnection},
	} {
		kind, pause, reason := Classify(0, nil, tc.err, now)
		if kind != tc.kind || pause != 0 || reason != tc.reason {
			t.Errorf("%s: Classify = %v %v %q, want %v 0 %q", tc.name, kind, pause, reason, tc.kind, tc.reason)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		v  string
		d  time.Duration
		ok bool
	}{
		{"120", 2 * time.Minute, true},
		{" 5 ", 5 * time.Second, true},
		{"0", MinPause, true},
		{"99999999999999999999999", 1e9 * time.Second, true}, // clamped
		{now.Add(time.Hour).Format(http.TimeFormat), time.Hour, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), MinPause, true}, // past: retry now
		{now.Format(http.TimeFormat), MinPause, true},
		{now.Add(10 * time.Minute).Format(time.RFC850), 10 * time.Minute, true},
		{now.Add(10 * time.Minute).Format(time.ANSIC), 10 * time.Minute, true},
		{"", 0, false},
		{"-5", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"soon", 0, false},
		{"Fri, 31 Feb 2026 25:00:00 GMT", 0, false},
		{now.Add(time.Hour).Format(time.RFC3339), 0, false},
	} {
		d, ok := ParseRetryAfter(tc.v, now)
		if d != tc.d || ok != tc.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tc.v, d, ok, tc.d, tc.ok)
		}
	}
}

func TestQuotaPause(t *testing.T) {
	epochIn := func(d time.Duration) string { return fmt.Sprint(now.Add(d).Unix()) }
	for _, tc := range []struct {
		name   string
		header http.Header
		want   time.Duration
	}{
		{"none", nil, 0},
		{"draft-10 spent", hdr("RateLimit", `"default";r=0;t=30`), 30 * time.Second},
		{"draft-10 left", hdr("RateLimit", `"default";r=1;t=30`), 0},
		{"draft-10 two quotas, longest spent wins", hdr("RateLimit", `"burst";r=0;t=2, "day";r=0;t=3600`), time.Hour},
		{"draft-10 one of two spent", hdr("RateLimit", `"burst";r=5;t=2, "day";r=0;t=600`), 10 * time.Minute},
		{"draft-10 with partition key", hdr("RateLimit", `"p";r=0;t=9;pk=:cHJvamVjdDEyMw==:`), 9 * time.Second},
		{"draft-10 spent, no t", hdr("RateLimit", `"default";r=0`), 0},
		{"draft-07 dictionary", hdr("RateLimit", "limit=100, remaining=0, reset=50"), 50 * time.Second},
		{"draft-07 dictionary left", hdr("RateLimit", "limit=100, remaining=4, reset=50"), 0},
		{"malformed RateLimit", hdr("RateLimit", `"x";r=0;t=`), 0},
		{"RateLimit-Remaining/Reset", hdr("RateLimit-Remaining", "0", "RateLimit-Reset", "40"), 40 * time.Second},
		{"X- delta seconds", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "15"), 15 * time.Second},
		{"X- fractional delta", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1.5"), 1500 * time.Millisecond},
		{"X- epoch seconds (GitHub)", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epochIn(42*time.Second)), 42 * time.Second},
		{"X- epoch seconds just past", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epochIn(-3*time.Second)), 0},
		{"X- epoch milliseconds", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", fmt.Sprint(now.Add(8*time.Second).UnixMilli())), 8 * time.Second},
		{"X- Reset-After wins over Reset", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset-After", "2.5", "X-RateLimit-Reset", epochIn(time.Hour)), 2500 * time.Millisecond},
		{"X- remaining left", hdr("X-RateLimit-Remaining", "12", "X-RateLimit-Reset", "15"), 0},
		{"X- remaining missing", hdr("X-RateLimit-Reset", "15"), 0},
		{"X- remaining spent, no reset", hdr("X-RateLimit-Remaining", "0"), 0},
		{"X- garbage", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "tomorrow"), 0},
		{"X- negative reset", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "-4"), 0},
		{"lower-case names", http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"7"}}, 7 * time.Second},
		{"other fields only", hdr("Content-Type", "application/json", "Retry-After", "30", "X-Request-Id", "r1"), 0},
		{"among other fields", hdr("Content-Type", "application/json", "Date", "Wed, 02 Dec 2026 11:00:00 GMT",
			"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "5"), 5 * time.Second},
	} {
		if got := QuotaPause(tc.header, now); got != tc.want {
			t.Errorf("%s: QuotaPause(%v) = %v, want %v", tc.name, tc.header, got, tc.want)
		}
	}
}
