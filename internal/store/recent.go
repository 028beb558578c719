package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/wire"
)

// RecentMax is how many of a tenant's attempts RecentAttempts returns at
// most: the ring lua/recent.lua keeps in the tenant's hash.
const RecentMax = 20

// recentHead is the length of a ring record's fixed part (lua/recent.lua
// RA_HEAD '<dI4HBB'): finished at µs (float64), latency µs (uint32), HTTP
// status (uint16), kind (uint8, wire.FinishKind), job id length (uint8).
const recentHead = 16

// RecentAttempt is one of a tenant's recent attempts: an attempt that
// finished a running job (finish.lua; a stale finish is not one).
type RecentAttempt struct {
	JobID string
	// Outcome is the attempt's wire.FinishKind name: success, retry,
	// throttled, permanent or gone.
	Outcome string
	// Status is the HTTP status, 0 when none (a task job, a network error).
	Status int
	// Latency is the attempt's request time (capped at 2^32 − 1 µs).
	Latency time.Duration
	// At is when the finish was recorded (Redis time).
	At time.Time
}

// RecentAttempts returns tenant's last attempts (at most RecentMax), newest
// first; none for a tenant without any (or without state). One HGET of field
// ra of the tenant's hash: the finish writes it in the HSET of the tenant's
// state, so keeping it costs the hot path no command.
func (s *Store) RecentAttempts(ctx context.Context, tenant string) ([]RecentAttempt, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, fmt.Errorf("recent attempts of %q: %w", tenant, err)
	}
	raw, err := s.rdb.HGet(ctx, s.keys.tenant(tenant), "ra").Result()
	if errors.Is(err, redis.Nil) {
		return []RecentAttempt{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("recent attempts of %q: %w", tenant, err)
	}
	out, err := parseRecent(raw)
	if err != nil {
		return nil, fmt.Errorf("recent attempts of %q: %w", tenant, err)
	}
	return out, nil
}

// parseRecent decodes field ra (lua/recent.lua's layout), newest first.
func parseRecent(raw string) ([]RecentAttempt, error) {
	out := []RecentAttempt{}
	if raw == "" {
		return out, nil
	}
	n, b := int(raw[0]), []byte(raw[1:])
	for i := 0; i < n; i++ {
		if len(b) < recentHead || len(b) < recentHead+int(b[15]) {
			return nil, fmt.Errorf("%w: recent attempts: record %d of %d cut short", ErrProtocol, i+1, n)
		}
		end := recentHead + int(b[15])
		out = append(out, RecentAttempt{
			At:      microsTime(int64(math.Float64frombits(binary.LittleEndian.Uint64(b[0:8])))),
			Latency: time.Duration(binary.LittleEndian.Uint32(b[8:12])) * time.Microsecond,
			Status:  int(binary.LittleEndian.Uint16(b[12:14])),
			Outcome: wire.FinishKind(b[14]).String(),
			JobID:   string(b[recentHead:end]),
		})
		b = b[end:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: recent attempts: %d bytes after %d records", ErrProtocol, len(b), n)
	}
	slices.Reverse(out)
	return out, nil
}
