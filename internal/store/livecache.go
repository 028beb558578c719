package store

import (
	"context"
	"sync"
	"time"
)

// LiveCache remembers per task queue whether a live middleware serves it
// (Store.TaskQueueLive), for ttl (≤ 0: not at all), so that a burst of
// enqueues or hand-offs costs one Redis call per queue and ttl. A
// middleware that starts is seen within ttl; one that stops may still count
// as live for ttl. Safe for concurrent use.
type LiveCache struct {
	ask func(ctx context.Context, queue string) (bool, error)
	ttl time.Duration
	// Clock is the local clock (time.Now); tests replace it before use.
	Clock func() time.Time

	mu      sync.Mutex
	answers map[string]liveAnswer
}

type liveAnswer struct {
	live bool
	at   time.Time
}

// NewLiveCache returns a LiveCache asking ask (Store.TaskQueueLive).
func NewLiveCache(ask func(context.Context, string) (bool, error), ttl time.Duration) *LiveCache {
	return &LiveCache{ask: ask, ttl: ttl, Clock: time.Now, answers: map[string]liveAnswer{}}
}

// Live is the cached answer for queue when it is younger than ttl, else
// ask's (cached unless it failed).
func (c *LiveCache) Live(ctx context.Context, queue string) (bool, error) {
	now := c.Clock()
	if c.ttl > 0 {
		c.mu.Lock()
		a, ok := c.answers[queue]
		c.mu.Unlock()
		if ok && now.Sub(a.at) < c.ttl {
			return a.live, nil
		}
	}
	live, err := c.ask(ctx, queue)
	if err != nil {
		return false, err
	}
	if c.ttl > 0 {
		c.mu.Lock()
		c.answers[queue] = liveAnswer{live: live, at: now}
		c.mu.Unlock()
	}
	return live, nil
}
