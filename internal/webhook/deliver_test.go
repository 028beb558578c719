package webhook

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/version"
	"github.com/sluicehq/sluice/internal/wire"
)

// captured is what a receiver saw of one request.
type captured struct {
	method, path string
	header       http.Header
	body         []byte
}

// capturing returns a receiver that sends every request it sees on a
// channel and answers with respond.
func capturing(t *testing.T, respond http.HandlerFunc) (*counting, <-chan captured) {
	ch := make(chan captured, 8)
	rcv := newCounting(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ch <- captured{r.Method, r.URL.RequestURI(), r.Header.Clone(), body}
		respond(w, r)
	})
	return rcv, ch
}

func deliver(t *testing.T, c *http.Client, req Request) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return Deliver(ctx, c, req)
}

func TestDeliverWebhook(t *testing.T) {
	rcv, seen := capturing(t, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "thanks") })
	c := direct(t, loopback4)
	keys := [][]byte{mustKey(t, vectorSecret), mustKey(t, rotatedSecret)}
	now := time.Unix(1_780_000_000, 0)
	created := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	res := deliver(t, c, Request{
		ID:        "j7_01J9ZZZ",
		Job:       job.Spec{Type: wire.TypeWebhook, URL: rcv.URL + "/hooks?x=1", Event: "order.shipped", Payload: json.RawMessage(`{"order":17}`)},
		Secrets:   keys,
		UserAgent: "Sluice/1.4.2",
		Now:       now,
		EventTime: created,
	})
	if res.Err != nil || res.Status != http.StatusOK || string(res.Excerpt) != "thanks" || res.Truncated || res.Latency <= 0 {
		t.Fatalf("result = %+v", res)
	}
	got := <-seen
	want := `{"type":"order.shipped","timestamp":"2026-05-01T10:00:00Z","data":{"order":17}}`
	if got.method != http.MethodPost || got.path != "/hooks?x=1" || string(got.body) != want {
		t.Fatalf("request %s %s %s, want POST /hooks?x=1 %s", got.method, got.path, got.body, want)
	}
	for name, v := range map[string]string{
		"Content-Type": "application/json", "User-Agent": "Sluice/1.4.2",
		"Webhook-Id": "j7_01J9ZZZ", "Webhook-Timestamp": "1780000000",
		"Webhook-Signature": Sign(keys, "j7_01J9ZZZ", now, []byte(want)),
	} {
		if got.header.Get(name) != v {
			t.Errorf("header %s = %q, want %q", name, got.header.Get(name), v)
		}
	}
	for _, s := range []string{vectorSecret, rotatedSecret} {
		wh, _ := standardwebhooks.NewWebhook(s)
		if err := wh.VerifyIgnoringTimestamp(got.body, got.header); err != nil {
			t.Errorf("official verify with %s…: %v", s[:10], err)
		}
	}
}

func TestDeliverHTTPJob(t *testing.T) {
	rcv, seen := capturing(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })
	c := direct(t, loopback4)
	text, raw := "name=a&b=c", []byte{0, 1, 2, 0xff}
	b64 := base64.StdEncoding.EncodeToString(raw)
	for _, tc := range []struct {
		name     string
		spec     job.Spec
		wantBody []byte
		wantUA   string
	}{
		{"text body", job.Spec{Type: wire.TypeHTTP, Method: "PUT", URL: rcv.URL + "/v1/items/9",
			Headers: map[string]string{"Authorization": "Bearer t0k", "content-type": "application/x-www-form-urlencoded"}, Body: &text},
			[]byte(text), version.UserAgent()},
		{"base64 body and own user agent", job.Spec{Type: wire.TypeHTTP, Method: "PATCH", URL: rcv.URL + "/v1/items/9",
			Headers: map[string]string{"User-Agent": "acme-sync/2"}, BodyBase64: &b64}, raw, "acme-sync/2"},
		{"no body", job.Spec{Type: wire.TypeHTTP, Method: "DELETE", URL: rcv.URL + "/v1/items/9"}, []byte{}, version.UserAgent()},
	} {
		res := deliver(t, c, Request{ID: "j1_h", Job: tc.spec})
		if res.Err != nil || res.Status != http.StatusAccepted {
			t.Fatalf("%s: result %+v", tc.name, res)
		}
		got := <-seen
		if got.method != tc.spec.Method || got.path != "/v1/items/9" || !bytes.Equal(got.body, tc.wantBody) || got.header.Get("User-Agent") != tc.wantUA {
			t.Errorf("%s: saw %s %s body %q UA %q", tc.name, got.method, got.path, got.body, got.header.Get("User-Agent"))
		}
		for k, v := range tc.spec.Headers {
			if got.header.Get(k) != v {
				t.Errorf("%s: header %s = %q, want %q", tc.name, k, got.header.Get(k), v)
			}
		}
		if got.header.Get(HeaderSignature) != "" {
			t.Errorf("%s: an http job was signed", tc.name)
		}
	}
}

