package main

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// The Redis Cluster specification's values: CRC16("123456789") = 0x31C3,
// and its hash tag rules.
func TestKeySlot(t *testing.T) {
	t.Parallel()
	if got := crc16("123456789"); got != 0x31c3 {
		t.Errorf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for _, c := range []struct{ key, same string }{
		{"{user1000}.following", "user1000"},
		{"foo{bar}{zap}", "bar"},
		{"foo{{bar}}zap", "{bar"},
		{"foo{}{bar}", "foo{}{bar}"}, // an empty tag: the whole key
		{"foo{bar", "foo{bar"},       // no closing brace: the whole key
		{"asynq:{sluice:h3}:pending", "sluice:h3"},
	} {
		if got, want := keySlot(c.key), int(crc16(c.same))%clusterSlots; got != want {
			t.Errorf("keySlot(%q) = %d, want %d (the slot of %q)", c.key, got, want, c.same)
		}
	}
	// CLUSTER KEYSLOT's examples in the Redis documentation.
	for key, want := range map[string]int{"somekey": 11058, "foo{hash_tag}": 2515, "123456789": 0x31c3 % clusterSlots} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestHandoffSpread(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	series := func(q string) string { return fmt.Sprintf(`%s{queue="%s"}`, handoffMetric, q) }
	b := counters{at: at, v: map[string]float64{series("sluice:h0"): 100}}
	c := counters{at: at.Add(time.Second), v: map[string]float64{
		series("sluice:h0"): 400, // 300 in the interval
		series("sluice:h1"): 100,
		series("sluice:h2"): 100,
		`sluice_dispatch_released_total{type="webhook"}`: 500,
	}}
	s := handoffSpread(c, b)
	if s.jobs != 500 || s.queues != 3 || s.source != handoffMetric {
		t.Fatalf("spread = %+v, want 500 jobs on 3 queues from %s", s, handoffMetric)
	}
	// The three queues' slots, computed independently: the busiest slot
	// holds h0's 300 plus whichever of h1, h2 share its slot.
	want := 300.0
	for _, q := range []string{"sluice:h1", "sluice:h2"} {
		if queueSlot(q) == queueSlot("sluice:h0") {
			want += 100
		}
	}
	if math.Abs(s.share()-want/500) > 1e-9 || s.slot != queueSlot("sluice:h0") {
		t.Errorf("busiest slot %d with share %.3f, want slot %d with %.3f", s.slot, s.share(), queueSlot("sluice:h0"), want/500)
	}

	// Without the hand-off counter every released webhook job was one task
	// on the one webhook queue: all of them on one slot.
	old := handoffSpread(counters{v: map[string]float64{`sluice_dispatch_released_total{type="webhook"}`: 2000}},
		counters{v: map[string]float64{`sluice_dispatch_released_total{type="webhook"}`: 500}})
	if old.jobs != 1500 || old.slots != 1 || old.share() != 1 || old.slot != queueSlot("sluice:webhook") {
		t.Errorf("fallback spread = %+v, want 1500 jobs, all on the slot of sluice:webhook", old)
	}
	if none := handoffSpread(counters{v: map[string]float64{}}, counters{v: map[string]float64{}}); none.String() != "n/a" {
		t.Errorf("spread without counters = %q, want n/a", none.String())
	}
}

// The eight hand-off queues of the bench's prefix: how they fall on slots
// (the spread's best case), so a collision is seen when the table shows
// fewer than eight slots.
func TestHandoffQueuesSlots(t *testing.T) {
	t.Parallel()
	per := map[string]float64{}
	for i := range 8 {
		per[fmt.Sprintf("%s:h%d", prefix, i)] = 1
	}
	s := spreadOf(per, "test")
	if s.queues != 8 || s.slots < 1 || s.slots > 8 || s.share() < 1.0/8 {
		t.Errorf("8 queues: %+v", s)
	}
	t.Logf("the 8 hand-off queues of prefix %q: %s", prefix, s)
}
