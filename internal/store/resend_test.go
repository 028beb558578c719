package store

import (
	"testing"
	"time"
)

// TestEnqueueSentTwiceStoresOnce: go-redis re-sends a command whose
// connection broke before its reply (a cut, a failover), so enqueue.lua may
// run twice with the same arguments — the first run's jobs stored, its
// reply lost. The second run stores nothing again: each job the first run
// stored answers accepted under its id, as stored; an item the first run
// refused is decided afresh (here admitted, its token having come since).
func TestEnqueueSentTwiceStoresOnce(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 2)
	e.seed(params(func(p *Params) { p.AdmitUS, p.AdmitBurst = 1_000_000, 2 }))
	shard := e.store.keys.shardOf("t")
	items := []Item{item(`{"n":1}`), item(`{"n":2}`), item(`{"n":3}`)}
	args, err := e.store.enqueueArgs("t", shard, items)
	if err != nil {
		t.Fatal(err)
	}
	send := func() ([]Result, error) { // one script call, as go-redis would send it again
		r := &enqueueReq{args: args, n: len(items)}
		err := e.store.enqueueCall(e.ctx, shard, []*enqueueReq{r})
		return r.res, err
	}

	first, err := send()
	if err != nil {
		t.Fatal(err)
	}
	if first[0].Outcome != Accepted || first[1].Outcome != Accepted || first[2].Outcome != Refused {
		t.Fatalf("first run: %+v; want two accepted and the third refused (admit burst 2)", first)
	}
	before := e.state("t")

	// The same call again (its reply lost), before any token came back.
	again, err := send()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if again[i].Outcome != Accepted || again[i].ID != first[i].ID || again[i].State != StateQueued || !again[i].ETA.Equal(first[i].ETA) {
			t.Fatalf("item %d sent again: %+v; want accepted as the first run stored it, %+v", i, again[i], first[i])
		}
	}
	if again[2].Outcome != Refused || again[2].Code != first[2].Code {
		t.Fatalf("item 3 sent again: %+v; want refused as before (%s)", again[2], first[2].Code)
	}
	if st := e.state("t"); st.Backlog != 2 || st.Queued != 2 || st.QueuedCost != 2 || st.AdmitTokens != before.AdmitTokens {
		t.Fatalf("after the re-send: backlog %d, queued %d (%d tokens), %d admission tokens; want 2, 2 (2), %d as before",
			st.Backlog, st.Queued, st.QueuedCost, st.AdmitTokens, before.AdmitTokens)
	}

	// Once a token has come, the refused item is admitted by a re-send;
	// the stored ones are still not stored again.
	e.clock.Advance(time.Second)
	third, err := send()
	if err != nil {
		t.Fatal(err)
	}
	if third[2].Outcome != Accepted || third[0].ID != first[0].ID || third[1].ID != first[1].ID {
		t.Fatalf("a re-send after a token came: %+v; want the first two as stored and the third accepted", third)
	}
	if st := e.state("t"); st.Backlog != 3 || st.Queued != 3 {
		t.Fatalf("backlog %d, queued %d; want 3 jobs, each stored once", st.Backlog, st.Queued)
	}
	n, err := e.rdb.LLen(e.ctx, e.store.keys.tenant("t")+":q").Result()
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("the tenant's backlog list holds %d ids, want 3", n)
	}
}
