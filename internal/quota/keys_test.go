package quota

import (
	"testing"
)

// TestUpstreamKeysOneSlot: every key of one upstream shares its hash tag,
// and the ETag and its If-Match round-trip.
func TestUpstreamKeysOneSlot(t *testing.T) {
	t.Parallel()
	k := keyspace{prefix: "p"}
	if got := k.upstream("sms"); got != "p:{u:sms}:u" {
		t.Errorf("upstream key = %q", got)
	}
	if got := k.upstreams(); got != "p:upstreams" {
		t.Errorf("listing key = %q", got)
	}
	for _, v := range []int64{0, 1, 42} {
		if n, err := ParseUpstreamIfMatch(UpstreamETag(v)); err != nil || n != v {
			t.Errorf("If-Match %s = %d, %v", UpstreamETag(v), n, err)
		}
	}
}
