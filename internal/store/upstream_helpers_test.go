package store

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/upstream"
)

// putUpstream configures upstream name (PutUpstream) at one cost unit per
// interval (a whole number of µs dividing a minute) with burst; edit, when
// given, changes the configuration first.
func (e *env) putUpstream(name string, interval time.Duration, burst int64, edit ...func(*upstream.Config)) {
	e.t.Helper()
	rate, err := bucket.ParseRate(fmt.Sprintf("%d/m", time.Minute/interval))
	if err != nil || time.Minute%interval != 0 {
		e.t.Fatalf("interval %v: %v", interval, err)
	}
	cfg := upstream.Config{Rate: rate, Burst: burst}
	for _, f := range edit {
		f(&cfg)
	}
	if _, err := e.store.PutUpstream(e.ctx, name, cfg, quota.SourceAPI, ""); err != nil {
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
// result, and asks the coordinators for its demand, plain and aligned (the
// grants for the shard's next pass), as the dispatcher does.
func (e *env) upPass(shard int, grants []quota.UpstreamGrant) (PassResult, []quota.UpstreamGrant) {
	e.t.Helper()
	res, err := e.store.PassGranted(e.ctx, shard, PassConfig{Lead: grantLead, MinLead: -1,
		Grace: time.Hour, Capacity: -1}, grants)
	if err != nil {
		e.t.Fatalf("pass on shard %d: %v", shard, err)
	}
	if len(res.Demand) == 0 && len(res.Aligned) == 0 {
		return res, nil
	}
	if e.cals == nil {
		e.cals = map[int]quota.Calendars{}
	}
	if e.cals[shard] == nil {
		e.cals[shard] = quota.Calendars{}
	}
	next, err := e.store.AlignUpstreams(e.ctx, shard, res.Demand, res.Aligned, e.cals[shard], quota.GrantConfig{Horizon: grantLead})
	if err != nil {
		e.t.Fatalf("grant upstreams for shard %d: %v", shard, err)
	}
	return res, next
}
