package redistest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a local Redis Cluster the harness started: masters and
// replicas on free loopback ports, in one temporary directory. Its methods
// are safe for concurrent use. Stop (or the t.Cleanup of NewCluster) kills
// every node.
type Cluster struct {
	dir string

	mu    sync.Mutex
	nodes []*proc // masters first, then replicas, as created
}

// ClusterConfig shapes a Cluster. The zero value is 3 masters with one
// replica each and a node timeout of ClusterNodeTimeoutDefault.
type ClusterConfig struct {
	// Masters is the number of masters; default 3, at least 3 (redis-cli
	// --cluster create refuses fewer).
	Masters int
	// NoReplicas leaves the masters without replicas (default: one each).
	NoReplicas bool
	// NodeTimeout is cluster-node-timeout: how long a master may not answer
	// before its replica is promoted; default ClusterNodeTimeoutDefault.
	NodeTimeout time.Duration
}

// ClusterNodeTimeoutDefault is ClusterConfig.NodeTimeout's default: short
// enough for failover tests, long enough that a loaded 2-core machine does
// not fail a master over by accident.
const ClusterNodeTimeoutDefault = 3 * time.Second

// NewCluster starts a Cluster for t (see StartCluster), failing t when it
// cannot; the nodes are killed when t ends.
func NewCluster(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	c, err := StartCluster(cfg)
	if err != nil {
		t.Fatalf("start a Redis Cluster: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// StartCluster starts cfg.Masters cluster-mode redis-server processes (and a
// replica for each unless cfg.NoReplicas), joins them with redis-cli
// --cluster create, and returns once every node reports cluster_state:ok
// with all 16384 slots covered and every node known, and every replica's
// link to its master is up. The caller calls Stop.
func StartCluster(cfg ClusterConfig) (*Cluster, error) {
	if cfg.Masters == 0 {
		cfg.Masters = 3
	}
	if cfg.NodeTimeout == 0 {
		cfg.NodeTimeout = ClusterNodeTimeoutDefault
	}
	if cfg.Masters < 3 {
		return nil, fmt.Errorf("a cluster needs at least 3 masters, got %d", cfg.Masters)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("redis-cli not on PATH: %w", err)
	}
	dir, err := os.MkdirTemp("", "sluice-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	if err := c.start(cli, cfg); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(cli string, cfg ClusterConfig) error {
	n, replicas := cfg.Masters, 0
	if !cfg.NoReplicas {
		n, replicas = 2*cfg.Masters, 1
	}
	for range n {
		p, err := startProc(c.dir, true,
			"--cluster-enabled", "yes", "--cluster-node-timeout", strconv.FormatInt(cfg.NodeTimeout.Milliseconds(), 10),
			"--cluster-config-file", "nodes-"+strconv.Itoa(len(c.nodes))+".conf",
			"--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction")
		if err != nil {
			return err
		}
		c.nodes = append(c.nodes, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	for _, p := range c.nodes {
		if err := c.awaitNode(p, n); err != nil {
			return err
		}
	}
	return nil
}

// awaitNode waits until p sees a healthy cluster of n nodes and, when p is
// a replica, its link to its master is up.
func (c *Cluster) awaitNode(p *proc, n int) error {
	rc := p.client()
	defer rc.Close()
	return waitFor(30*time.Second, "cluster ok on "+p.addr, func(ctx context.Context) error {
		info, err := rc.ClusterInfo(ctx).Result()
		if err != nil {
			return err
		}
		for _, want := range []string{"cluster_state:ok", "cluster_slots_ok:16384", "cluster_known_nodes:" + strconv.Itoa(n)} {
			if !strings.Contains(info, want) {
				return fmt.Errorf("CLUSTER INFO lacks %s: %s", want, info)
			}
		}
		repl, err := rc.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return fmt.Errorf("replica link not up: %s", repl)
		}
		return nil
	})
}

// Addrs returns the address (host:port) of every node, masters and
// replicas, killed ones included, in creation order: seed addresses for a
// client.
func (c *Cluster) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	addrs := make([]string, len(c.nodes))
	for i, p := range c.nodes {
		addrs[i] = p.addr
	}
	return addrs
}

// URL returns the Cluster as a redis+cluster:// URL (every node a seed):
// the form Sluice's config accepts in redis.url and SLUICE_REDIS_URL.
func (c *Cluster) URL() string { return ClusterURL(c.Addrs()) }

// ClusterURL returns the redis+cluster:// URL of the seed addresses addrs.
func ClusterURL(addrs []string) string {
	q := url.Values{}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	u := url.URL{Scheme: "redis+cluster", Host: addrs[0], RawQuery: q.Encode()}
	return u.String()
}

// Client returns a new ClusterClient seeded with every node; the caller
// closes it.
func (c *Cluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
}

// MasterOf returns the address of the master that serves key's slot now,
// as a live node's CLUSTER SLOTS says (no client's cached view).
func (c *Cluster) MasterOf(ctx context.Context, key string) (string, error) {
	var lastErr error = errors.New("no live node")
	for _, p := range c.live() {
		rc := p.client()
		addr, err := masterOfSlot(ctx, rc, key)
		_ = rc.Close()
		if err == nil {
			return addr, nil
		}
		lastErr = err
	}
	return "", fmt.Errorf("master of %q: %w", key, lastErr)
}

func masterOfSlot(ctx context.Context, rc *redis.Client, key string) (string, error) {
	slot, err := rc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return "", err
	}
	ranges, err := rc.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, r := range ranges {
		if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
			return r.Nodes[0].Addr, nil
		}
	}
	return "", fmt.Errorf("slot %d not served", slot)
}

// Masters returns the addresses of the live nodes that are masters now.
func (c *Cluster) Masters(ctx context.Context) ([]string, error) {
	var masters []string
	for _, p := range c.live() {
		rc := p.client()
		role, err := rc.Do(ctx, "ROLE").Slice()
		_ = rc.Close()
		if err != nil {
			return nil, fmt.Errorf("ROLE on %s: %w", p.addr, err)
		}
		if len(role) > 0 && role[0] == "master" {
			masters = append(masters, p.addr)
		}
	}
	return masters, nil
}

// Kill kills the node at addr with SIGKILL (kill -9) and waits until its
// process is gone. It is an error when no live node has that address.
func (c *Cluster) Kill(addr string) error {
	for _, p := range c.live() {
		if p.addr == addr {
			p.kill()
			return nil
		}
	}
	return fmt.Errorf("no live cluster node at %s", addr)
}

func (c *Cluster) live() []*proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	var live []*proc
	for _, p := range c.nodes {
		if p.alive() {
			live = append(live, p)
		}
	}
	return live
}

// Stop kills every node and removes the directory. Idempotent.
func (c *Cluster) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.nodes {
		p.kill()
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
		c.dir = ""
	}
}
