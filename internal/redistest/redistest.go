// Package redistest gives tests a real Redis, started for the test binary
// by Main, and a unique key prefix per test so tests can run with
// t.Parallel(). SLUICE_TEST_REDIS (EnvMode) picks what Main starts:
//
//   - single (default): one redis-server on a free loopback port, or the one
//     SLUICE_TEST_REDIS_URL (EnvURL) names;
//   - cluster: a Redis Cluster of 3 masters and 3 replicas (StartCluster);
//   - sentinel: a primary, a replica and 3 sentinels (StartSentinel).
//
// New gives a client of that kind; URL gives the same Redis in the URL form
// Sluice's config reads, for tests that build a config or start binaries.
// Everything Main started is killed after the last test. Tests that need
// a Cluster or Sentinel setup of their own (to kill a node) call
// NewCluster or NewSentinel, whose processes die when the test ends.
//
// There is no fallback: a test binary that cannot get a Redis fails loudly.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// and in a test:
//
//	rdb, prefix := redistest.New(t)
//
// A test that looks at keys or connections does it per node, so it holds
// on a Cluster too: Keys (SCAN on every master), ForEachNode, ForEachMaster,
// KillClients. NewPrivate gives a test a single node of its own (for a
// maxmemory or a CONFIG SET the shared one must not see); a Cluster or
// Sentinel of its own offers Kill (kill -9), MasterOf, Masters and Master
// for failover tests. A test that needs one Redis address (a proxy in front
// of it) calls RequireSingle, which skips with its reason outside single
// mode.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// EnvURL names the environment variable that points tests at an existing
// single-node Redis instead of starting one (mode single only).
const EnvURL = "SLUICE_TEST_REDIS_URL"

// EnvMode names the environment variable that selects what Main starts for
// the test binary: ModeSingle (default), ModeCluster or ModeSentinel.
const EnvMode = "SLUICE_TEST_REDIS"

// Mode is the kind of Redis a test binary runs against.
type Mode string

// The modes EnvMode selects.
const (
	// ModeSingle: one redis-server (or the one EnvURL names).
	ModeSingle Mode = "single"
	// ModeCluster: a Cluster of 3 masters and 3 replicas (StartCluster).
	ModeCluster Mode = "cluster"
	// ModeSentinel: a primary, a replica and 3 sentinels (StartSentinel).
	ModeSentinel Mode = "sentinel"
)

var (
	mu       sync.Mutex
	mode     Mode
	uopts    *redis.UniversalOptions // set by Main
	urlForm  string                  // the URL of what Main set up
	stopTest func()                  // stops what Main started, or nil
)

// Main starts (or finds) the test Redis of the mode EnvMode selects, runs
// the tests, stops what it started (after every test, before the leak
// check), checks for leaked goroutines and exits with the tests' status.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if err := setup(); err != nil {
		fmt.Fprintf(os.Stderr, "redistest: no Redis for the tests: %v\n", err)
		return 1
	}
	code := m.Run()
	if stopTest != nil {
		stopTest()
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreCurrent()); err != nil {
			fmt.Fprintf(os.Stderr, "redistest: leaked goroutines: %v\n", err)
			return 1
		}
	}
	return code
}

func setup() error {
	m := Mode(os.Getenv(EnvMode))
	if m == "" {
		m = ModeSingle
	}
	mode = m
	u := os.Getenv(EnvURL)
	switch {
	case m == ModeSingle && u != "":
		return setupURL(u)
	case m == ModeSingle:
		return setupSingle()
	case u != "":
		return fmt.Errorf("%s=%s: %s is for a single node only, unset it", EnvMode, m, EnvURL)
	case m == ModeCluster:
		c, err := StartCluster(ClusterConfig{})
		if err != nil {
			return err
		}
		stopTest, urlForm = c.Stop, c.URL()
		uopts = &redis.UniversalOptions{Addrs: c.Addrs(), IsClusterMode: true}
		return nil
	case m == ModeSentinel:
		s, err := StartSentinel()
		if err != nil {
			return err
		}
		stopTest, urlForm = s.Stop, s.URL()
		uopts = &redis.UniversalOptions{Addrs: s.SentinelAddrs(), MasterName: s.MasterName()}
		return nil
	default:
		return fmt.Errorf("%s=%q: want %s, %s or %s", EnvMode, m, ModeSingle, ModeCluster, ModeSentinel)
	}
}

