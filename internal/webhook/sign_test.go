package webhook

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sluicehq/sluice/internal/policy"
)

// The published Standard Webhooks test vector (the specification's example: secret, id, timestamp and body, and the signature they give).
const (
	vectorSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTS     = 1614265330
	vectorBody   = `{"test": 2432232314}`
	vectorSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	// a second secret of a rotation (32 random bytes)
	rotatedSecret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD/oQMQXutUaA="
)

func mustKey(t testing.TB, secret string) []byte {
	t.Helper()
	k, err := policy.ParseWebhookSecret(secret)
	if err != nil {
		t.Fatalf("ParseWebhookSecret: %v", err)
	}
	return k
}

func TestSignPublishedVector(t *testing.T) {
	got := Sign([][]byte{mustKey(t, vectorSecret)}, vectorID, time.Unix(vectorTS, 0), []byte(vectorBody))
	if got != vectorSig {
		t.Fatalf("Sign = %q, want %q", got, vectorSig)
	}
}

func TestSignNoSecrets(t *testing.T) {
	if got := Sign(nil, vectorID, time.Unix(vectorTS, 0), []byte(vectorBody)); got != "" {
		t.Fatalf("Sign with no secrets = %q, want empty", got)
	}
	h := http.Header{}
	h.Set(HeaderSignature, "stale")
	Headers(h, nil, "j1", time.Unix(vectorTS, 0), nil)
	if _, ok := h[http.CanonicalHeaderKey(HeaderSignature)]; ok {
		t.Fatalf("Headers with no secrets left a signature header: %v", h)
	}
	if h.Get(HeaderID) != "j1" || h.Get(HeaderTimestamp) != "1614265330" {
		t.Fatalf("Headers = %v", h)
	}
}

// headersFor signs body with secrets at ts and returns the header block a
// receiver would see.
func headersFor(secrets [][]byte, id string, ts time.Time, body []byte) http.Header {
	h := http.Header{}
	Headers(h, secrets, id, ts, body)
	return h
}

func TestOfficialLibraryVerifiesOurHeaders(t *testing.T) {
	body := EventBody("invoice.paid", time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), json.RawMessage(`{"id":"inv_1","amount":4200}`))
	now := time.Now() // the official Verify checks the timestamp against the wall clock
	h := headersFor([][]byte{mustKey(t, vectorSecret)}, "j3_01J00000000000000000000000", now, body)

	wh, err := standardwebhooks.NewWebhook(vectorSecret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(body, h); err != nil {
		t.Fatalf("official Verify: %v (headers %v)", err, h)
	}
	// A changed byte must not verify.
	tampered := []byte(strings.Replace(string(body), "4200", "4201", 1))
	if err := wh.Verify(tampered, h); err == nil {
		t.Fatal("official Verify accepted a tampered body")
	}
	// Nor an old timestamp (receivers reject > 5 minutes off).
	old := headersFor([][]byte{mustKey(t, vectorSecret)}, "j3_x", now.Add(-10*time.Minute), body)
	if err := wh.Verify(body, old); err == nil {
		t.Fatal("official Verify accepted a 10-minute-old timestamp")
	}
}

func TestRotationBothSecretsVerify(t *testing.T) {
	keys := [][]byte{mustKey(t, vectorSecret), mustKey(t, rotatedSecret)}
	body := []byte(`{"type":"a","timestamp":"2026-03-01T12:00:00Z","data":null}`)
	h := headersFor(keys, "j1_abc", time.Now(), body)

	entries := strings.Split(h.Get(HeaderSignature), " ")
	if len(entries) != 2 || entries[0] == entries[1] {
		t.Fatalf("signature header %q: want two distinct entries", h.Get(HeaderSignature))
	}
	for i, s := range []string{vectorSecret, rotatedSecret} {
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(body, h); err != nil {
			t.Errorf("secret %d: official Verify: %v", i, err)
		}
		// each entry alone is that secret's signature
		if want, _ := wh.Sign("j1_abc", time.Unix(mustUnix(t, h), 0), body); entries[i] != want {
			t.Errorf("entry %d = %q, want %q", i, entries[i], want)
		}
	}
	other, _ := standardwebhooks.NewWebhook("whsec_" + strings.Repeat("A", 32))
	if err := other.Verify(body, h); err == nil {
		t.Fatal("a secret not in the rotation verified")
	}
}

func mustUnix(t *testing.T, h http.Header) int64 {
	t.Helper()
	var ts int64
	if err := json.Unmarshal([]byte(h.Get(HeaderTimestamp)), &ts); err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestEventBodyShape(t *testing.T) {
	ts := time.Date(2026, 3, 1, 13, 4, 5, 600_000_000, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		name    string
		payload json.RawMessage
		want    string
	}{
		{"object, verbatim", json.RawMessage(`{"a": [1, 2]}`), `{"type":"user.created","timestamp":"2026-03-01T12:04:05.6Z","data":{"a": [1, 2]}}`},
		{"nil", nil, `{"type":"user.created","timestamp":"2026-03-01T12:04:05.6Z","data":null}`},
		{"string", json.RawMessage(`"x"`), `{"type":"user.created","timestamp":"2026-03-01T12:04:05.6Z","data":"x"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := EventBody("user.created", ts, tc.payload)
			if string(got) != tc.want || !json.Valid(got) {
				t.Fatalf("EventBody = %s, want %s", got, tc.want)
			}
		})
	}
	// the event name is JSON-escaped
	got := EventBody("a\"b<c>\n", ts, nil)
	var back struct{ Type string }
	if err := json.Unmarshal(got, &back); err != nil || back.Type != "a\"b<c>\n" {
		t.Fatalf("EventBody with an escaped event = %s (%v)", got, err)
	}
}

// TestEventBodyTypeIsEncodingJSONs: the event name is written as
// encoding/json writes the string, whatever byte it holds (EventBody copies
// the ones json writes as they are).
func TestEventBodyTypeIsEncodingJSONs(t *testing.T) {
	ts := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for c := range 256 {
		event := "a." + string([]byte{byte(c)}) + "é"
		typ, _ := json.Marshal(event)
		want := `{"type":` + string(typ) + `,"timestamp":"2026-03-01T12:00:00Z","data":null}`
		if got := EventBody(event, ts, nil); string(got) != want {
			t.Fatalf("EventBody(%q) = %s, want %s", event, got, want)
		}
	}
}
