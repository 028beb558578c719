package redisscript

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrNoMemoryInfo is returned when INFO memory lacks used_memory or
// maxmemory.
var ErrNoMemoryInfo = errors.New("INFO memory without used_memory and maxmemory")

// ReadMemory is INFO memory's used_memory and maxmemory (0: no limit) of
// node, in bytes. On a Cluster client it answers for whichever node the
// client asks: pass a master's own client (ForEachMaster).
func ReadMemory(ctx context.Context, node redis.UniversalClient) (used, max int64, err error) {
	info, err := node.Info(ctx, "memory").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("read INFO memory: %w", err)
	}
	return ParseMemoryInfo(info)
}

// ParseMemoryInfo reads used_memory and maxmemory from INFO memory's text.
func ParseMemoryInfo(info string) (used, max int64, err error) {
	found := 0
	for line := range strings.Lines(info) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "used_memory" && name != "maxmemory") {
			continue
		}
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("INFO memory %s %q: %w", name, value, err)
		}
		if name == "used_memory" {
			used = n
		} else {
			max = n
		}
		found++
	}
	if found != 2 {
		return 0, 0, ErrNoMemoryInfo
	}
	return used, max, nil
}
