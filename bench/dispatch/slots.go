package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/wire"
)

// clusterSlots is the number of Redis Cluster hash slots.
const clusterSlots = 16384

// keySlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag — the part between the first "{" and the next "}", when not empty —
// or of the whole key, mod 16384 (the Cluster specification's HASH_SLOT).
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key)) % clusterSlots
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the
// checksum Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// queueSlot is the hash slot of asynq queue q: asynq's keys of a queue
// (wire.AsynqQueueKey) carry the queue's name as their hash tag.
func queueSlot(q string) int { return keySlot(wire.AsynqQueueKey(q, "pending")) }

// spread is how handed-off jobs fall on Redis Cluster hash slots.
type spread struct {
	jobs    float64 // jobs handed off
	busiest float64 // of them, on the busiest slot
	slot    int     // the busiest slot
	slots   int     // slots that carried jobs
	queues  int     // queues that carried jobs
	source  string  // where the counts come from
}

// spreadOf aggregates jobs per asynq queue (queue → jobs) by hash slot.
func spreadOf(perQueue map[string]float64, source string) spread {
	bySlot := map[int]float64{}
	s := spread{source: source}
	for _, q := range slices.Sorted(maps.Keys(perQueue)) {
		if n := perQueue[q]; n > 0 {
			bySlot[queueSlot(q)] += n
			s.jobs += n
			s.queues++
		}
	}
	for _, slot := range slices.Sorted(maps.Keys(bySlot)) {
		if bySlot[slot] > s.busiest {
			s.slot, s.busiest = slot, bySlot[slot]
		}
	}
	s.slots = len(bySlot)
	return s
}

// share is the busiest slot's share of the jobs, 0…1 (0 without jobs).
func (s spread) share() float64 {
	if s.jobs == 0 {
		return 0
	}
	return s.busiest / s.jobs
}

func (s spread) String() string {
	if s.jobs == 0 {
		return "n/a"
	}
	return fmt.Sprintf("busiest slot %.1f %% of jobs over %d slots (slot %d; %d queues)",
		100*s.share(), s.slots, s.slot, s.queues)
}

// handoffMetric is the throttler's counter of jobs handed off, per asynq
// queue (label queue).
const handoffMetric = "sluice_dispatch_handoff_jobs_total"

// handoffSpread is the spread of the jobs a throttler handed off between
// two readings of its counters: from handoffMetric when the throttler has
// it; otherwise (throttlers with one task per job on one queue) every
// released webhook job counts on wire.WebhookQueue.
func handoffSpread(c, b counters) spread {
	perQueue := map[string]float64{}
	for series, v := range c.v {
		name, labels, ok := strings.Cut(series, "{")
		if !ok || name != handoffMetric {
			continue
		}
		if q, ok := labelValue(labels, "queue"); ok {
			perQueue[q] += v - b.v[series]
		}
	}
	if len(perQueue) > 0 {
		return spreadOf(perQueue, handoffMetric)
	}
	released := `sluice_dispatch_released_total{type="webhook"}`
	if _, ok := c.v[released]; !ok {
		return spread{source: "no hand-off or release counter"}
	}
	return spreadOf(map[string]float64{wire.WebhookQueue(prefix): c.v[released] - b.v[released]},
		"released webhook jobs, all on "+wire.WebhookQueue(prefix))
}

// labelValue is the value of label name in a Prometheus series' label
// set (`a="x",b="y"}`); values with escapes are not unescaped (queue names
// have none).
func labelValue(labels, name string) (string, bool) {
	for _, kv := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.TrimSpace(k) == name {
			return strings.Trim(v, `"`), true
		}
	}
	return "", false
}