func TestDeliverInvalidJobSendsNothing(t *testing.T) {
	rcv := newCounting(t, noContent)
	c := direct(t, loopback4)
	bad := "%%%"
	for name, spec := range map[string]job.Spec{
		"task type":      {Type: wire.TypeTask, TaskType: "x"},
		"ftp url":        {Type: wire.TypeWebhook, URL: "ftp://127.0.0.1:" + rcv.port + "/", Event: "e"},
		"relative url":   {Type: wire.TypeWebhook, URL: "/in", Event: "e"},
		"bad base64":     {Type: wire.TypeHTTP, Method: "POST", URL: rcv.URL, BodyBase64: &bad},
		"invalid method": {Type: wire.TypeHTTP, Method: "GE T", URL: rcv.URL},
		// Found by a hostile probe (#18): stored jobs enqueue now refuses.
		"space in the query":     {Type: wire.TypeHTTP, Method: "GET", URL: rcv.URL + "/a?c=d HTTP/1.0"},
		"space in the path":      {Type: wire.TypeWebhook, URL: rcv.URL + "/a b", Event: "e"},
		"tab in the query":       {Type: wire.TypeHTTP, Method: "GET", URL: rcv.URL + "/a?c=\td"},
		"non-ASCII query":        {Type: wire.TypeHTTP, Method: "GET", URL: rcv.URL + "/a?c=\u00e9"},
		"Connection header":      {Type: wire.TypeHTTP, Method: "GET", URL: rcv.URL, Headers: map[string]string{"connection": "Upgrade"}},
		"Proxy-* header":         {Type: wire.TypeHTTP, Method: "GET", URL: rcv.URL, Headers: map[string]string{"Proxy-Authorization": "x"}},
		"Transfer-Encoding":      {Type: wire.TypeHTTP, Method: "POST", URL: rcv.URL, Headers: map[string]string{"Transfer-Encoding": "chunked"}},
		"CRLF in a header value": {Type: wire.TypeHTTP, Method: "GET", URL: rcv.URL, Headers: map[string]string{"X-A": "a\r\nX-B: c"}},
	} {
		res := deliver(t, c, Request{ID: "j1_bad", Job: spec})
		kind, _, reason := Classify(res.Status, res.Header, res.Err, time.Now())
		if !errors.Is(res.Err, ErrInvalidJob) || kind != wire.FinishPermanent || reason != ReasonInvalidJob {
			t.Errorf("%s: err %v, Classify %v %q; want ErrInvalidJob, permanent", name, res.Err, kind, reason)
		}
	}
	if rcv.conns.Load() != 0 {
		t.Fatalf("invalid jobs opened %d connections", rcv.conns.Load())
	}
}

