package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// UpstreamParams are an upstream's integers as the scripts read them (hash
// field p of <p>:{u:N}:u, written by the upstream's PUT or the config).
type UpstreamParams struct {
	IntervalUS    int64 // T: µs per cost unit
	Burst         int64 // B
	Concurrency   int64 // 0 = none (not enforced yet)
	Adaptive      bool
	ScopeUpstream bool // pause_scope upstream: a throttle pauses the upstream, not the tenant
}

// paramsJSON is field p's JSON.
type paramsJSON struct {
	IV int64 `json:"iv"`
	B  int64 `json:"b"`
	C  int64 `json:"c"`
	A  int64 `json:"a"`
	S  int64 `json:"s"`
}

// UpstreamParamsOf reads upstream name's params: ErrUpstreamNotFound when it
// has none; ErrProtocol when field p is not what the scripts read.
func (s *Store) UpstreamParamsOf(ctx context.Context, name string) (UpstreamParams, error) {
	if err := ValidUpstreamName(name); err != nil {
		return UpstreamParams{}, fmt.Errorf("read upstream %q: %w", name, err)
	}
	raw, err := s.rdb.HGet(ctx, s.keys.upstreamHash(name), "p").Result()
	if errors.Is(err, redis.Nil) {
		return UpstreamParams{}, fmt.Errorf("read upstream %q: %w", name, ErrUpstreamNotFound)
	}
	if err != nil {
		return UpstreamParams{}, fmt.Errorf("read upstream %q: %w", name, err)
	}
	var p paramsJSON
	if err := json.Unmarshal([]byte(raw), &p); err != nil || p.IV < 1 {
		return UpstreamParams{}, fmt.Errorf("read upstream %q: %w: params %q", name, ErrProtocol, raw)
	}
	return UpstreamParams{IntervalUS: p.IV, Burst: max(p.B, 1), Concurrency: p.C, Adaptive: p.A == 1,
		ScopeUpstream: p.S == 1}, nil
}
