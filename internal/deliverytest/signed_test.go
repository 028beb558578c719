package deliverytest

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/webhook"
)

// A request signed with two keys verifies with each of them, not with a
// third, and not at all once its body changes.
func TestSignedByChecksEachSecret(t *testing.T) {
	k1, k2, k3 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32), bytes.Repeat([]byte{3}, 32)
	whsec := func(k []byte) string { return "whsec_" + base64.StdEncoding.EncodeToString(k) }
	body := []byte(`{"type":"e","timestamp":"now","data":1}`)
	h := http.Header{}
	webhook.Headers(h, [][]byte{k1, k2}, "msg_1", time.Now(), body)
	if ok, n := SignedBy(t, body, h, whsec(k1), whsec(k2), whsec(k3)); !slices.Equal(ok, []bool{true, true, false}) || n != 2 {
		t.Fatalf("signed by k1 and k2: %v, %d signatures; want [true true false], 2", ok, n)
	}
	if ok, _ := SignedBy(t, []byte(`{"other":1}`), h, whsec(k1)); ok[0] {
		t.Fatal("a changed body verifies")
	}
}
