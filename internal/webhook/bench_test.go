package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/wire"
)

// BenchmarkDeliverOverhead compares one webhook attempt through Deliver
// (envelope, HMAC signing with one secret, the egress-checked dial on a
// new connection only, body excerpt) with a plain net/http POST of the same
// body, both over keep-alive to the same loopback receiver, interleaved in
// one loop so drift hits both alike. It reports plain-ns/op, sluice-ns/op
// and their ratio; ns/op is the sum of both.
func BenchmarkDeliverOverhead(b *testing.B) {
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()

	payload, _ := json.Marshal(map[string]string{"id": "evt_1", "note": strings.Repeat("x", 900)})
	spec := job.Spec{Type: wire.TypeWebhook, URL: rcv.URL + "/in", Event: "invoice.paid", Payload: payload}
	body := EventBody(spec.Event, time.Now(), payload)
	keys := [][]byte{mustKey(b, vectorSecret)}

	plain := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	defer plain.CloseIdleConnections()
	sluice := NewClient(ClientConfig{Allow: loopback4})
	defer sluice.CloseIdleConnections()
	ctx := context.Background()

	var plainTime, sluiceTime time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, spec.URL, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := plain.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		t1 := time.Now()
		res := Deliver(ctx, sluice, Request{ID: "j0_bench", Job: spec, Secrets: keys, UserAgent: "Sluice/bench", Now: t1})
		if res.Status != http.StatusNoContent {
			b.Fatalf("Deliver: status %d, err %v", res.Status, res.Err)
		}
		sluiceTime += time.Since(t1)
		plainTime += t1.Sub(t0)
	}
	n := float64(b.N)
	b.ReportMetric(float64(plainTime.Nanoseconds())/n, "plain-ns/op")
	b.ReportMetric(float64(sluiceTime.Nanoseconds())/n, "sluice-ns/op")
	b.ReportMetric(float64(sluiceTime)/float64(plainTime), "ratio")
}
