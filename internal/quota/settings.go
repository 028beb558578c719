package quota

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/upstream"
)

// UpstreamSettings is what enqueue and the workers need of one registered
// upstream: its scripts' integers (field p: burst, concurrency, scope,
// adaptive) and its cost_header (from field cfg).
type UpstreamSettings struct {
	// Found is false when the upstream is not registered (no field p); the
	// other fields are then zero.
	Found      bool
	Params     upstream.Params
	CostHeader string
}

// UpstreamSettings reads the settings of each of names, in order: one
// pipelined HMGET p cfg per upstream (each in its own slot). An upstream
// without a record has Found false. A bad name is ErrInvalid; a field p or
// cfg that is not what the registry writes is ErrProtocol.
func (q *Registry) UpstreamSettings(ctx context.Context, names []string) ([]UpstreamSettings, error) {
	for _, name := range names {
		if err := CheckName(name); err != nil {
			return nil, fmt.Errorf("read upstream settings: %w", err)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.SliceCmd, len(names))
	_, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, name := range names {
			cmds[i] = p.HMGet(ctx, q.keys.upstream(name), "p", "cfg")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read upstream settings of %v: %w", names, err)
	}
	out := make([]UpstreamSettings, len(names))
	for i, c := range cmds {
		if out[i], err = parseUpstreamSettings(c.Val()); err != nil {
			return nil, fmt.Errorf("read upstream settings of %q: %w", names[i], err)
		}
	}
	return out, nil
}

// parseUpstreamSettings decodes an HMGET p cfg reply.
func parseUpstreamSettings(v []any) (UpstreamSettings, error) {
	rawP, _ := v[0].(string)
	if rawP == "" {
		return UpstreamSettings{}, nil
	}
	out := UpstreamSettings{Found: true}
	if err := json.Unmarshal([]byte(rawP), &out.Params); err != nil || out.Params.IntervalUS < 1 {
		return UpstreamSettings{}, fmt.Errorf("%w: field p %q", ErrProtocol, rawP)
	}
	out.Params.Burst = max(out.Params.Burst, 1)
	rawCfg, _ := v[1].(string)
	var cfg struct {
		CostHeader string `json:"cost_header"`
	}
	if err := json.Unmarshal([]byte(rawCfg), &cfg); err != nil {
		return UpstreamSettings{}, fmt.Errorf("%w: field cfg: %w", ErrProtocol, err)
	}
	out.CostHeader = cfg.CostHeader
	return out, nil
}

// UpstreamCacheMax bounds an UpstreamCache's entries; it starts afresh
// when full.
const UpstreamCacheMax = 10_000

// UpstreamCache remembers each upstream's settings (Registry.UpstreamSettings)
// for ttl, so that a process reading the upstreams of many jobs costs one
// call per upstream and ttl: a change (a PUT, a DELETE) reaches it within
// ttl. A name read as not registered is cached too, unless RecheckMissing:
// then it is read again at every use, so an upstream another process just
// created is seen at once. Safe for concurrent use.
type UpstreamCache struct {
	read func(ctx context.Context, names []string) ([]UpstreamSettings, error)
	ttl  time.Duration
	// RecheckMissing reads a name cached as not registered again at every
	// use (enqueue's check); set before use.
	RecheckMissing bool
	// Clock is the local clock (time.Now); tests replace it before use.
	Clock func() time.Time

	mu     sync.Mutex
	byName map[string]cachedUpstream
}

type cachedUpstream struct {
	s  UpstreamSettings
	at time.Time
}

// NewUpstreamCache returns an UpstreamCache over read (Registry.UpstreamSettings)
// keeping each answer ttl (≤ 0: not at all).
func NewUpstreamCache(read func(ctx context.Context, names []string) ([]UpstreamSettings, error), ttl time.Duration) *UpstreamCache {
	return &UpstreamCache{read: read, ttl: ttl, Clock: time.Now, byName: map[string]cachedUpstream{}}
}

// Settings returns the settings of each of names, in order: the cached
// ones younger than ttl, the others read in one call (and cached).
func (c *UpstreamCache) Settings(ctx context.Context, names []string) ([]UpstreamSettings, error) {
	now := c.Clock()
	out := make([]UpstreamSettings, len(names))
	var missing []string
	c.mu.Lock()
	for i, n := range names {
		e, ok := c.byName[n]
		if ok && now.Sub(e.at) < c.ttl && (e.s.Found || !c.RecheckMissing) {
			out[i] = e.s
		} else {
			missing = append(missing, n)
		}
	}
	c.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	got, err := c.read(ctx, missing)
	if err != nil {
		return nil, err
	}
	if len(got) != len(missing) {
		return nil, fmt.Errorf("%w: %d upstream settings for %d upstreams", ErrProtocol, len(got), len(missing))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.byName)+len(missing) > UpstreamCacheMax {
		clear(c.byName)
	}
	for i, n := range missing {
		c.byName[n] = cachedUpstream{s: got[i], at: now}
	}
	for i, n := range names {
		if e, ok := c.byName[n]; ok {
			out[i] = e.s
		}
	}
	return out, nil
}

// Forget drops name's entry (after this process wrote or deleted it).
func (c *UpstreamCache) Forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byName, name)
}

// One is name's settings (Settings); ErrUpstreamNotFound when it is not
// registered.
func (c *UpstreamCache) One(ctx context.Context, name string) (UpstreamSettings, error) {
	got, err := c.Settings(ctx, []string{name})
	if err != nil {
		return UpstreamSettings{}, err
	}
	if !got[0].Found {
		return UpstreamSettings{}, fmt.Errorf("upstream %q: %w", name, ErrUpstreamNotFound)
	}
	return got[0], nil
}
