package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/webhook"
	"github.com/sluicehq/sluice/internal/wire"
)

// A receiver verifies a Sluice delivery with the official Standard Webhooks
// library, using the same "whsec_" secret the tenant's policy holds.
func Example() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

	verifier, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		panic(err)
	}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := verifier.Verify(body, r.Header); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var evt struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		}
		_ = json.Unmarshal(body, &evt)
		fmt.Printf("verified %s %s from %s\n", evt.Type, evt.Data, r.Header.Get("webhook-id"))
	}))
	defer receiver.Close()

	// Sender side: what a Sluice worker does for one attempt. The receiver
	// is on loopback, so the egress guard must be opened for it.
	key, _ := policy.ParseWebhookSecret(secret)
	client := webhook.NewClient(webhook.ClientConfig{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	defer client.CloseIdleConnections()

	res := webhook.Deliver(context.Background(), client, webhook.Request{
		ID:        "j0_01HZX3Q5N4B5W9R2K7M8P6T1CD",
		Job:       job.Spec{Type: wire.TypeWebhook, URL: receiver.URL, Event: "invoice.paid", Payload: json.RawMessage(`{"id":"inv_1"}`)},
		Secrets:   [][]byte{key},
		UserAgent: "Sluice/1.0.0",
	})
	out := res.Outcome(time.Now())
	fmt.Println(res.Status, out.Kind == wire.FinishSuccess)
	// Output:
	// verified invoice.paid {"id":"inv_1"} from j0_01HZX3Q5N4B5W9R2K7M8P6T1CD
	// 200 true
}
