package api

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/store"
)

// UpstreamCacheDefault is Options.UpstreamCache's default.
const UpstreamCacheDefault = time.Second

// upstreamCacheMaxTenants bounds the tenants whose default upstreams one
// process remembers; past it the memory starts afresh.
const upstreamCacheMaxTenants = 10_000

// upstreamSettings is the process's view of the registered upstreams for
// enqueue's checks (422 unknown_upstream, 422 cost_exceeds_upstream_burst):
// each named upstream's settings (quota.UpstreamCache), read at most once
// per Options.UpstreamCache; a name not registered is read again at every
// use (RecheckMissing), so an upstream another process created is accepted
// at once, and one deleted is refused within the TTL.
func newUpstreamSettings(st *store.Store, ttl time.Duration) *quota.UpstreamCache {
	c := quota.NewUpstreamCache(st.UpstreamSettings, ttl)
	c.RecheckMissing = true
	return c
}

// policyUpstreams remembers each tenant's default upstreams (its effective
// policy's `upstreams`, store.TenantPolicy) for ttl, so that enqueues
// without "upstreams" cost one policy read per tenant and ttl: a changed
// default applies to enqueues within ttl. Safe for concurrent use.
type policyUpstreams struct {
	store *store.Store
	ttl   time.Duration
	clock func() time.Time

	mu       sync.Mutex
	byTenant map[string]tenantUpstreams
}

type tenantUpstreams struct {
	names []string // nil: none
	read  time.Time
}

// of returns tenant's default upstreams (nil: none).
func (p *policyUpstreams) of(ctx context.Context, tenant string) ([]string, error) {
	now := p.clock()
	p.mu.Lock()
	e, ok := p.byTenant[tenant]
	p.mu.Unlock()
	if ok && now.Sub(e.read) < p.ttl {
		return e.names, nil
	}
	rec, err := p.store.TenantPolicy(ctx, tenant)
	if err != nil {
		return nil, err
	}
	names := slices.Clone([]string(rec.Effective.Upstreams))
	p.mu.Lock()
	if p.byTenant == nil || len(p.byTenant) >= upstreamCacheMaxTenants {
		p.byTenant = map[string]tenantUpstreams{}
	}
	p.byTenant[tenant] = tenantUpstreams{names: names, read: now}
	p.mu.Unlock()
	return names, nil
}
