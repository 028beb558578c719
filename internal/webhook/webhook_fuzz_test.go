package webhook

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/wire"
)

// fuzzNow is the fuzz targets' clock: a present-day instant.
var fuzzNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// maxPause is the longest pause any header may give.
const maxPause = time.Duration(maxHeaderSeconds) * time.Second

// FuzzRetryAfter asserts that a Retry-After ParseRetryAfter reads gives a
// pause from MinPause to maxPause, and that Classify throttles a 429 or a
// 503 with exactly that pause when it reads (503 without one: a retry).
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "30", " 120 ", "1.5", "-1", "99999999999999999999999", "18446744073709551616",
		"Sun, 29 Nov 2026 12:00:30 GMT", "Sunday, 29-Nov-26 12:00:30 GMT", "Sun Nov 29 12:00:30 2026",
		"Thu, 01 Jan 1970 00:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT", "", "soon", "1e3", "+5", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := ParseRetryAfter(v, fuzzNow)
		if ok && (d < MinPause || d > maxPause) {
			t.Fatalf("ParseRetryAfter(%q) = %s, outside %s…%s", v, d, MinPause, maxPause)
		}
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q) = %s, false", v, d)
		}
		h := http.Header{"Retry-After": {v}}
		for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
			kind, pause, reason := Classify(status, h, nil, fuzzNow)
			switch {
			case reason != "http_"+strconv.Itoa(status):
				t.Fatalf("Classify(%d) reason %q", status, reason)
			case ok && (kind != wire.FinishThrottled || pause != d):
				t.Fatalf("Classify(%d, Retry-After %q) = %v, %s; want throttled, %s", status, v, kind, pause, d)
			case !ok && status == http.StatusServiceUnavailable && (kind != wire.FinishRetry || pause != 0):
				t.Fatalf("Classify(503, Retry-After %q) = %v, %s; want a retry", v, kind, pause)
			case !ok && status == http.StatusTooManyRequests && (kind != wire.FinishThrottled || pause < 0 || pause > maxPause):
				t.Fatalf("Classify(429, Retry-After %q) = %v, %s", v, kind, pause)
			}
		}
	})
}

// FuzzQuotaPause asserts, for any rate-limit headers: QuotaPause is from 0
// to maxPause; Classify of a 2xx pauses by exactly it (reason
// quota_exhausted) or not at all; and Classify of a 429 without
// Retry-After pauses at least as long (it counts an absent remaining as
// spent) and never beyond maxPause.
func FuzzQuotaPause(f *testing.F) {
	type seed struct{ rl, rem, reset, after, xrem, xreset string }
	for _, s := range []seed{
		{rl: `"api";r=0;t=30`}, {rl: `"a";r=5;t=1, "b";r=0;t=60`}, {rl: `limit=100, remaining=0, reset=30`},
		{rl: `"x";r=0;t=1.5`}, {rl: `"x";t=10`}, {rl: `"x";r=0;t=999999999999999`}, {rl: `(bad`},
		{rem: "0", reset: "30"}, {rem: "0, 5", reset: "30, 60"}, {rem: "-1", after: "2.5"},
		{xrem: "0", xreset: "1764417630"}, {xrem: "0", xreset: "1764417630123"}, {xrem: "0", xreset: "9e15"},
		{xrem: "0", xreset: "1e300"}, {xrem: "0", xreset: "NaN"}, {xrem: "0", xreset: "-Inf"}, {xrem: "0", xreset: "0x1p40"},
		{xrem: "NaN", xreset: "30"}, {rem: "0", reset: "1e400"},
	} {
		f.Add(s.rl, s.rem, s.reset, s.after, s.xrem, s.xreset)
	}
	f.Fuzz(func(t *testing.T, rl, rem, reset, after, xrem, xreset string) {
		h := http.Header{}
		for name, v := range map[string]string{"RateLimit": rl, "RateLimit-Remaining": rem, "RateLimit-Reset": reset,
			"X-RateLimit-Reset-After": after, "X-RateLimit-Remaining": xrem, "X-RateLimit-Reset": xreset} {
			if v != "" {
				h.Set(name, v)
			}
		}
		p := QuotaPause(h, fuzzNow)
		if p < 0 || p > maxPause {
			t.Fatalf("QuotaPause(%v) = %s, outside 0…%s", h, p, maxPause)
		}
		kind, pause, reason := Classify(http.StatusOK, h, nil, fuzzNow)
		if kind != wire.FinishSuccess || pause != p || (p > 0) != (reason == ReasonQuotaExhausted) || (p == 0 && reason != "") {
			t.Fatalf("Classify(200, %v) = %v, %s, %q; QuotaPause %s", h, kind, pause, reason, p)
		}
		kind, pause, _ = Classify(http.StatusTooManyRequests, h, nil, fuzzNow)
		if kind != wire.FinishThrottled || pause < p || pause > maxPause {
			t.Fatalf("Classify(429, %v) = %v, %s; QuotaPause %s", h, kind, pause, p)
		}
	})
}

