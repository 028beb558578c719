package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/store"
)

// aggregatesUsage is the rebuild-aggregates subcommand's synopsis.
const aggregatesUsage = "usage: throttler rebuild-aggregates [--config PATH]"

// runRebuildAggregates is `throttler rebuild-aggregates`: every shard's
// observation aggregates built anew from its tenants
// (store.RebuildAggregates), for aggregates a process of a release before
// them changed during a rolling upgrade. One script a shard, a few Redis
// commands a tenant; safe while the deployment runs.
func runRebuildAggregates(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("rebuild-aggregates", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	path := fs.String("config", "", "YAML configuration naming the Redis and the prefix")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("rebuild-aggregates: parse flags: %w (%s)", err, aggregatesUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("rebuild-aggregates: takes no argument (%s)", aggregatesUsage)
	}
	if *path == "" && getenv != nil {
		*path = getenv(config.EnvConfig)
	}
	cfg, err := config.Load(*path, getenv)
	if err != nil {
		return err
	}
	rdb, err := cfg.Redis.Client()
	if err != nil {
		return err
	}
	defer rdb.Close()
	st, err := store.NewStore(rdb, storeConfig(cfg))
	if err != nil {
		return err
	}
	if err := st.RebuildAggregates(ctx); err != nil {
		return err
	}
	obs, err := st.Observe(ctx, store.ObserveOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "rebuild-aggregates: %d shards: %d tenants, backlog %d, running %d, dead letters %d\n",
		st.Shards(), obs.Tenants, obs.Backlog, obs.Running, obs.DeadLetters)
	return nil
}
