package store

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// HashListpackValueWant is the Redis setting hash-max-listpack-value a
// deployment should have (docs/operations.md, Sizing): a hash whose values
// are all at most this many bytes is one compact listpack, else a table
// with an entry, two strings and their allocator rounding per field. Below
// it a job record holding a body of up to about 1.9 KiB, and every tenant
// hash (its packed state is up to 304 bytes), stay listpacks: a queued job with
// a 1 KiB body costs about 1.4 KB of Redis instead of 1.9 KB (bench/dispatch
// part million). Redis's default is 64.
const HashListpackValueWant = 2048

// LowHashListpack reads hash-max-listpack-value on every master behind rdb
// and returns the masters below HashListpackValueWant, each as
// "<address>: <value>" ("" for the address of a plain client). An error
// means a master did not answer CONFIG GET (a managed Redis may refuse it):
// nothing is known then.
func LowHashListpack(ctx context.Context, rdb redis.UniversalClient) ([]string, error) {
	var (
		mu  sync.Mutex
		low []string
	)
	err := redisscript.ForEachMaster(ctx, rdb, func(ctx context.Context, c redis.UniversalClient) error {
		kv, err := c.ConfigGet(ctx, "hash-max-listpack-value").Result()
		if err != nil {
			return fmt.Errorf("config get hash-max-listpack-value: %w", err)
		}
		v, err := strconv.Atoi(kv["hash-max-listpack-value"])
		if err != nil {
			return fmt.Errorf("config get hash-max-listpack-value: %q: %w", kv["hash-max-listpack-value"], err)
		}
		if v < HashListpackValueWant {
			addr := ""
			if n, ok := c.(*redis.Client); ok {
				addr = n.Options().Addr
			}
			mu.Lock()
			low = append(low, fmt.Sprintf("%s: %d", addr, v))
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return low, nil
}
