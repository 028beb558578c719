package main

import (
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/policy"
)

// fileSecrets serves the configuration file's webhook secrets to the
// signing keys (worker.SigningKeys.File) and swaps them when the file is
// reloaded. Everything else a worker takes from the file it follows
// through Redis (policies, upstreams, the settings of <prefix>:meta) or
// keeps until a restart.
type fileSecrets struct {
	keys    atomic.Pointer[func(tenant string) [][]byte]
	running *config.Config // read and written by the reload loop only
}

func newFileSecrets(cfg *config.Config) (*fileSecrets, error) {
	keys, _, err := policy.SigningKeys(cfg.Defaults, cfg.Tenants)
	if err != nil {
		return nil, err
	}
	f := &fileSecrets{running: cfg}
	f.keys.Store(&keys)
	return f, nil
}

// File is the tenant's secrets in the file last read.
func (f *fileSecrets) File(tenant string) [][]byte { return (*f.keys.Load())(tenant) }

// reload re-reads the file (parseFlags with args and getenv) and swaps its
// webhook secrets in; a file with problems is refused as a whole, each
// problem logged, the running secrets kept. It logs which tenants'
// secrets changed (never a secret) and, as a warning, the other sections
// that changed: the worker follows them through Redis or at a restart.
func (f *fileSecrets) reload(args []string, getenv func(string) string, log *slog.Logger) {
	next, _, err := parseFlags(args, getenv)
	var keys func(string) [][]byte
	if err == nil {
		keys, _, err = policy.SigningKeys(next.Defaults, next.Tenants)
	}
	if err != nil {
		for _, p := range config.Problems(err) {
			log.Error("configuration reload refused; the running webhook secrets are kept", "problem", p)
		}
		return
	}
	changed, rest := secretChanges(f.running, next), config.RestartOnly(f.running, next)
	f.keys.Store(&keys)
	f.running = next
	for _, c := range changed {
		log.Info("configuration reloaded", "change", c)
	}
	if len(changed) == 0 {
		log.Info("configuration reloaded: no webhook secret changed")
	}
	if len(rest) > 0 || len(config.Changes(f.running, next)) > 0 {
		log.Warn("a worker takes only webhook secrets from a reloaded file; the throttler's reload applies the rest through Redis")
	}
}

// secretChanges names the webhook secrets lists that differ, never a value.
func secretChanges(running, next *config.Config) []string {
	var out []string
	if !reflect.DeepEqual(running.Defaults.WebhookSecrets, next.Defaults.WebhookSecrets) {
		out = append(out, "defaults.webhook_secrets: changed")
	}
	tenants := maps.Clone(running.Tenants)
	maps.Copy(tenants, next.Tenants)
	for _, t := range slices.Sorted(maps.Keys(tenants)) {
		if !reflect.DeepEqual(running.Tenants[t].WebhookSecrets, next.Tenants[t].WebhookSecrets) {
			out = append(out, "tenants."+t+".webhook_secrets: changed")
		}
	}
	return out
}