// TestDeliverBodyCap: the excerpt stops at ExcerptBytes; a body within
// ExcerptBytes+DrainBytes is drained so the connection is reused, a longer
// one closes it.
func TestDeliverBodyCap(t *testing.T) {
	for _, tc := range []struct {
		size      int
		wantConns int64
	}{
		{ExcerptBytes + DrainBytes/2, 1},
		{ExcerptBytes + 4*DrainBytes, 2},
	} {
		body := strings.Repeat("x", tc.size)
		rcv := newCounting(t, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) })
		c := direct(t, loopback4)
		for range 2 {
			res := deliver(t, c, Request{ID: "j1", Job: job.Spec{Type: wire.TypeHTTP, Method: "GET", URL: rcv.URL}})
			if res.Status != 200 || len(res.Excerpt) != ExcerptBytes || !res.Truncated {
				t.Fatalf("size %d: status %d, excerpt %d bytes, truncated %v", tc.size, res.Status, len(res.Excerpt), res.Truncated)
			}
		}
		if got := rcv.conns.Load(); got != tc.wantConns {
			t.Errorf("body of %d bytes: %d connections for 2 requests, want %d", tc.size, got, tc.wantConns)
		}
	}
}

// TestDeliverTimeout: the attempt's deadline comes from ctx and a receiver
// that never answers yields a retryable timeout.
func TestDeliverTimeout(t *testing.T) {
	release := make(chan struct{})
	rcv := newCounting(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) })
	c := direct(t, loopback4)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	deadline, _ := ctx.Deadline()
	res := Deliver(ctx, c, Request{ID: "j1", Job: job.Spec{Type: wire.TypeWebhook, URL: rcv.URL, Event: "e"}})
	returned := time.Now()
	kind, _, reason := Classify(res.Status, res.Header, res.Err, time.Now())
	if res.Status != 0 || kind != wire.FinishRetry || reason != ReasonTimeout {
		t.Fatalf("status %d err %v: Classify %v %q, want retry timeout", res.Status, res.Err, kind, reason)
	}
	// The attempt ran to the deadline: Deliver returned no earlier, and its
	// latency (from the request's send, a little after ctx began) is not
	// longer than the call.
	if returned.Before(deadline) || res.Latency <= 0 || res.Latency > returned.Sub(deadline.Add(-50*time.Millisecond)) {
		t.Fatalf("returned %v before the deadline, latency %v", deadline.Sub(returned), res.Latency)
	}
}

// TestDeliverBodyCutByTimeout: a receiver that stalls mid-body until the
// attempt's deadline yields its status, the part read, Truncated with Cut
// ReasonTimeout, and the latency to the cut; the outcome counts by the
// status (a 200: success).
func TestDeliverBodyCutByTimeout(t *testing.T) {
	release := make(chan struct{})
	rcv := newCounting(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		io.WriteString(w, "half")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	res := Deliver(ctx, direct(t, loopback4), Request{ID: "j1", Job: job.Spec{Type: wire.TypeHTTP, Method: "GET", URL: rcv.URL}})
	if res.Status != 200 || string(res.Body) != "half" || !res.Truncated || res.Cut != ReasonTimeout || res.Err != nil {
		t.Fatalf("status %d body %q truncated %v cut %q err %v, want 200 half truncated by timeout",
			res.Status, res.Body, res.Truncated, res.Cut, res.Err)
	}
	if res.Latency < 50*time.Millisecond {
		t.Fatalf("latency %v: want the time to the cut, at least the deadline", res.Latency)
	}
	if o := res.Outcome(time.Now()); o.Kind != wire.FinishSuccess {
		t.Fatalf("outcome %v, want success by the status", o.Kind)
	}
}

func TestDeliverConnectionRefusedIsRetryable(t *testing.T) {
	rcv := newCounting(t, noContent)
	url := rcv.URL
	rcv.Close() // nothing listens on the port any more
	res := deliver(t, direct(t, loopback4), Request{ID: "j1", Job: job.Spec{Type: wire.TypeWebhook, URL: url, Event: "e"}})
	if kind, _, reason := Classify(res.Status, res.Header, res.Err, time.Now()); kind != wire.FinishRetry || reason != ReasonConnection {
		t.Fatalf("err %v: Classify %v %q, want retry connection_error", res.Err, kind, reason)
	}
}

func TestResultOutcome(t *testing.T) {
	now := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	r := Result{Status: 429, Header: http.Header{"Retry-After": {"7"}}, Latency: 3 * time.Millisecond}
	got := r.Outcome(now)
	want := wire.AttemptOutcome{Kind: wire.FinishThrottled, Status: 429, Latency: 3 * time.Millisecond, Error: "http_429", Pause: 7 * time.Second}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Outcome = %+v, want %+v", got, want)
	}
}

