package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/wire"
)

// resultFixedOverhead is what a result's body may cost Redis beyond
// 1.05 × its size: the last chunk's allocator rounding (≤ 16 KiB) and one
// hash entry per chunk.
const resultFixedOverhead = 20 << 10

// resultEncodingSlack is how far below a body's size its measured cost may
// fall: the cost is the difference of two records, and the other fields
// cost a hash table entry each in the record with the body but a few
// listpack bytes in the one without (its allocator class may even hold
// them for free), so the difference is the body's size ± tens of bytes.
const resultEncodingSlack = 64

// hostileBodies are bodies of n bytes an upstream may answer with: NUL
// bytes and HTML (6 bytes each JSON-escaped), and random bytes (not UTF-8).
func hostileBodies(n int) map[string][]byte {
	html := []byte(strings.Repeat(`<a href="/x?a=1&b=2">&amp;</a>`, n/30+1))[:n]
	random := make([]byte, n)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	return map[string][]byte{"nul": make([]byte, n), "html": html, "random": random}
}

// memoryUsage is MEMORY USAGE key SAMPLES 0: every field counted.
func (e *env) memoryUsage(key string) int64 {
	e.t.Helper()
	n, err := e.rdb.MemoryUsage(e.ctx, key, 0).Result()
	if err != nil {
		e.t.Fatalf("memory usage %s: %v", key, err)
	}
	return n
}

// finishHTTP runs one attempt of a new http job of tenant that answers 200
// with body, and returns the job's id.
func (e *env) finishHTTP(tenant string, body []byte) string {
	e.t.Helper()
	id := e.enqueueOne(tenant, Item{Type: wire.TypeHTTP, Body: []byte(`{"type":"http"}`)}).ID
	c := e.attempt(id)
	o := wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200, Latency: ms,
		Result: &wire.AttemptResult{Status: 200, Header: map[string][]string{"Content-Type": {"text/html"}}, Body: body}}
	if st := e.finish(id, c.Gen, o, FinishConfig{}); st != StateSucceeded {
		e.t.Fatalf("finish: %s, want succeeded", st)
	}
	return id
}

// TestResultStoredBinarySafe: a result's body costs Redis at most 1.05 × its
// size plus a fixed overhead, whatever its bytes — NUL-filled, HTML, random
// — at the largest max_result_bytes and at the default; GET gives the same
// bytes back (text when UTF-8, else base64). MEMORY USAGE of a record with
// the body less that of a twin whose answer had no body is the body's cost;
// the cost the JSON-escaped form had (before) is logged beside it.
func TestResultStoredBinarySafe(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = 1000, 100, 100 }))
	for _, n := range []int{maxResultBody, int(policy.MaxResultBytesDefault)} {
		for name, body := range hostileBodies(n) {
			tenant := fmt.Sprintf("%s-%d", name, n)
			with, without := e.finishHTTP(tenant, body), e.finishHTTP(tenant, nil)
			kw, _ := e.store.keys.job(with)
			ko, _ := e.store.keys.job(without)
			cost := e.memoryUsage(kw) - e.memoryUsage(ko)
			if limit := int64(float64(n)*1.05) + resultFixedOverhead; cost < int64(n-resultEncodingSlack) || cost > limit {
				t.Errorf("%s body of %d bytes costs Redis %d bytes, want %d … %d", name, n, cost, n-resultEncodingSlack, limit)
			}
			t.Logf("%s body of %d bytes: %d bytes of Redis (%.3f ×); JSON-escaped as before: %.3f ×",
				name, n, cost, float64(cost)/float64(n), float64(e.escapedCost(body))/float64(n))
			r := e.job(with).Result
			if r == nil || r.Truncated || r.TruncatedReason != "" || r.Headers["Content-Type"] != "text/html" {
				t.Fatalf("%s result %+v", name, r)
			}
			switch field, text := bodyField(body); {
			case field == "body" && (r.Body == nil || *r.Body != text || r.BodyBase64 != nil):
				t.Errorf("%s: the body did not come back as the same text", name)
			case field == "body_base64" && (r.BodyBase64 == nil || *r.BodyBase64 != text || r.Body != nil):
				t.Errorf("%s: the body did not come back as the same base64", name)
			}
			if r := e.job(without).Result; r == nil || r.Body != nil || r.BodyBase64 != nil || r.Status != 200 {
				t.Errorf("empty body: result %+v", r)
			}
		}
	}
}