// TestQuotaPauseEpochResetIsClamped is FuzzQuotaPause's finding: an
// X-RateLimit-Reset read as epoch milliseconds or seconds far in the future
// gave a pause of up to 292 years, past the 10⁹ s every other header
// delay is clamped to.
func TestQuotaPauseEpochResetIsClamped(t *testing.T) {
	for _, reset := range []string{"9e15", "1e17", "999999999999"} {
		h := http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {reset}}
		if got := QuotaPause(h, fuzzNow); got <= 0 || got > maxPause {
			t.Errorf("QuotaPause(X-RateLimit-Reset %s) = %s, want in (0, %s]", reset, got, maxPause)
		}
	}
}

// FuzzSignVerify asserts that a signature Sluice makes verifies with the
// official Standard Webhooks library for any id, timestamp, body and
// secret (of the 24 to 64 bytes policy accepts), for each secret of a
// rotation; that the official Sign makes the same entry; and that a
// changed body, id or timestamp does not verify.
func FuzzSignVerify(f *testing.F) {
	key, _ := policy.ParseWebhookSecret(vectorSecret)
	f.Add(vectorID, int64(vectorTS), []byte(vectorBody), key, []byte(strings.Repeat("k", 64)))
	f.Add("j1_01J", int64(0), []byte{}, []byte(strings.Repeat("\x00", 24)), []byte{})
	f.Add("id with spaces, commas and . dots\n", int64(-62135596800), []byte("\xff\x00"), key, key)
	f.Add("é", int64(1<<40), []byte(`{"type":"x","data":null}`), []byte(strings.Repeat("\xff", 40)), []byte("short"))
	f.Fuzz(func(t *testing.T, id string, unix int64, body, key1, key2 []byte) {
		if id == "" || len(key1) < policy.MinSecretBytes || len(key1) > policy.MaxSecretBytes {
			return // job ids are never empty; policy refuses other key sizes
		}
		secrets := [][]byte{key1}
		if len(key2) >= policy.MinSecretBytes && len(key2) <= policy.MaxSecretBytes {
			secrets = append(secrets, key2)
		}
		ts := time.Unix(unix, 0)
		h := http.Header{}
		Headers(h, secrets, id, ts, body)
		sig := h.Get(HeaderSignature)
		if entries := strings.Split(sig, " "); len(entries) != len(secrets) {
			t.Fatalf("signature %q has %d entries for %d secrets", sig, len(entries), len(secrets))
		}
		for i, k := range secrets {
			secret := policy.SecretPrefix + base64.StdEncoding.EncodeToString(k)
			if got, err := policy.ParseWebhookSecret(secret); err != nil || string(got) != string(k) {
				t.Fatalf("secret %d does not round-trip through whsec_ text: %v", i, err)
			}
			wh, err := standardwebhooks.NewWebhook(secret)
			if err != nil {
				t.Fatal(err)
			}
			if err := wh.VerifyIgnoringTimestamp(body, h); err != nil {
				t.Fatalf("official verifier refused secret %d of id %q ts %d: %v", i, id, unix, err)
			}
			official, _ := wh.Sign(id, ts, body)
			if strings.Split(sig, " ")[i] != official {
				t.Fatalf("entry %d %q, official Sign %q", i, strings.Split(sig, " ")[i], official)
			}
			for what, hb := range map[string]struct {
				h    http.Header
				body []byte
			}{
				"body": {h, append(append([]byte{}, body...), 'x')},
				"id":   {withHeader(h, HeaderID, id+"x"), body},
				"ts":   {withHeader(h, HeaderTimestamp, strconv.FormatInt(unix+1, 10)), body},
			} {
				if wh.VerifyIgnoringTimestamp(hb.body, hb.h) == nil {
					t.Fatalf("official verifier accepted a changed %s", what)
				}
			}
		}
		now := time.Now()
		Headers(h, secrets, id, now, body)
		wh, _ := standardwebhooks.NewWebhookRaw(key1)
		if err := wh.Verify(body, h); err != nil {
			t.Fatalf("official Verify (wall clock) refused a delivery signed now: %v", err)
		}
	})
}

