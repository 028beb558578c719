package deliverytest

import (
	"net/http"
	"strings"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sluicehq/sluice/internal/webhook"
)

// SignedBy reports, for each of secrets ("whsec_…"), whether the request
// (its body and headers, as the receiver saw them) carries a Standard
// Webhooks signature that verifies with it, checked by the reference
// library, and how many signatures its webhook-signature header holds. A
// secret the library refuses fails t.
func SignedBy(t testing.TB, body []byte, header http.Header, secrets ...string) ([]bool, int) {
	t.Helper()
	ok := make([]bool, len(secrets))
	for i, s := range secrets {
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			t.Fatalf("secret %d is not a Standard Webhooks secret: %v", i, err)
		}
		ok[i] = wh.Verify(body, header) == nil
	}
	return ok, len(strings.Fields(header.Get(webhook.HeaderSignature)))
}