// escapedCost is what body cost Redis as it was stored before: JSON in
// field result (the body escaped in it), measured on a scratch hash.
func (e *env) escapedCost(body []byte) int64 {
	e.t.Helper()
	key := e.prefix + ":scratch"
	defer e.rdb.Del(e.ctx, key)
	res := JobResult{Status: 200, Headers: map[string]string{}}
	switch field, text := bodyField(body); field {
	case "body":
		res.Body = &text
	case "body_base64":
		res.BodyBase64 = &text
	}
	old, _ := json.Marshal(res)
	e.rdb.HSet(e.ctx, key, "state", "succeeded", "result", old)
	return e.memoryUsage(key)
}

// TestResultReplacedDropsOldChunks: a shorter result after a longer one
// leaves none of the longer one's chunks behind, and an empty one none at
// all.
func TestResultReplacedDropsOldChunks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.enqueueOne("acme", Item{Type: wire.TypeHTTP, Body: []byte(`{"type":"http"}`)}).ID
	key, _ := e.store.keys.job(id)
	for _, size := range []int{3*resultChunk + 7, resultChunk, 10, 0} {
		c := e.attempt(id)
		body := bytes.Repeat([]byte{'x'}, size)
		o := wire.AttemptOutcome{Kind: wire.FinishRetry, Status: 503, Result: &wire.AttemptResult{Status: 503, Body: body}}
		e.finish(id, c.Gen, o, FinishConfig{})
		fields, err := e.rdb.HKeys(e.ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		chunks := 0
		for _, f := range fields {
			if _, err := strconv.Atoi(strings.TrimPrefix(f, "rb")); err == nil && strings.HasPrefix(f, "rb") {
				chunks++
			}
		}
		want := (size + resultChunk - 1) / resultChunk
		if chunks != want || (want == 0) != !e.rdb.HExists(e.ctx, key, "rbn").Val() {
			t.Errorf("body of %d bytes: %d chunk fields (rbn %q), want %d", size, chunks, e.rdb.HGet(e.ctx, key, "rbn").Val(), want)
		}
		r := e.job(id).Result
		if got := len(derefOr(r.Body)); got != size {
			t.Errorf("body of %d bytes read back as %d", size, got)
		}
	}
}

func derefOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestExcerptStoredBinarySafe: an excerpt that escapes badly (NUL bytes) is
// kept in the attempt log as base64 — 4/3 of its size, not 6 × — and shown
// as the text it is; one that escapes well stays text.
func TestExcerptStoredBinarySafe(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, excerpt := range []string{strings.Repeat("\x00", wire.MaxExcerptBytes), `{"ok":true,"path":"/a/b"}`} {
		id := e.enqueueOne("acme", Item{Type: wire.TypeHTTP, Body: []byte(`{"type":"http"}`)}).ID
		c := e.attempt(id)
		e.finish(id, c.Gen, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200, Excerpt: []byte(excerpt)}, FinishConfig{})
		key, _ := e.store.keys.job(id)
		if n := e.rdb.HStrLen(e.ctx, key, "log").Val(); n > int64(len(excerpt))*4/3+400 {
			t.Errorf("excerpt of %d bytes: log line of %d bytes, want at most 4/3 of it and the entry's fields", len(excerpt), n)
		}
		if a := e.job(id).Attempts; len(a) != 1 || a[0].Body != excerpt || a[0].BodyBase64 != "" {
			t.Errorf("excerpt %.20q: attempt log %+v, want it as text", excerpt, a)
		}
	}
}

