package redistest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// onEveryNode runs a command on every node of admin (see ForEachNode).
func onEveryNode(ctx context.Context, admin redis.UniversalClient, args ...any) error {
	return ForEachNode(ctx, admin, func(ctx context.Context, c *redis.Client) error {
		return c.Do(ctx, args...).Err()
	})
}

// ForEachNode calls fn with a client of every node behind rdb — each master
// and replica of a Cluster (concurrently), or rdb itself (a single node or
// a Sentinel-managed primary) — and returns the first error.
func ForEachNode(ctx context.Context, rdb redis.UniversalClient, fn func(ctx context.Context, c *redis.Client) error) error {
	return eachOf(ctx, rdb, fn, (*redis.ClusterClient).ForEachShard)
}

// ForEachMaster is ForEachNode over the masters only: the nodes that hold
// the keys.
func ForEachMaster(ctx context.Context, rdb redis.UniversalClient, fn func(ctx context.Context, c *redis.Client) error) error {
	return eachOf(ctx, rdb, fn, (*redis.ClusterClient).ForEachMaster)
}

type forEach = func(*redis.ClusterClient, context.Context, func(context.Context, *redis.Client) error) error

func eachOf(ctx context.Context, rdb redis.UniversalClient, fn func(ctx context.Context, c *redis.Client) error, each forEach) error {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return each(c, ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	default:
		return fmt.Errorf("redistest: a %T is neither a Client nor a ClusterClient", rdb)
	}
}

// Keys returns the keys matching pattern on every master behind rdb (SCAN
// on each: a Cluster refuses KEYS and SCAN across the keyspace), sorted.
func Keys(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	var mu sync.Mutex
	var keys []string
	err := ForEachMaster(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		var found []string
		for iter.Next(ctx) {
			found = append(found, iter.Val())
		}
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, found...)
		return iter.Err()
	})
	slices.Sort(keys)
	return keys, err
}

// KillClients closes, on every node behind rdb, the client connections named
// name (CLIENT SETNAME, go-redis ClientName) — only those subscribed to a
// channel when subscribed is set — and returns how many it closed.
func KillClients(ctx context.Context, rdb redis.UniversalClient, name string, subscribed bool) (int, error) {
	var mu sync.Mutex
	killed := 0
	err := ForEachNode(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		list, err := c.ClientList(ctx).Result()
		if err != nil {
			return err
		}
		for line := range strings.Lines(list) {
			fields := map[string]string{}
			for _, kv := range strings.Fields(line) {
				k, v, _ := strings.Cut(kv, "=")
				fields[k] = v
			}
			if fields["name"] != name || (subscribed && (fields["sub"] == "0" || fields["sub"] == "")) {
				continue
			}
			if err := c.ClientKillByFilter(ctx, "ID", fields["id"]).Err(); err != nil {
				return fmt.Errorf("CLIENT KILL ID %s on %s: %w", fields["id"], c.Options().Addr, err)
			}
			mu.Lock()
			killed++
			mu.Unlock()
		}
		return nil
	})
	return killed, err
}
