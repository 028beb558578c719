package config

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// Client builds the Redis client the binaries use: a Cluster client when
// Addrs is set (URL then supplies credentials and TLS only), else a client
// for URL. The caller closes it.
//
// The client honours context deadlines (go-redis ContextTimeoutEnabled):
// a command whose context expires while Redis is unresponsive fails at the
// deadline, socket reads and writes included, and is not retried after it
// (without this go-redis waits out its own 3 s read timeout and retries,
// so a frozen Redis held an API request for 15 s). Commands without a
// deadline keep go-redis's read and write timeouts.
func (r RedisConfig) Client() (redis.UniversalClient, error) {
	opt, err := redis.ParseURL(r.URL)
	if err != nil {
		return nil, fmt.Errorf("redis.url: %w", err)
	}
	if len(r.Addrs) == 0 {
		opt.ContextTimeoutEnabled = true
		return redis.NewClient(opt), nil
	}
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 r.Addrs,
		Username:              opt.Username,
		Password:              opt.Password,
		TLSConfig:             opt.TLSConfig,
		ContextTimeoutEnabled: true,
	}), nil
}

// NewLogger returns the process logger: text or JSON on w at Level.
func (l LogConfig) NewLogger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: l.SlogLevel()}
	if l.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