func setupURL(u string) error {
	o, err := redis.ParseURL(u)
	if err != nil {
		return fmt.Errorf("parse %s=%q: %w", EnvURL, u, err)
	}
	uopts = &redis.UniversalOptions{Addrs: []string{o.Addr}, Username: o.Username, Password: o.Password, DB: o.DB, TLSConfig: o.TLSConfig}
	urlForm = u
	return ping(o, 5*time.Second)
}

func setupSingle() error {
	dir, err := os.MkdirTemp("", "sluice-redis-")
	if err != nil {
		return err
	}
	g := &group{dir: dir}
	p, err := startProc(dir, false, "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction")
	if err != nil {
		g.stop()
		return err
	}
	g.add(p)
	stopTest = g.stop
	urlForm = "redis://" + p.addr + "/0"
	uopts = &redis.UniversalOptions{Addrs: []string{p.addr}}
	return nil
}

// CurrentMode returns the mode Main set up. It panics before Main has run.
func CurrentMode() Mode {
	_ = Options()
	return mode
}

// URL is the test Redis as a URL Sluice's config accepts (redis.url,
// SLUICE_REDIS_URL), for code under test that takes one (subprocesses,
// config): redis://host:port/db for a single node, redis+cluster://… for a
// Cluster, redis+sentinel://…?master_name=… for Sentinel. It panics before
// Main has run.
func URL() string {
	_ = Options()
	return urlForm
}

// Addr is the host:port of the single-node test Redis. It fails t in the
// other modes: a test that needs one address (a proxy in front of Redis)
// runs in single mode only — see RequireSingle.
func Addr(t testing.TB) string {
	t.Helper()
	if CurrentMode() != ModeSingle {
		t.Fatalf("redistest.Addr in mode %s: only a single node has one address", mode)
	}
	return Options().Addrs[0]
}

// RequireSingle skips t, with a logged reason, unless the test binary runs
// against a single node: for the few tests that need one address (a proxy
// in front of Redis, a restart of the server). The single-node run of the
// suite covers them.
func RequireSingle(t testing.TB, why string) {
	t.Helper()
	if m := CurrentMode(); m != ModeSingle {
		t.Skipf("needs a single node (%s); covered by the single-node run, this run is %s", why, m)
	}
}

// Options returns a copy of the options of the test Redis:
// redis.NewUniversalClient of it gives a client of the mode's kind (change
// ClientName and the like first). It panics before Main has run.
func Options() *redis.UniversalOptions {
	mu.Lock()
	defer mu.Unlock()
	if uopts == nil {
		panic("redistest: call redistest.Main(m) from TestMain")
	}
	o := *uopts
	o.Addrs = slices.Clone(o.Addrs)
	return &o
}

// New returns a client to the test Redis — a *redis.Client for a single
// node or Sentinel (a failover client), a *redis.ClusterClient for a
// Cluster — and a key prefix unique to t. The client is closed when t
// ends. Keys are not deleted: the prefix isolates them.
func New(t testing.TB) (redis.UniversalClient, string) {
	t.Helper()
	return NewClient(t, Options()), Prefix(t)
}

// NewClient returns a client built from o (from Options), closed when t
// ends.
func NewClient(t testing.TB, o *redis.UniversalOptions) redis.UniversalClient {
	t.Helper()
	rdb := redis.NewUniversalClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

var unsafe = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// Prefix returns a key prefix unique to t: readable (it names the test) and
// free of hash-tag braces and key separators.
func Prefix(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := unsafe.ReplaceAllString(t.Name(), "_")
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return "test-" + name + "-" + hex.EncodeToString(b[:])
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func ping(o *redis.Options, within time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: o.Addr, Username: o.Username, Password: o.Password, DB: o.DB, MaxRetries: -1})
	defer c.Close()
	return pingUntil(c, within, nil)
}

// EvalOnlyClient returns a client (of the test Redis's kind) of a new ACL
// user who may run every command but the function commands (FUNCTION,
// FCALL, FCALL_RO get NOPERM): a managed Redis that allows scripts but not
// Functions. The user is created through admin — on every node of a
// Cluster — named after prefix and deleted, and the client closed, when t
// ends.
func EvalOnlyClient(t testing.TB, admin redis.UniversalClient, prefix string) redis.UniversalClient {
	t.Helper()
	user := "evalonly-" + prefix
	if err := onEveryNode(context.Background(), admin, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all",
		"-function", "-fcall", "-fcall_ro"); err != nil {
		t.Fatalf("create eval-only user: %v", err)
	}
	t.Cleanup(func() { _ = onEveryNode(context.Background(), admin, "ACL", "DELUSER", user) })
	o := Options()
	o.Username, o.Password = user, "pw"
	return NewClient(t, o)
}
