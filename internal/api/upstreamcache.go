package api

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/store"
)

// UpstreamCacheDefault is Options.UpstreamCache's default.
const UpstreamCacheDefault = time.Second

// upstreamCacheMaxTenants bounds the tenants whose default upstreams one
// process remembers; past it the memory starts afresh.
const upstreamCacheMaxTenants = 10_000

// upstreamRegistry is the process's view of the registered upstream names
// for enqueue's check (422 unknown_upstream): the whole listing, read at
// most once per ttl; a name missing from it is looked up in its own hash
// before it is refused, so an upstream created by another process is
// accepted at once. Safe for concurrent use.
type upstreamRegistry struct {
	store *store.Store
	ttl   time.Duration
	clock func() time.Time

	mu    sync.Mutex      // held while reading the listing, so concurrent enqueues share one read
	names map[string]bool // nil until read
	read  time.Time       // zero: never read
}

// unknown returns those of names that are not registered, in their order;
// nil when every one is.
func (u *upstreamRegistry) unknown(ctx context.Context, names []string) ([]string, error) {
	missing, err := u.missing(ctx, names)
	if err != nil || len(missing) == 0 {
		return nil, err
	}
	// A miss is read again before it refuses (outside the lock: a job naming
	// unknown upstreams does not hold up the others).
	unknown, err := u.store.UnknownUpstreams(ctx, missing)
	if err != nil {
		return nil, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, n := range missing {
		if !slices.Contains(unknown, n) {
			u.names[n] = true
		}
	}
	return unknown, nil
}

// missing returns those of names the cached listing lacks, reading the
// listing first when it is older than ttl.
func (u *upstreamRegistry) missing(ctx context.Context, names []string) ([]string, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if now := u.clock(); u.read.IsZero() || now.Sub(u.read) >= u.ttl {
		all, err := u.readAll(ctx)
		if err != nil {
			return nil, err
		}
		u.names, u.read = all, now
	}
	var missing []string
	for _, n := range names {
		if !u.names[n] {
			missing = append(missing, n)
		}
	}
	return missing, nil
}

// readAll reads the whole listing, a page at a time.
func (u *upstreamRegistry) readAll(ctx context.Context) (map[string]bool, error) {
	all := map[string]bool{}
	after := ""
	for {
		page, err := u.store.UpstreamNames(ctx, after, store.MaxUpstreamNames)
		if err != nil {
			return nil, err
		}
		for _, n := range page {
			all[n] = true
		}
		if len(page) < store.MaxUpstreamNames {
			return all, nil
		}
		after = page[len(page)-1]
	}
}

// learn records that name is registered (after this process's PUT).
func (u *upstreamRegistry) learn(name string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.names != nil {
		u.names[name] = true
	}
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