// withHeader returns a copy of h with name set to v.
func withHeader(h http.Header, name, v string) http.Header {
	c := h.Clone()
	c[http.CanonicalHeaderKey(name)] = []string{v}
	return c
}

// FuzzEgressReencoding asserts that an address CheckAddr refuses is refused
// in every spelling a URL may give it — the canonical form, IPv4-mapped
// IPv6, the expanded or upper-case IPv6 form, a zone, NAT64 and 6to4
// embeddings, and the numeric forms libc and browsers read as IPv4
// (decimal, hex and octal integers and parts, short forms, a trailing dot)
// — and that an address it allows stays allowed in its plain forms.
func FuzzEgressReencoding(f *testing.F) {
	for _, a := range []string{"127.0.0.1", "10.1.2.3", "169.254.169.254", "100.100.100.200", "0.0.0.0", "8.8.8.8",
		"::1", "fd00:ec2::254", "64:ff9b::a00:1", "2002:7f00:1::", "2001:db8::1", "2606:4700::1111", "::ffff:127.0.0.1"} {
		b := netip.MustParseAddr(a).As16()
		f.Add(b[:], netip.MustParseAddr(a).Is4())
	}
	f.Fuzz(func(t *testing.T, raw []byte, v4 bool) {
		if len(raw) < 16 {
			return
		}
		a := netip.AddrFrom16([16]byte(raw[:16]))
		if v4 {
			a = netip.AddrFrom4([4]byte(raw[12:16]))
		}
		refused := CheckAddr(a, nil)
		if refused != nil && !errors.Is(refused, ErrEgressDenied) {
			t.Fatalf("CheckAddr(%s) = %v, not ErrEgressDenied", a, refused)
		}
		for _, host := range spellings(a) {
			u := "http://" + host + ":8080/x"
			err := CheckLiteral(u, nil)
			if refused != nil && err == nil {
				t.Fatalf("CheckAddr refuses %s (%v), but CheckLiteral accepts %q", a, refused, u)
			}
			if refused == nil && err != nil && isPlainSpelling(a, host) {
				t.Fatalf("CheckAddr allows %s, but CheckLiteral refuses %q: %v", a, u, err)
			}
		}
	})
}

// isPlainSpelling reports whether host is a's canonical literal (what an
// allowed address must stay allowed as).
func isPlainSpelling(a netip.Addr, host string) bool {
	if a.Is4() {
		return host == a.String()
	}
	return host == "["+a.String()+"]"
}

// spellings lists URL hosts that name a (or, for a NAT64 or 6to4 address's
// embedded IPv4 address, the same destination).
func spellings(a netip.Addr) []string {
	out := []string{}
	if a.Is6() {
		out = append(out, "["+a.String()+"]", "["+a.StringExpanded()+"]", "["+strings.ToUpper(a.StringExpanded())+"]",
			"["+a.String()+"%25eth0]")
		if a.Is4In6() {
			out = append(out, v4Spellings(a.Unmap())...)
		}
		return out
	}
	b := a.As4()
	nat64 := netip.AddrFrom16([16]byte{0: 0, 1: 0x64, 2: 0xff, 3: 0x9b, 12: b[0], 13: b[1], 14: b[2], 15: b[3]})
	sixto4 := netip.AddrFrom16([16]byte{0: 0x20, 1: 0x02, 2: b[0], 3: b[1], 4: b[2], 5: b[3], 15: 1})
	out = append(out, v4Spellings(a)...)
	return append(out, "[::ffff:"+a.String()+"]", "["+netip.AddrFrom16(a.As16()).String()+"]",
		"["+nat64.String()+"]", "["+sixto4.String()+"]")
}

