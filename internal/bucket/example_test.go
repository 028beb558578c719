package bucket_test

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/redistest"
)

func ExampleLimiter() {
	rdb := redis.NewUniversalClient(redistest.Options())
	defer rdb.Close()

	// 5 requests per second with bursts of 10, per API key.
	limit := bucket.Limit{Algorithm: bucket.GCRA, Rate: bucket.Rate{Tokens: 5, Per: time.Second}, Burst: 10}
	prefix := "example-" + strconv.FormatInt(time.Now().UnixNano(), 36) // fresh keys on every run
	lim, err := bucket.NewLimiter(rdb, prefix, "api", limit)
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	// Production code calls lim.Allow(ctx, key, cost), on Redis' clock; a
	// fake clock keeps this example's output stable.
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, cost := range []int64{4, 6, 1} {
		d, err := lim.AllowAt(ctx, "key-123", cost, now)
		if err != nil {
			panic(err)
		}
		fmt.Printf("cost %d: allowed=%v remaining=%d retry after %v, full in %v\n",
			cost, d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter)
	}
	// Output:
	// cost 4: allowed=true remaining=6 retry after 0s, full in 800ms
	// cost 6: allowed=true remaining=0 retry after 0s, full in 2s
	// cost 1: allowed=false remaining=0 retry after 200ms, full in 2s
}