// TestDeliverKeepsBodyBytes: a larger BodyBytes keeps that much of the body
// (the excerpt stays ExcerptBytes), and marks a longer body truncated.
func TestDeliverKeepsBodyBytes(t *testing.T) {
	body := strings.Repeat("r", 3*ExcerptBytes)
	rcv := newCounting(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) })
	spec := job.Spec{Type: wire.TypeHTTP, URL: rcv.URL, Method: "GET"}
	res := deliver(t, direct(t, loopback4), Request{ID: "j1", Job: spec, BodyBytes: 2 * ExcerptBytes})
	if string(res.Body) != body[:2*ExcerptBytes] || !res.Truncated || len(res.Excerpt) != ExcerptBytes {
		t.Fatalf("body %d bytes, excerpt %d, truncated %v", len(res.Body), len(res.Excerpt), res.Truncated)
	}
	if o := res.Outcome(time.Now()); string(o.Excerpt) != body[:ExcerptBytes] {
		t.Fatalf("outcome excerpt %d bytes, want %d", len(o.Excerpt), ExcerptBytes)
	}
	res = deliver(t, direct(t, loopback4), Request{ID: "j2", Job: spec, BodyBytes: 4 * ExcerptBytes})
	if string(res.Body) != body || res.Truncated {
		t.Fatalf("whole body: %d bytes, truncated %v", len(res.Body), res.Truncated)
	}
}

// TestBuildRequestURLAsNewRequestMakesIt: the request's URL and Host are
// what http.NewRequestWithContext makes of the job's URL (an empty port
// dropped from the host), whether Deliver parses it or the caller passes it
// parsed, and the caller's parsed URL is left as it was.
func TestBuildRequestURLAsNewRequestMakesIt(t *testing.T) {
	for _, raw := range []string{"http://127.0.0.1:/in?a=1", "https://Example.COM:8443/p/%2F?q#f", "http://[::1]:/x", "http://h/"} {
		want, err := http.NewRequestWithContext(context.Background(), http.MethodPost, raw, nil)
		if err != nil {
			t.Fatal(err)
		}
		parsed, _ := url.Parse(raw)
		keep := *parsed
		for _, u := range []*url.URL{nil, parsed} {
			req := Request{ID: "j1", Job: job.Spec{Type: wire.TypeWebhook, URL: raw, Event: "e"}, URL: u, Now: time.Now()}
			got, err := buildRequest(context.Background(), req)
			if err != nil {
				t.Fatalf("%s: %v", raw, err)
			}
			if *got.URL != *want.URL || got.Host != want.Host {
				t.Errorf("%s (parsed %v): URL %#v host %q, want %#v host %q", raw, u != nil, got.URL, got.Host, want.URL, want.Host)
			}
		}
		if *parsed != keep {
			t.Errorf("%s: the caller's URL changed to %#v", raw, parsed)
		}
	}
}

// TestReadBodyOfNoBodyIsReadAlls: a body known empty, not read, gives what
// reading it gives: an empty body that is not nil, nothing drained.
func TestReadBodyOfNoBodyIsReadAlls(t *testing.T) {
	body, drained, err := readBody(http.NoBody, ExcerptBytes)
	want, _ := io.ReadAll(io.LimitReader(http.NoBody, ExcerptBytes))
	if !reflect.DeepEqual(body, want) || body == nil || drained != 0 || err != nil {
		t.Fatalf("readBody(NoBody) = %#v, %d, %v; want %#v, 0, nil", body, drained, err, want)
	}
}
