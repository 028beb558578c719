package policy_test

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/policy"
)

func ExampleResolve() {
	defaults, _ := policy.DecodeJSON(strings.NewReader(`{"rate": "20/s", "burst": 2}`))
	tenant, _ := policy.DecodeJSON(strings.NewReader(`{"burst": 5, "retry": {"max_attempts": 3}}`))
	p := policy.Resolve(defaults, tenant)
	fmt.Println(p.Rate, p.Burst, p.Retry.MaxAttempts, p.Concurrency, p.MaxCost())
	// Output: 20/s 5 3 10 5
}
