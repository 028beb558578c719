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
func (r RedisConfig) Client() (redis.UniversalClient, error) {
	opt, err := redis.ParseURL(r.URL)
	if err != nil {
		return nil, fmt.Errorf("redis.url: %w", err)
	}
	if len(r.Addrs) == 0 {
		return redis.NewClient(opt), nil
	}
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:     r.Addrs,
		Username:  opt.Username,
		Password:  opt.Password,
		TLSConfig: opt.TLSConfig,
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
