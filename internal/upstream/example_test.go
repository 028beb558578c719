package upstream_test

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/upstream"
)

// A PUT body read, defaults applied and checked, then the integers the
// store's scripts take.
func ExampleConfig_Params() {
	cfg, err := upstream.DecodeJSON(strings.NewReader(`{"rate":"100/s","burst":10,"pause_scope":"upstream"}`))
	if err != nil {
		panic(err)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	p, _ := json.Marshal(cfg.Params())
	v, _ := json.Marshal(cfg.View())
	fmt.Println(string(p))
	fmt.Println(string(v))
	// Output:
	// {"iv":10000,"b":10,"c":0,"a":0,"s":1}
	// {"rate":"100/s","burst":10,"concurrency":0,"adaptive":false,"pause_scope":"upstream","cost_header":"","pacing":"headers"}
}

// Validate lists every problem at once, each naming its field.
func ExampleConfig_Validate() {
	err := upstream.Config{Burst: -1, PauseScope: "everyone", Pacing: "slow"}.Validate()
	fmt.Println(err)
	// Output:
	// rate: must be set (N/s, N/m or N/h)
	// burst: must be 1 … 1000000, got -1
	// pause_scope: must be "tenant" or "upstream", got "everyone"
	// pacing: must be "headers" or "off", got "slow"
}

// The upstreams a job names: one problem per item.
func ExampleCheckNames() {
	for _, fe := range upstream.CheckNames([]string{"sms", "llm:eu", "sms"}) {
		fmt.Println(fe)
	}
	// Output:
	// upstreams[1]: invalid upstream name: byte 3 is not one of [A-Za-z0-9._@-]
	// upstreams[2]: "sms" is named twice (also upstreams[0])
}
