package store

import (
	"fmt"
	"time"
)

// putUpstream configures upstream name at one cost unit per interval with
// burst, writing the documented hash fields (p: the scripts' integers as
// JSON, v: the version) as H-upapi's PutUpstream does; scope 1 is
// pause_scope upstream.
func (e *env) putUpstream(name string, interval time.Duration, burst int64) {
	e.t.Helper()
	p := fmt.Sprintf(`{"iv":%d,"b":%d,"c":0,"a":0,"s":0}`, interval.Microseconds(), burst)
	if err := e.rdb.HSet(e.ctx, e.store.keys.upstreamHash(name), "p", p, "v", 1).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// upItem is a webhook job naming upstreams.
func upItem(body string, upstreams ...string) Item {
	it := item(body)
	it.Upstreams = upstreams
	return it
}

// grantLead is the lead (D) and horizon (H) the upstream tests pass with.
const grantLead = 100 * time.Millisecond

// upPass runs one pass of shard with the grants handed to it, returns its
// result, and asks the coordinators for its demand (the grants for the
// shard's next pass), as the dispatcher does.
func (e *env) upPass(shard int, grants []UpstreamGrant) (PassResult, []UpstreamGrant) {
	e.t.Helper()
	res, err := e.store.PassGranted(e.ctx, shard, PassConfig{Lead: grantLead, MinLead: -1,
		Grace: time.Hour, Capacity: -1}, grants)
	if err != nil {
		e.t.Fatalf("pass on shard %d: %v", shard, err)
	}
	if len(res.Demand) == 0 {
		return res, nil
	}
	next, err := e.store.GrantUpstreams(e.ctx, shard, res.Demand, GrantConfig{Horizon: grantLead})
	if err != nil {
		e.t.Fatalf("grant upstreams for shard %d: %v", shard, err)
	}
	return res, next
}
