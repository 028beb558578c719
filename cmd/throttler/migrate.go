package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/migrate"
)

// migrateUsage is the migrate subcommand's synopsis.
const migrateUsage = "usage: throttler migrate --from URL [--config PATH] [--dry-run]"

// runMigrate is `throttler migrate`: the offline copy of a stopped
// deployment from the Redis at --from to the Redis the configuration names
// (internal/migrate). The prefix is the configuration's.
func runMigrate(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	from := fs.String("from", "", "the source Redis: a URL in any of redis.url's forms")
	path := fs.String("config", "", "YAML configuration naming the target Redis and the prefix")
	dry := fs.Bool("dry-run", false, "check both sides and count the keys; write nothing")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("migrate: parse flags: %w (%s)", err, migrateUsage)
	}
	if *from == "" || fs.NArg() > 0 {
		return fmt.Errorf("migrate: --from is required and takes no other argument (%s)", migrateUsage)
	}
	if *path == "" && getenv != nil {
		*path = getenv(config.EnvConfig)
	}
	cfg, err := config.Load(*path, getenv)
	if err != nil {
		return err
	}
	src, err := config.RedisConfig{URL: *from}.Client()
	if err != nil {
		return fmt.Errorf("migrate: --from: %w", err)
	}
	defer src.Close()
	dst, err := cfg.Redis.Client()
	if err != nil {
		return err
	}
	defer dst.Close()
	rep, err := migrate.Copy(ctx, src, dst, cfg.Redis.Prefix, migrate.Options{DryRun: *dry})
	if err != nil {
		return err
	}
	verb := "copied"
	if *dry {
		verb = "would copy"
	}
	fmt.Fprintf(out, "migrate: %s %d keys of prefix %q (%d shards):", verb, rep.Keys, cfg.Redis.Prefix, rep.Meta.Shards)
	for _, k := range slices.Sorted(maps.Keys(rep.ByKind)) {
		fmt.Fprintf(out, " %s %d", k, rep.ByKind[k])
	}
	fmt.Fprintf(out, "; left behind %d (heartbeats, leases, expired); %d jobs were handed off and return by the sweep after their lease\n",
		rep.Skipped, rep.Leased)
	return nil
}
