package policy_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
)

func ExampleRetry_Backoff() {
	r := policy.Retry{MinBackoff: 10 * time.Second, MaxBackoff: 300 * time.Second, MaxDoublings: 3}
	for attempt := 1; attempt <= 8; attempt++ {
		fmt.Print(r.Backoff(attempt), " ")
	}
	fmt.Println()
	// Output: 10s 20s 40s 1m20s 2m40s 4m0s 5m0s 5m0s
}

func ExampleResolve() {
	defaults, _ := policy.DecodeJSON(strings.NewReader(`{"rate": "20/s", "burst": 2}`))
	tenant, _ := policy.DecodeJSON(strings.NewReader(`{"burst": 5, "retry": {"max_attempts": 3}}`))
	p := policy.Resolve(defaults, tenant)
	fmt.Println(p.Rate, p.Burst, p.Retry.MaxAttempts, p.Concurrency, p.MaxCost())
	// Output: 20/s 5 3 10 5
}
