package worker

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/webhook"
	"github.com/sluicehq/sluice/internal/wire"
)

// PolicyReader reads a tenant's stored policy: *store.Store.
type PolicyReader interface {
	TenantPolicy(ctx context.Context, tenant string) (store.PolicyRecord, error)
	SettingsVersions
}

var _ PolicyReader = (*store.Store)(nil)

// ResultRefreshDefault is ResultSettings.Refresh's default: a changed
// result_headers or max_result_bytes applies within a second.
const ResultRefreshDefault = time.Second

// ResultSettings gives each tenant's result settings (policy
// max_result_bytes and result_headers), read from Redis again (one HMGET;
// concurrent callers share it) only when its shard's settings version moved
// (store.SettingsVersion, read at most once per Refresh/2 per shard, as
// SigningKeys does), so a change applies within Refresh. A read that fails
// keeps the last values (the built-in defaults before the first). Safe for
// concurrent use; the zero value (and nil) gives the built-in defaults.
type ResultSettings struct {
	// Store reads the policy; nil: the defaults.
	Store PolicyReader
	// Refresh is how long one read is used; default ResultRefreshDefault.
	Refresh time.Duration

	cache    tenantCache[resultEntry]
	versions shardVersions
}

// resultEntry is one tenant's last read; mu serialises its refresh.
type resultEntry struct {
	mu sync.Mutex
	versioned
	maxBytes int
	headers  []string
}

// Of returns tenant's max_result_bytes and result_headers.
func (r *ResultSettings) Of(ctx context.Context, tenant string) (maxBytes int, headers []string) {
	def := policy.Builtin()
	if r == nil || r.Store == nil {
		return int(def.MaxResultBytes), def.ResultHeaders
	}
	e := r.cache.entry(tenant)
	e.mu.Lock()
	defer e.mu.Unlock()
	refresh := r.Refresh
	if refresh <= 0 {
		refresh = ResultRefreshDefault
	}
	now, half := time.Now(), refresh/2
	if !e.due(now, half) {
		return e.maxBytes, e.headers
	}
	if e.read.IsZero() {
		e.maxBytes, e.headers = int(def.MaxResultBytes), def.ResultHeaders
	}
	version, _ := r.versions.of(ctx, r.Store, tenant, now, half) // "" on an error: read the policy
	if e.moved(version) {
		e.version = ""
		if rec, err := r.Store.TenantPolicy(ctx, tenant); err == nil {
			e.maxBytes, e.headers = int(rec.Effective.MaxResultBytes), rec.Effective.ResultHeaders
			e.version = version
		}
	}
	e.read = now
	return e.maxBytes, e.headers
}

// attemptResult is what an http job keeps of res: its status, the headers
// allow allows, and at most maxBytes of its body; nil when no response
// arrived.
func attemptResult(res webhook.Result, maxBytes int, allow []string) *wire.AttemptResult {
	if res.Status == 0 {
		return nil
	}
	out := &wire.AttemptResult{Status: res.Status, Header: make(map[string][]string), Body: res.Body,
		Truncated: res.Truncated, Cut: res.Cut}
	if len(out.Body) > maxBytes {
		out.Body, out.Truncated = out.Body[:maxBytes], true
	}
	for name, vals := range res.Header {
		if policy.ResultHeaderAllowed(allow, name) {
			out.Header[http.CanonicalHeaderKey(name)] = vals
		}
	}
	return out
}
