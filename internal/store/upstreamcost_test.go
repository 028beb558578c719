package store

import (
	"slices"
	"testing"
)

// A claim tells the worker the job's reserved cost and its upstreams (record
// field ups, written by enqueue), which cost correction needs.
func TestClaimCarriesCostAndUpstreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.Burst = 5 }))
	r := e.enqueueOne("acme", Item{Type: "webhook", Body: []byte(`{}`), Cost: 4})
	key, err := e.store.keys.job(r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.HSet(e.ctx, key, "ups", "llm,sms-7").Err(); err != nil {
		t.Fatal(err)
	}
	rel, ok := e.pop("acme", 100*ms)
	if !ok {
		t.Fatal("nothing released")
	}
	j := e.claimAt(rel)
	if j.Cost != 4 || !slices.Equal(j.Upstreams, []string{"llm", "sms-7"}) {
		t.Fatalf("claimed cost %d, upstreams %q; want 4, [llm sms-7]", j.Cost, j.Upstreams)
	}
}