// v4Spellings lists the forms an IPv4 address takes for inet_aton, the
// WHATWG URL parser or a resolver.
func v4Spellings(a netip.Addr) []string {
	b := a.As4()
	n := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	return []string{
		a.String(), a.String() + ".",
		strconv.FormatUint(uint64(n), 10), "0x" + strconv.FormatUint(uint64(n), 16), "0" + strconv.FormatUint(uint64(n), 8),
		fmt.Sprintf("0x%x.0x%x.0x%x.0x%x", b[0], b[1], b[2], b[3]), fmt.Sprintf("0%o.0%o.0%o.0%o", b[0], b[1], b[2], b[3]),
		fmt.Sprintf("%d.%d", b[0], n&0xffffff), fmt.Sprintf("%d.%d.%d", b[0], b[1], n&0xffff),
		fmt.Sprintf("%03d.%03d.%03d.%03d", b[0], b[1], b[2], b[3]),
		new(big.Int).Add(big.NewInt(int64(n)), new(big.Int).Lsh(big.NewInt(1), 32)).String(), // wraps in some parsers
		strings.ToUpper("0x" + strconv.FormatUint(uint64(n), 16)),
	}
}

// FuzzCheckLiteral asserts that a URL whose host a browser (WHATWG) or
// inet_aton would read as an IPv4 address passes CheckLiteral only when
// that address passes CheckAddr, and that a bracketed IPv6 literal passes
// only when its address does.
func FuzzCheckLiteral(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1/", "http://2130706433/", "http://0x7f.1/", "http://0177.0.0.1/",
		"http://127.1/", "http://1.2.3.4.5/", "http://example.com/", "http://localhost./", "http://a.localhost/",
		"http://[::ffff:127.0.0.1]/", "http://[::1%25lo]/", "http://8.8.8.8/", "http://0x08.8.8.8/", "http://08.8.8.8/",
		"http://[64:ff9b::7f00:1]/", "http://[2002:a00:1::]/", "http://1.1.1.1./", "http://%31%32%37.0.0.1/", "http://0.0.0.0/",
		"http://[::]/", "http://00000000000000000000000000000000000000127.0.0.1/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		err := CheckLiteral(raw, nil)
		if err != nil {
			return
		}
		host := hostOf(raw)
		if a, ok := whatwgIPv4(strings.TrimSuffix(host, ".")); ok {
			if CheckAddr(a, nil) != nil {
				t.Fatalf("CheckLiteral accepts %q, whose host a browser reads as %s, which CheckAddr refuses", raw, a)
			}
		}
		if a, err := netip.ParseAddr(host); err == nil && CheckAddr(a, nil) != nil {
			t.Fatalf("CheckLiteral accepts %q, whose host is the refused literal %s", raw, a)
		}
		if host == "localhost" || strings.HasSuffix(strings.ToLower(strings.TrimSuffix(host, ".")), ".localhost") ||
			strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
			t.Fatalf("CheckLiteral accepts %q, a localhost name", raw)
		}
	})
}

// hostOf is the host of a URL CheckLiteral accepted, as url.Parse reads it.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// whatwgIPv4 parses host by the WHATWG URL standard's IPv4 parser: 1 to 4
// dot-separated numbers, each decimal, octal (leading 0) or hex (0x), the
// last filling the remaining bytes. ok is false when host is not one.
func whatwgIPv4(host string) (netip.Addr, bool) {
	parts := strings.Split(host, ".")
	if len(parts) > 4 || len(parts) == 0 {
		return netip.Addr{}, false
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		base := 10
		switch {
		case p == "":
			return netip.Addr{}, false
		case len(p) >= 2 && (p[:2] == "0x" || p[:2] == "0X"):
			p, base = p[2:], 16
			if p == "" {
				p = "0"
			}
		case len(p) >= 2 && p[0] == '0':
			p, base = p[1:], 8
		}
		v, err := strconv.ParseUint(p, base, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return netip.Addr{}, false
		}
		if err != nil {
			v = 1 << 40 // out of range: not an address either way
		}
		nums[i] = v
	}
	for _, v := range nums[:len(nums)-1] {
		if v > 255 {
			return netip.Addr{}, false
		}
	}
	last := nums[len(nums)-1]
	if last >= 1<<(8*(5-len(nums))) {
		return netip.Addr{}, false
	}
	var n uint64 = last
	for i, v := range nums[:len(nums)-1] {
		n |= v << (8 * (3 - i))
	}
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}
