package wire

import (
	"errors"
	"reflect"
	"testing"
)

func TestBatchRoundTrip(t *testing.T) {
	t.Parallel()
	in := Batch{Shard: 11, Jobs: []Payload{{ID: "11-a", Gen: 1, SlotUS: 1_700_000_000_000_001}, {ID: "11-b", Gen: 7, SlotUS: 1_700_000_000_000_900}}}
	got, err := DecodeBatch(EncodeBatch(in))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Fatalf("round trip: got %+v, want %+v", got, in)
	}
}

func TestDecodeBatchRefuses(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		``, `{`, `[]`, `{"shard":1}`, `{"shard":1,"jobs":[]}`, `{"shard":-1,"jobs":[{"id":"a","gen":1,"slot_us":5}]}`,
		`{"shard":1,"jobs":[{"id":"","gen":1,"slot_us":5}]}`, `{"shard":1,"jobs":[{"id":"a","gen":0,"slot_us":5}]}`,
		`{"shard":1,"jobs":[{"id":"a","gen":1,"slot_us":5},{"id":"b","gen":1,"slot_us":0}]}`,
	} {
		if b, err := DecodeBatch([]byte(raw)); !errors.Is(err, ErrBadPayload) {
			t.Errorf("DecodeBatch(%q) = %+v, %v; want ErrBadPayload", raw, b, err)
		}
	}
}

func TestHandoffQueuesSpreadShards(t *testing.T) {
	t.Parallel()
	names := HandoffQueueNames("sl")
	if len(names) != HandoffQueues || names[0] != "sl:h0" || names[HandoffQueues-1] != "sl:h7" {
		t.Fatalf("queue names %v", names)
	}
	seen := map[string]int{}
	for shard := range 16 {
		seen[HandoffQueueOf("sl", shard)]++
	}
	if len(seen) != HandoffQueues {
		t.Fatalf("16 shards use %d of %d queues: %v", len(seen), HandoffQueues, seen)
	}
	for q, n := range seen {
		if n != 2 {
			t.Errorf("queue %s carries %d of 16 shards, want 2", q, n)
		}
	}
}
