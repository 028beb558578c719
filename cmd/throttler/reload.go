package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/api"
	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/store"
)

// reloader re-reads the configuration file and applies it to the running
// throttler (SIGHUP, POST /v1/admin/reload): the API keys, the tenants'
// policies and the defaults, the upstreams, the limits and which tenants
// the file signs for. A file with any problem — one Load reports, or a
// change outside config.Reloadable — is refused as a whole: every problem
// logged and returned, the running configuration kept. Workers follow the
// policies and upstreams through Redis; they read the file's webhook
// secrets themselves and take a changed file on their own SIGHUP.
type reloader struct {
	args    []string
	getenv  func(string) string
	log     *slog.Logger
	rdb     redis.UniversalClient
	batcher *bucket.Batcher
	st      *store.Store
	srv     *api.Server

	mu  sync.Mutex // one reload at a time
	cfg *config.Config
}

// reload reads the file and applies what changed; see reloader.
func (rl *reloader) reload(ctx context.Context) ([]string, error) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	next, err := config.FromFlags(rl.args, rl.getenv)
	var problems []string
	if err != nil {
		problems = config.Problems(err)
	} else {
		problems = config.RestartOnly(rl.cfg, next)
	}
	if len(problems) == 0 {
		if problems, err = rl.keyNameClashes(ctx, next); err != nil {
			return nil, err
		}
	}
	if len(problems) > 0 {
		for _, p := range problems {
			rl.log.Error("configuration reload refused; the running configuration is kept", "problem", p)
		}
		return nil, &api.ReloadRefusedError{Problems: problems}
	}
	changes := config.Changes(rl.cfg, next)
	if len(changes) == 0 {
		rl.log.Info("configuration reloaded: no change")
		return nil, nil
	}
	if err := rl.apply(ctx, next); err != nil {
		rl.log.Error("configuration reload failed part way; reload again once Redis answers", "err", err)
		return nil, err
	}
	rl.cfg = next
	for _, c := range changes {
		rl.log.Info("configuration reloaded", "change", c)
	}
	return changes, nil
}

// keyNameClashes lists the file's keys named like a key by API: a name
// is unique among both.
func (rl *reloader) keyNameClashes(ctx context.Context, next *config.Config) ([]string, error) {
	byAPI, _, err := rl.st.APIKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for i, k := range next.Auth.Keys {
		if slices.ContainsFunc(byAPI, func(a store.APIKey) bool { return a.Name == k.Name }) {
			out = append(out, fmt.Sprintf("auth.keys[%d].name: a key by API is called %q; delete it (DELETE /v1/keys/%s) or rename this one", i, k.Name, k.Name))
		}
	}
	return out, nil
}

// apply writes next's policies and upstreams to Redis as the start does
// (store.SeedPolicies, store.SeedUpstreams), except that a tenant or an
// upstream whose entry changed in the file takes the file's even when the
// API changed it since (the file's edit is the newer intent); then it
// swaps the API's reloadable options.
func (rl *reloader) apply(ctx context.Context, next *config.Config) error {
	opts, err := apiOptions(next, rl.rdb, rl.batcher, nil, rl.log)
	if err != nil {
		return err
	}
	for _, tenant := range config.ChangedKeys(rl.cfg.Tenants, next.Tenants) {
		if _, err := rl.st.PutTenantPolicy(ctx, tenant, store.OverridesOf(next.Tenants[tenant]), store.AnyVersion); err != nil {
			return fmt.Errorf("apply the policy of tenant %q: %w", tenant, err)
		}
	}
	if err := rl.st.SeedPolicies(ctx, next.Defaults, next.Tenants, rl.log); err != nil {
		return err
	}
	for _, name := range config.ChangedKeys(rl.cfg.Upstreams, next.Upstreams) {
		if _, err := rl.st.PutUpstream(ctx, name, next.Upstreams[name], quota.SourceConfig, ""); err != nil {
			return fmt.Errorf("apply upstream %q: %w", name, err)
		}
	}
	if err := rl.st.SeedUpstreams(ctx, next.Upstreams, rl.log); err != nil {
		return err
	}
	rl.srv.Reload(reloadableOf(opts))
	return nil
}

// reloadableOf is the reloadable part of opts.
func reloadableOf(opts api.Options) api.Reloadable {
	return api.Reloadable{Keys: opts.Keys, APILimiter: opts.APILimiter, APILimit: opts.APILimit, APIFailOpen: opts.APIFailOpen,
		APICosts: opts.APICosts, Limits: opts.Limits, Defaults: opts.Defaults, FileSigned: opts.FileSigned}
}
