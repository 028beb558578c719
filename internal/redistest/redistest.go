// Package redistest gives tests a real Redis: a redis-server started on a free
// loopback port for the test binary (or the one named by SLUICE_TEST_REDIS_URL),
// and a unique key prefix per test so tests can run with t.Parallel().
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
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// EnvURL names the environment variable that points tests at an existing Redis
// instead of starting one.
const EnvURL = "SLUICE_TEST_REDIS_URL"

var (
	mu      sync.Mutex
	opts    *redis.Options // set by Main
	started *server
)

// Main starts (or finds) the test Redis, runs the tests, stops the server it
// started, checks for leaked goroutines and exits with the tests' status.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if err := setup(); err != nil {
		fmt.Fprintf(os.Stderr, "redistest: no Redis for the tests: %v\n", err)
		return 1
	}
	code := m.Run()
	if started != nil {
		started.stop()
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
	if u := os.Getenv(EnvURL); u != "" {
		o, err := redis.ParseURL(u)
		if err != nil {
			return fmt.Errorf("parse %s=%q: %w", EnvURL, u, err)
		}
		opts = o
		return ping(o, 5*time.Second)
	}
	var lastErr error
	for range 5 { // the free port can be taken between probe and bind: retry
		s, err := startServer()
		if err == nil {
			started = s
			opts = &redis.Options{Addr: s.addr}
			return nil
		}
		lastErr = err
	}
	return lastErr
}

// URL is the address of the test Redis as a redis:// URL, for code under test
// that takes a URL (subprocesses, config). It panics before Main has run.
func URL() string {
	o := options()
	return fmt.Sprintf("redis://%s/%d", o.Addr, o.DB)
}

// Addr is the host:port of the test Redis.
func Addr() string { return options().Addr }

func options() *redis.Options {
	mu.Lock()
	defer mu.Unlock()
	if opts == nil {
		panic("redistest: call redistest.Main(m) from TestMain")
	}
	return opts
}

// New returns a client to the test Redis and a key prefix unique to t. The
// client is closed when t ends. Keys are not deleted: the prefix isolates them.
func New(t testing.TB) (*redis.Client, string) {
	t.Helper()
	o := *options()
	rdb := redis.NewClient(&o)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, Prefix(t)
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

type server struct {
	cmd  *exec.Cmd
	dir  string
	addr string
}

func startServer() (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not on PATH (install it, e.g. apt-get install redis-server, or set %s): %w", EnvURL, err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-redis-")
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--maxmemory-policy", "noeviction", "--loglevel", "warning",
		"--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	s := &server{cmd: cmd, dir: dir, addr: addr}
	if err := ping(&redis.Options{Addr: addr}, 10*time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
		s.stop()
		return nil, fmt.Errorf("redis-server on %s did not answer: %w; log: %s", addr, err, strings.TrimSpace(string(log)))
	}
	return s, nil
}

func (s *server) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	_ = os.RemoveAll(s.dir)
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
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(errors.New("ping timed out"), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// EvalOnlyClient returns a client of a new ACL user of admin's server who
// may run every command but the function commands (FUNCTION, FCALL,
// FCALL_RO get NOPERM): a managed Redis that allows scripts but not
// Functions. The user is named after prefix and deleted, and the client
// closed, when t ends.
func EvalOnlyClient(t testing.TB, admin *redis.Client, prefix string) *redis.Client {
	t.Helper()
	user := "evalonly-" + prefix
	if err := admin.Do(context.Background(), "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all",
		"-function", "-fcall", "-fcall_ro").Err(); err != nil {
		t.Fatalf("create eval-only user: %v", err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	opts := *admin.Options()
	opts.Username, opts.Password = user, "pw"
	rdb := redis.NewClient(&opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}
