package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMasterName is the name the harness's sentinels monitor the
// primary under.
const SentinelMasterName = "sluice-test"

// Sentinel is a local Sentinel setup the harness started: one primary, one
// replica and three sentinels (quorum 2) on free loopback ports. Its methods
// are safe for concurrent use. Stop (or the t.Cleanup of NewSentinel) kills
// every process.
type Sentinel struct {
	dir string

	mu        sync.Mutex
	data      []*proc // the primary it started with, then the replica
	sentinels []*proc
}

// SentinelDownAfter is the sentinels' down-after-milliseconds: how long the
// primary may not answer before a failover starts.
const SentinelDownAfter = 2 * time.Second

// NewSentinel starts a Sentinel setup for t (see StartSentinel), failing t
// when it cannot; every process is killed when t ends.
func NewSentinel(t testing.TB) *Sentinel {
	t.Helper()
	s, err := StartSentinel()
	if err != nil {
		t.Fatalf("start a Redis Sentinel setup: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartSentinel starts a primary, a replica of it and three sentinels
// monitoring it as SentinelMasterName (quorum 2), and returns once the
// replica's link is up and every sentinel knows the primary, the replica
// and the two other sentinels. The caller calls Stop.
func StartSentinel() (*Sentinel, error) {
	dir, err := os.MkdirTemp("", "sluice-sentinel-")
	if err != nil {
		return nil, err
	}
	s := &Sentinel{dir: dir}
	if err := s.start(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Sentinel) start() error {
	data := []string{"--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction"}
	primary, err := startProc(s.dir, false, data...)
	if err != nil {
		return err
	}
	s.data = append(s.data, primary)
	host, port, _ := net.SplitHostPort(primary.addr)
	replica, err := startProc(s.dir, false, append(data, "--replicaof", host, port)...)
	if err != nil {
		return err
	}
	s.data = append(s.data, replica)
	for i := range 3 {
		conf := filepath.Join(s.dir, "sentinel-"+strconv.Itoa(i)+".conf")
		body := fmt.Sprintf("sentinel monitor %[1]s %[2]s %[3]s 2\n"+
			"sentinel down-after-milliseconds %[1]s %[4]d\n"+
			"sentinel failover-timeout %[1]s 10000\n", SentinelMasterName, host, port, SentinelDownAfter.Milliseconds())
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			return err
		}
		p, err := startProc(s.dir, false, conf, "--sentinel")
		if err != nil {
			return err
		}
		s.sentinels = append(s.sentinels, p)
	}
	return s.awaitReady()
}

// awaitReady waits until the replica's link is up and every sentinel sees
// one replica and two other sentinels.
func (s *Sentinel) awaitReady() error {
	rc := s.data[1].client()
	defer rc.Close()
	err := waitFor(30*time.Second, "replica link on "+s.data[1].addr, func(ctx context.Context) error {
		repl, err := rc.Info(ctx, "replication").Result()
		if err == nil && !strings.Contains(repl, "master_link_status:up") {
			err = fmt.Errorf("link not up: %s", repl)
		}
		return err
	})
	if err != nil {
		return err
	}
	for _, p := range s.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: p.addr, MaxRetries: -1})
		err := waitFor(30*time.Second, "sentinel "+p.addr+" ready", func(ctx context.Context) error {
			m, err := sc.Master(ctx, SentinelMasterName).Result()
			if err != nil {
				return err
			}
			if m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
				return fmt.Errorf("sees %s replicas and %s other sentinels", m["num-slaves"], m["num-other-sentinels"])
			}
			return nil
		})
		_ = sc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// MasterName returns the name the sentinels monitor the primary under.
func (s *Sentinel) MasterName() string { return SentinelMasterName }

// SentinelAddrs returns the sentinels' addresses (host:port).
func (s *Sentinel) SentinelAddrs() []string { return addrsOf(&s.mu, s.sentinels) }

// DataAddrs returns the addresses of the primary it started with and of the
// replica, in that order (after a failover the roles swap).
func (s *Sentinel) DataAddrs() []string { return addrsOf(&s.mu, s.data) }

func addrsOf(mu *sync.Mutex, ps []*proc) []string {
	mu.Lock()
	defer mu.Unlock()
	addrs := make([]string, len(ps))
	for i, p := range ps {
		addrs[i] = p.addr
	}
	return addrs
}

// URL returns the setup as a redis+sentinel:// URL (every sentinel, the
// master name): the form Sluice's config accepts in redis.url and
// SLUICE_REDIS_URL.
func (s *Sentinel) URL() string { return SentinelURL(s.SentinelAddrs(), SentinelMasterName) }

// SentinelURL returns the redis+sentinel:// URL of the sentinels at addrs
// monitoring masterName.
func SentinelURL(addrs []string, masterName string) string {
	q := url.Values{}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	q.Set("master_name", masterName)
	u := url.URL{Scheme: "redis+sentinel", Host: addrs[0], RawQuery: q.Encode()}
	return u.String()
}

// Client returns a new sentinel-backed client of the primary; the caller
// closes it.
func (s *Sentinel) Client() *redis.Client {
	return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: SentinelMasterName, SentinelAddrs: s.SentinelAddrs()})
}

// Master returns the primary's address as the first live sentinel that
// answers says.
func (s *Sentinel) Master(ctx context.Context) (string, error) {
	var lastErr error = errors.New("no live sentinel")
	s.mu.Lock()
	sentinels := slices.Clone(s.sentinels)
	s.mu.Unlock()
	for _, p := range s.live(sentinels) {
		sc := redis.NewSentinelClient(&redis.Options{Addr: p.addr, MaxRetries: -1})
		hp, err := sc.GetMasterAddrByName(ctx, SentinelMasterName).Result()
		_ = sc.Close()
		if err == nil && len(hp) == 2 {
			return net.JoinHostPort(hp[0], hp[1]), nil
		}
		lastErr = err
	}
	return "", fmt.Errorf("master of %s: %w", SentinelMasterName, lastErr)
}

// Kill kills the data node or sentinel at addr with SIGKILL (kill -9) and
// waits until its process is gone. It is an error when no live process has
// that address.
func (s *Sentinel) Kill(addr string) error {
	s.mu.Lock()
	all := slices.Concat(s.data, s.sentinels)
	s.mu.Unlock()
	for _, p := range s.live(all) {
		if p.addr == addr {
			p.kill()
			return nil
		}
	}
	return fmt.Errorf("no live sentinel-setup process at %s", addr)
}

func (s *Sentinel) live(ps []*proc) []*proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	var live []*proc
	for _, p := range ps {
		if p.alive() {
			live = append(live, p)
		}
	}
	return live
}

// Stop kills every process and removes the directory. Idempotent.
func (s *Sentinel) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range slices.Concat(s.sentinels, s.data) {
		p.kill()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
		s.dir = ""
	}
}
