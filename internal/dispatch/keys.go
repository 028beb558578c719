package dispatch

import (
	"strconv"

	"github.com/sluicehq/sluice/internal/store"
)

// Keys and channels this package uses (docs/design.md §3); the functions below are
// the only place this package builds their names. The lease and members
// keys have no hash tag: single-key scripts, fine in any Cluster slot.
//
//	<p>:meta                     HASH    the deployment's fixed parameters (wire.MetaKey)
//	<p>:dispatch:lease:<shard>   STRING  owner token of the shard's dispatcher, with a TTL
//	<p>:dispatch:members         HASH    owner token → expiry (ms): the dispatchers sharing
//	                                     the leases; each holds at most ⌈shards / members⌉
//	<p>:{s<shard>}:wake          channel the shard's new earliest time (µs), published by
//	                                     every script that moves it earlier (store.WakeChannel)
//	asynq:{<queue>}:<state>      LIST/ZSET asynq's own per-queue keys, read by the state
//	                                     metrics (wire.AsynqQueueKey)

// LeaseKey is shard's lease: <p>:dispatch:lease:<shard>.
func LeaseKey(prefix string, shard int) string {
	return prefix + ":dispatch:lease:" + strconv.Itoa(shard)
}

// membersKey is the dispatchers' membership hash: <p>:dispatch:members.
func membersKey(prefix string) string { return prefix + ":dispatch:members" }

// wakeChannel is shard's wake channel, the store's (store.WakeChannel): the
// dispatcher must subscribe to the very channel the scripts publish on.
func wakeChannel(prefix string, shard int) string { return store.WakeChannel(prefix, shard) }