// TestResultsAtMaxmemory: on a Redis near its maxmemory, results of 1 MiB
// NUL bodies are kept while they fit, then cut to the room left or dropped
// with truncated_reason storage_full; every finish succeeds and records
// its outcome, and used_memory never passes maxmemory. A Store whose mark
// (MemoryHighWater) is below the memory in use keeps no body at all.
func TestResultsAtMaxmemory(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewPrivate(t).Client(t)
	clock := &fakeClock{t: epoch}
	prefix := redistest.Prefix(t)
	st, err := NewStore(rdb, Config{Prefix: prefix, Shards: 1, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: t.Context(), rdb: rdb, prefix: prefix, store: st, clock: clock}
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency = 1000, 100, 100 }))
	const jobs = 20
	var rel []wire.Release
	for range jobs + 1 {
		e.enqueueOne("acme", Item{Type: wire.TypeHTTP, Body: []byte(`{"type":"http"}`)})
	}
	rel = e.passTenant("acme", time.Second, -1)
	if len(rel) != jobs+1 {
		t.Fatalf("released %d, want %d", len(rel), jobs+1)
	}
	used := redistest.UsedMemory(t, rdb)
	// Room for a few bodies: while a finish runs, its arguments count in
	// used_memory too (about 2.5 × the body: the query buffer and the
	// arguments), so a 1 MiB body needs about 3.5 MiB free to be kept.
	maxmemory := used + 8<<20
	if err := rdb.ConfigSet(e.ctx, "maxmemory", strconv.FormatInt(maxmemory, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, maxResultBody)
	var kept, cut, dropped int
	for i, r := range rel[:jobs] {
		e.claimAt(r)
		o := wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200, Latency: ms, Excerpt: body,
			Result: &wire.AttemptResult{Status: 200, Body: body}}
		if s := e.finish(r.ID, r.Gen, o, FinishConfig{}); s != StateSucceeded {
			t.Fatalf("finish %d: %s, want succeeded", i, s)
		}
		if u := redistest.UsedMemory(t, rdb); u > maxmemory {
			t.Fatalf("after finish %d used_memory %d > maxmemory %d", i, u, maxmemory)
		}
		res := e.job(r.ID).Result
		if res == nil || res.Status != 200 {
			t.Fatalf("finish %d: result %+v, want status 200 kept", i, res)
		}
		switch got := derefOr(res.Body); {
		case !res.Truncated && len(got) == len(body):
			kept++
		case res.Truncated && res.TruncatedReason == TruncatedStorageFull && got != "" && len(got) < len(body):
			cut++
		case res.Truncated && res.TruncatedReason == TruncatedStorageFull && got == "" && res.BodyBase64 == nil:
			dropped++
		default:
			t.Fatalf("finish %d: result of %d bytes, truncated %v (%q)", i, len(got), res.Truncated, res.TruncatedReason)
		}
		if strings.Trim(derefOr(res.Body), "\x00") != "" {
			t.Fatalf("finish %d: the kept body is not the start of the answer", i)
		}
	}
	t.Logf("maxmemory %d (used %d before): %d results kept, %d cut, %d dropped; used_memory at the end %d",
		maxmemory, used, kept, cut, dropped, redistest.UsedMemory(t, rdb))
	if kept == 0 || dropped == 0 || kept+cut > 8 {
		t.Errorf("%d kept, %d cut, %d dropped: want the first kept, the rest dropped once room ran out", kept, cut, dropped)
	}

	low, err := NewStore(rdb, Config{Prefix: prefix, Shards: 1, Clock: clock.Now, MemoryHighWater: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	last := rel[jobs]
	e.claimAt(last)
	o := wire.AttemptOutcome{Kind: wire.FinishRetry, Status: 503, Result: &wire.AttemptResult{Status: 503, Body: body[:8192]}}
	if s, err := low.Finish(e.ctx, last.ID, last.Gen, o, FinishConfig{}); err != nil || s != StateRetrying {
		t.Fatalf("finish above the mark: %s %v, want retrying", s, err)
	}
	if res := e.job(last.ID).Result; res == nil || res.Status != 503 || res.Body != nil || res.TruncatedReason != TruncatedStorageFull {
		t.Fatalf("result above the mark: %+v, want status 503 without a body, storage_full", res)
	}
}
