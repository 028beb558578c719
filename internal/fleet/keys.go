package fleet

// Key layout (docs/design.md §3). The roster's keys are plain, not
// slot-tagged: one of each for all shards.
//
//	<p>:workers                    HASH   worker id → "<concurrency> <expiry µs>"
//	<p>:mw:<queue>                 HASH   middleware instance → "<concurrency> <expiry µs> <tci µs>"
//
// The Go functions below are the only place Go code builds these names;
// the scripts get them in KEYS.
type keyspace struct {
	prefix string
}

// workers is the workers' heartbeat hash, one for all shards.
func (k keyspace) workers() string { return k.prefix + ":workers" }

// taskWorkers is the heartbeat hash of the sluicetask middleware instances
// serving task queue queue (docs/design.md §2.5), one for all shards.
func (k keyspace) taskWorkers(queue string) string { return k.prefix + ":mw:" + queue }

// WorkersKey is the workers' heartbeat hash, for tools and tests that
// locate it (a Cluster's master of its slot).
func (f *Roster) WorkersKey() string { return f.keys.workers() }
