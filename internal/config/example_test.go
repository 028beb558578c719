package config_test

import (
	"fmt"
	"os"

	"github.com/sluicehq/sluice/internal/config"
)

func ExampleFromFlags() {
	// What a binary does: os.Args[1:] and os.Getenv. Here: no --config, no
	// $SLUICE_CONFIG, so the defaults apply; $SLUICE_LISTEN overrides one.
	getenv := func(k string) string {
		if k == config.EnvListen {
			return "127.0.0.1:9000"
		}
		return ""
	}
	cfg, err := config.FromFlags([]string{}, getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	api := cfg.Limits[config.APILimitName]
	fmt.Println(cfg.Listen, cfg.Redis.URL, cfg.Redis.Shards)
	fmt.Println(api.Algorithm, api.Limit, api.Window, api.FailsOpen())
	// Output:
	// 127.0.0.1:9000 redis://127.0.0.1:6379/0 16
	// sliding_window 1000 1m0s true
}
