package config

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RedisKind is the kind of deployment a RedisConfig names.
type RedisKind string

// The kinds of RedisConfig.Kind.
const (
	RedisSingle   RedisKind = "single"
	RedisCluster  RedisKind = "cluster"
	RedisSentinel RedisKind = "sentinel"
)

// The URL schemes that select a Cluster or Sentinel (with an "s" for TLS:
// rediss+cluster, rediss+sentinel).
const (
	clusterScheme  = "+cluster"
	sentinelScheme = "+sentinel"
)

// RedisBufferSize is the read and the write buffer of each connection of
// every client Sluice builds (go-redis's default is 32 KiB each). A pool
// keeps every connection it opened at its busiest moment, each with its
// two buffers: at 32 KiB they were three quarters of a worker's heap and
// its slow creep over a soak (issue #18); 4 KiB is go-redis's size before
// v9.12 (a larger reply or pipeline takes more than one read or write).
const RedisBufferSize = 4 << 10

// Kind returns the deployment r names: Sentinel when Sentinel is set or the
// URL is redis+sentinel://, Cluster when Addrs or Cluster is set or the URL
// is redis+cluster://, else a single node. Validate reports configs that
// name two.
func (r RedisConfig) Kind() RedisKind {
	_, form := urlForm(r.URL)
	switch {
	case r.Sentinel.set() || form == RedisSentinel:
		return RedisSentinel
	case len(r.Addrs) > 0 || r.Cluster || form == RedisCluster:
		return RedisCluster
	default:
		return RedisSingle
	}
}

func (s SentinelConfig) set() bool { return s.MasterName != "" || len(s.Addrs) > 0 }

// urlForm returns u with a "+cluster" or "+sentinel" scheme suffix dropped,
// and the kind that suffix names (RedisSingle without one).
func urlForm(u string) (string, RedisKind) {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u, RedisSingle
	}
	for suffix, kind := range map[string]RedisKind{clusterScheme: RedisCluster, sentinelScheme: RedisSentinel} {
		if base, found := strings.CutSuffix(scheme, suffix); found {
			return base + "://" + rest, kind
		}
	}
	return u, RedisSingle
}

// Client builds the Redis client the binaries use, of r's Kind: a
// *redis.Client for a single node, a *redis.ClusterClient for a Cluster, a
// sentinel-backed *redis.Client (go-redis NewFailoverClient) for Sentinel.
// The caller closes it.
//
// The client honours context deadlines (go-redis ContextTimeoutEnabled):
// a command whose context expires while Redis is unresponsive fails at the
// deadline, socket reads and writes included, and is not retried after it
// (without this go-redis waits out its own 3 s read timeout and retries,
// so a frozen Redis held an API request for 15 s). Commands without a
// deadline keep go-redis's read and write timeouts.
func (r RedisConfig) Client() (redis.UniversalClient, error) {
	build, err := r.builder()
	if err != nil {
		return nil, fmt.Errorf("redis.url: %w", err)
	}
	return build(), nil
}

// checkURL reports what keeps Client from building r's client.
func (r RedisConfig) checkURL() error {
	_, err := r.builder()
	return err
}

// builder parses r's options for its Kind and returns what builds the
// client from them (with ContextTimeoutEnabled); it connects nothing.
func (r RedisConfig) builder() (func() redis.UniversalClient, error) {
	switch r.Kind() {
	case RedisCluster:
		o, err := r.clusterOptions()
		if err != nil {
			return nil, err
		}
		o.ContextTimeoutEnabled = true
		o.ReadBufferSize, o.WriteBufferSize = RedisBufferSize, RedisBufferSize
		return func() redis.UniversalClient { return redis.NewClusterClient(o) }, nil
	case RedisSentinel:
		o, err := r.failoverOptions()
		if err != nil {
			return nil, err
		}
		o.ContextTimeoutEnabled = true
		o.ReadBufferSize, o.WriteBufferSize = RedisBufferSize, RedisBufferSize
		return func() redis.UniversalClient { return redis.NewFailoverClient(o) }, nil
	default:
		o, err := parseURL(r.URL, redis.ParseURL)
		if err != nil {
			return nil, err
		}
		o.ContextTimeoutEnabled = true
		o.ReadBufferSize, o.WriteBufferSize = RedisBufferSize, RedisBufferSize
		return func() redis.UniversalClient { return redis.NewClient(o) }, nil
	}
}

// clusterOptions: a redis+cluster:// URL as go-redis parses it, else Addrs
// (or the URL's host) as seeds with the URL's credentials and TLS.
func (r RedisConfig) clusterOptions() (*redis.ClusterOptions, error) {
	if u, kind := urlForm(r.URL); kind == RedisCluster {
		return parseURL(u, redis.ParseClusterURL)
	}
	opt, err := parseURL(r.URL, redis.ParseURL)
	if err != nil {
		return nil, err
	}
	if opt.DB != 0 {
		return nil, fmt.Errorf("database must be 0 on a Redis Cluster, got %d", opt.DB)
	}
	if opt.Network == "unix" {
		return nil, errors.New("a Redis Cluster needs host:port addresses, not a unix socket")
	}
	seeds := r.Addrs
	if len(seeds) == 0 {
		seeds = []string{opt.Addr}
	}
	return &redis.ClusterOptions{Addrs: seeds, Username: opt.Username, Password: opt.Password, TLSConfig: opt.TLSConfig}, nil
}

// failoverOptions: a redis+sentinel:// URL as go-redis parses it, else
// Sentinel's sentinels and master name with the URL's credentials, TLS
// and database for the primary.
func (r RedisConfig) failoverOptions() (*redis.FailoverOptions, error) {
	if u, kind := urlForm(r.URL); kind == RedisSentinel {
		o, err := parseURL(u, redis.ParseFailoverURL)
		if err == nil && o.MasterName == "" {
			err = errors.New("a redis+sentinel:// URL needs master_name=NAME")
		}
		return o, err
	}
	opt, err := parseURL(r.URL, redis.ParseURL)
	if err != nil {
		return nil, err
	}
	s := r.Sentinel
	return &redis.FailoverOptions{
		MasterName: s.MasterName, SentinelAddrs: s.Addrs, SentinelUsername: s.Username, SentinelPassword: s.Password,
		Username: opt.Username, Password: opt.Password, DB: opt.DB, TLSConfig: opt.TLSConfig,
	}, nil
}

// parseURL parses u with parse, keeping only the cause of a *url.Error
// (which quotes the whole URL, password included).
func parseURL[O any](u string, parse func(string) (O, error)) (O, error) {
	o, err := parse(u)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		var zero O
		return zero, fmt.Errorf("not a valid Redis URL: %w", err)
	}
	return o, nil
}

// NewLogger returns the process logger: text or JSON on w at Level.
func (l LogConfig) NewLogger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: l.SlogLevel()}
	if l.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
