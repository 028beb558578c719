package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks header names (lower case, as the specification spells
// them; net/http canonicalises them on the wire, which receivers accept).
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// Sign returns the value of the webhook-signature header for one message:
// one "v1,<base64 HMAC-SHA256>" entry per key in secrets, in order,
// separated by single spaces. The MAC of each entry is computed with that key
// over "<id>.<ts as unix seconds>.<body>". secrets are the decoded key bytes
// (policy.Secrets.Keys), not the "whsec_" strings. With no secrets Sign
// returns "". Sign is a pure function and safe for concurrent use.
func Sign(secrets [][]byte, id string, ts time.Time, body []byte) string {
	if len(secrets) == 0 {
		return ""
	}
	prefix := id + "." + strconv.FormatInt(ts.Unix(), 10) + "."
	var b strings.Builder
	b.Grow(len(secrets) * (3 + base64.StdEncoding.EncodedLen(sha256.Size) + 1))
	for i, key := range secrets {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(prefix))
		mac.Write(body)
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("v1,")
		b.WriteString(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return b.String()
}

// Headers sets the three Standard Webhooks headers on h: webhook-id = id,
// webhook-timestamp = ts in unix seconds, and webhook-signature =
// Sign(secrets, id, ts, body). With no secrets the signature header is
// removed rather than sent empty. Existing values of the three are replaced.
func Headers(h http.Header, secrets [][]byte, id string, ts time.Time, body []byte) {
	v := make([]string, 3) // one allocation for the three values
	v[0], v[1] = id, strconv.FormatInt(ts.Unix(), 10)
	h[canonicalID], h[canonicalTimestamp] = v[0:1:1], v[1:2:2]
	if v[2] = Sign(secrets, id, ts, body); v[2] != "" {
		h[canonicalSignature] = v[2:3:3]
	} else {
		delete(h, canonicalSignature)
	}
}

// The three header names as net/http writes them (http.CanonicalHeaderKey).
var (
	canonicalID        = http.CanonicalHeaderKey(HeaderID)
	canonicalTimestamp = http.CanonicalHeaderKey(HeaderTimestamp)
	canonicalSignature = http.CanonicalHeaderKey(HeaderSignature)
)

// EventBody returns the JSON body of a webhook delivery (docs/design.md §4.1):
// {"type":event,"timestamp":ts,"data":payload}, ts in RFC 3339 in UTC with
// trailing zero fractions trimmed. payload is copied verbatim and must be
// valid JSON, as it is in a job.Spec decoded from a stored job (validated at
// enqueue); a nil or empty payload is sent as null.
func EventBody(event string, ts time.Time, payload json.RawMessage) []byte {
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	var typ []byte // event as JSON, when it needs escapes
	n := len(event) + 2
	if !plainJSON(event) {
		typ, _ = json.Marshal(event) // a string always encodes (invalid UTF-8 becomes U+FFFD)
		n = len(typ)
	}
	b := make([]byte, 0, len(`{"type":,"timestamp":"","data":}`)+n+len(time.RFC3339Nano)+len(payload))
	b = append(b, `{"type":`...)
	if typ == nil {
		b = append(append(append(b, '"'), event...), '"')
	} else {
		b = append(b, typ...)
	}
	b = append(b, `,"timestamp":"`...)
	b = ts.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","data":`...)
	b = append(b, payload...)
	return append(b, '}')
}

// plainJSON reports whether encoding/json writes s as it is between
// quotes: printable ASCII but '"', '\\' and the HTML characters '<', '>'
// and '&', which it escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
