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

	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/wire"
)

// RecentMax is how many of a tenant's attempts RecentAttempts returns at
// most (lua/recent.lua RA_MAX: the ring key keeps at least that many).
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
// first; none for a tenant without any. One pipeline: the tenant's ring key
// <p>:{sN}:t:<tenant>:ra (lua/recent.lua: records appended by the finish,
// cut back now and then) and, while that key is absent, the field ra an
// earlier release kept in the tenant's hash (a count byte, then the
// records).
func (s *Store) RecentAttempts(ctx context.Context, tenant string) ([]RecentAttempt, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, fmt.Errorf("recent attempts of %q: %w", tenant, err)
	}
	var ring, legacy *redis.StringCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		ring = p.Get(ctx, s.keys.tenantRecent(tenant))
		legacy = p.HGet(ctx, s.keys.tenant(tenant), "ra")
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("recent attempts of %q: %w", tenant, err)
	}
	var out []RecentAttempt
	switch {
	case ring.Err() == nil:
		out, err = parseRecent(ring.Val())
	case legacy.Err() == nil && legacy.Val() != "":
		raw := legacy.Val()
		if out, err = parseRecent(raw[1:]); err == nil && len(out) != int(raw[0]) {
			err = fmt.Errorf("%w: recent attempts: %d records, the count says %d", ErrProtocol, len(out), raw[0])
		}
	default:
		return []RecentAttempt{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("recent attempts of %q: %w", tenant, err)
	}
	return out, nil
}

// parseRecent decodes ring records (lua/recent.lua's layout, oldest first)
// and returns the last RecentMax, newest first.
func parseRecent(raw string) ([]RecentAttempt, error) {
	out := []RecentAttempt{}
	for b := []byte(raw); len(b) > 0; {
		if len(b) < recentHead || len(b) < recentHead+int(b[15]) {
			return nil, fmt.Errorf("%w: recent attempts: record %d cut short", ErrProtocol, len(out)+1)
		}
		end := recentHead + int(b[15])
		out = append(out, RecentAttempt{
			At:      redisscript.MicrosTime(int64(math.Float64frombits(binary.LittleEndian.Uint64(b[0:8])))),
			Latency: time.Duration(binary.LittleEndian.Uint32(b[8:12])) * time.Microsecond,
			Status:  int(binary.LittleEndian.Uint16(b[12:14])),
			Outcome: wire.FinishKind(b[14]).String(),
			JobID:   string(b[recentHead:end]),
		})
		b = b[end:]
	}
	out = out[max(0, len(out)-RecentMax):]
	slices.Reverse(out)
	return out, nil
}
