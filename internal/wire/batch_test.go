package wire

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"
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

// preClaimedBatch is a batch of n pre-claimed webhook jobs as a pass hands
// them off, bodies with characters encoding/json escapes included.
func preClaimedBatch(n int) Batch {
	b := Batch{Shard: 3}
	for i := range n {
		b.Jobs = append(b.Jobs, Payload{ID: "3-job-" + strconv.Itoa(i), Gen: int64(i + 1), SlotUS: 1_765_000_000_000_000 + int64(i),
			Claimed: &Claimed{Tenant: "tenant-" + strconv.Itoa(i), Type: TypeWebhook,
				Body:    `{"type":"webhook","event":"a<b>&c","payload":{"i":` + strconv.Itoa(i) + `,"s":"é\u2028\"x\\"},"url":"http://127.0.0.1:45678/r1"}`,
				Attempt: 2, TimeoutUS: 30_000_000, SlotUS: 1_765_000_000_000_000, CreatedUS: 1_764_999_999_000_000, Cost: 3,
				Upstreams: []string{"openai", "stripe"},
				Signing: &Signing{NowUS: 1_765_000_000_000_000, Unsigned: i%2 == 0,
					Secrets: []SigningSecret{{ID: "s1", CreatedUS: 1_700_000_000_000_000, ExpiresUS: 1_800_000_000_000_000, Sealed: "c2VhbGVk"}}}}})
	}
	return b
}

func TestPreClaimedBatchRoundTrip(t *testing.T) {
	t.Parallel()
	in := preClaimedBatch(5)
	got, err := DecodeBatch(EncodeBatch(in))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Fatalf("round trip: got %+v, want %+v", got, in)
	}
}

// TestDecodeBatchIsAsLenientAsEncodingJSON: names in another case,
// duplicate and unknown names and invalid UTF-8 decode as encoding/json
// decodes them.
func TestDecodeBatchIsAsLenientAsEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		`{"Shard":2,"JOBS":[{"ID":"a","Gen":1,"Slot_US":5}]}`,
		`{"shard":1,"shard":2,"jobs":[{"id":"a","id":"b","gen":1,"slot_us":5}]}`,
		`{"shard":2,"extra":[1,{"x":null}],"jobs":[{"id":"a","gen":1,"slot_us":5,"new":"v","claimed":{"tenant":"t","body":"x","more":1}}]}`,
		"{\"shard\":2,\"jobs\":[{\"id\":\"a\xff\",\"gen\":1,\"slot_us\":5,\"claimed\":{\"tenant\":\"t\xfe\"}}]}",
	} {
		var want Batch
		if err := json.Unmarshal([]byte(raw), &want); err != nil {
			t.Fatalf("encoding/json refuses %q: %v", raw, err)
		}
		got, err := DecodeBatch([]byte(raw))
		if err != nil {
			t.Errorf("DecodeBatch(%q): %v", raw, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("DecodeBatch(%q) = %+v, want %+v (encoding/json's)", raw, got, want)
		}
	}
}

// BenchmarkDecodeBatch: DecodeBatch beside encoding/json on a batch of 20
// pre-claimed jobs.
func BenchmarkDecodeBatch(b *testing.B) {
	raw := EncodeBatch(preClaimedBatch(20))
	b.Run("DecodeBatch", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeBatch(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var bt Batch
			if err := json.Unmarshal(raw, &bt); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestDecodeBatchFastIsTheGeneralDecoders: on EncodeBatch's own text the
// fast decoder reads every batch as the general one does, and on any other
// text it either agrees or leaves it to the general one.
func TestDecodeBatchFastIsTheGeneralDecoders(t *testing.T) {
	t.Parallel()
	full := preClaimedBatch(3)
	full.Jobs[1].Claimed.Signing.Secrets = append(full.Jobs[1].Claimed.Signing.Secrets, SigningSecret{ID: "s2", CreatedUS: -7, Sealed: "é\u2028\x7f"})
	full.Jobs[2].Claimed.Signing.Secrets = nil
	full.Jobs[2].Claimed.Upstreams = nil
	plain := Batch{Shard: 0, Jobs: []Payload{{ID: "0-a", Gen: 9, SlotUS: 1}, {ID: "0-b", Gen: 1, SlotUS: 2,
		Claimed: &Claimed{Tenant: "t", Type: TypeHTTP, Body: "\u0000\t\n\"\\/<>&\u00e9\U0001F600"}}}}
	for _, b := range []Batch{full, plain, preClaimedBatch(1)} {
		raw := EncodeBatch(b)
		got, ok := decodeBatchFast(raw)
		if !ok {
			t.Fatalf("the fast decoder refused EncodeBatch's %s", raw)
		}
		if !reflect.DeepEqual(got, b) {
			t.Fatalf("fast decoder: got %+v, want %+v", got, b)
		}
		// Every cut and every one-byte change either decodes as the
		// general decoder decodes it or is left to it.
		for i := range raw {
			for _, mut := range [][]byte{raw[:i], append(slices.Clone(raw[:i]), raw[i+1:]...),
				append(append(slices.Clone(raw[:i]), ' '), raw[i:]...), append(append(slices.Clone(raw[:i]), 'X'), raw[i+1:]...)} {
				fastAgrees(t, mut)
			}
		}
	}
}

// FuzzDecodeBatchFast: whatever the fast decoder accepts, the general one
// decodes to the same batch.
func FuzzDecodeBatchFast(f *testing.F) {
	f.Add(EncodeBatch(preClaimedBatch(2)))
	f.Add([]byte(`{"shard":1,"jobs":[{"id":"a\u00e9\ud83d\ude00","gen":-0,"slot_us":5}]}`))
	f.Fuzz(fastAgrees)
}

// fastAgrees fails unless the fast decoder leaves raw to the general one
// or reads it as the general one does.
func fastAgrees(t *testing.T, raw []byte) {
	fast, ok := decodeBatchFast(raw)
	if !ok {
		return
	}
	var want Batch
	if err := jsonv2.Unmarshal(raw, &want, batchDecoding); err != nil || !reflect.DeepEqual(fast, want) {
		t.Fatalf("fast decoder read %q as %+v; the general one: %+v, %v", raw, fast, want, err)
	}
}
