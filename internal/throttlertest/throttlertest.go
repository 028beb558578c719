// Package throttlertest runs Sluice's own binaries for the tests of
// programs that talk to its API from outside (the Go client, the sluice
// CLI): Build compiles cmd/throttler and cmd/worker (and any other command
// a test needs) once per test process; Start runs them on the harness
// Redis (internal/redistest) with a configuration file of the test's. No
// stand-in for the API: the answers are the real server's.
package throttlertest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// StartTimeout bounds a process's start: configuration, Redis, readiness.
const StartTimeout = 30 * time.Second

// binDirPattern names the directories binaries are built in, one per test
// process, by pid: redistest.Main ends the process with os.Exit, so the
// next run removes the directories of processes that have ended.
const binDirPattern = "sluice-throttlertest-bin-"

// Binaries are the built commands, by name ("throttler", "worker",
// "sluice").
type Binaries map[string]string

// Build builds cmd/throttler, cmd/worker and the module's packages extra
// (e.g. "cmd/sluice"), without the race detector (the processes' races are
// their packages' tests' business), into a directory of this process.
func Build(extra ...string) (Binaries, error) {
	removeStale()
	dir := filepath.Join(os.TempDir(), binDirPattern+strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pkgs := append([]string{"cmd/throttler", "cmd/worker"}, extra...)
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, p := range pkgs {
		args = append(args, "github.com/sluicehq/sluice/"+p)
	}
	out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go build %v: %w\n%s", pkgs, err, out)
	}
	bins := Binaries{}
	for _, p := range pkgs {
		bins[filepath.Base(p)] = filepath.Join(dir, filepath.Base(p))
	}
	return bins, nil
}

// removeStale removes the binary directories of test processes that ended.
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), binDirPattern+"*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), binDirPattern))
		if err == nil && pid != os.Getpid() && syscall.Kill(pid, 0) == syscall.ESRCH {
			_ = os.RemoveAll(d)
		}
	}
}

// Config is a throttler's and worker's configuration, by top-level
// section: each value is the section's YAML in flow style ("{prefix: x}").
// Redis's prefix is the test's own (redistest.Prefix) unless the redis
// section is given.
type Config map[string]string

// Write writes c, over Defaults, as t's configuration file and returns
// its path.
func (c Config) Write(t testing.TB) string {
	t.Helper()
	all := maps.Clone(Defaults)
	all["redis"] = "{prefix: " + redistest.Prefix(t) + ", request_timeout: 2s}"
	maps.Copy(all, c)
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(all)) {
		fmt.Fprintf(&b, "%s: %s\n", k, all[k])
	}
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The API keys of Defaults.
const (
	AdminKey    = "admin-test-key"    // admin, every tenant, the limit "search"
	ProducerKey = "producer-test-key" // not admin, tenants acme-*
	// SecretsKey is the secrets.key of Defaults (32 zero bytes, base64).
	SecretsKey = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
)

// Defaults is the configuration Config.Write starts from: two keys, a
// generous API limit, a limit "search" (3 per hour), secrets by API on,
// the task queue "default", loopback receivers allowed, webhooks unsigned
// unless a tenant has secrets, quick retries.
var Defaults = Config{
	"listen": "127.0.0.1:0",
	"auth": fmt.Sprintf(`{keys: [{name: admin, key: %q, tenants: ["*"], admin: true, limits: [search]}, `+
		`{name: producer, key: %q, tenants: ["acme-*"]}]}`, AdminKey, ProducerKey),
	"limits":      "{api: {algorithm: sliding_window, limit: 1000000, window: 1s}, search: {algorithm: gcra, rate: 3/h, burst: 3}}",
	"defaults":    "{rate: 100/s, burst: 10, adaptive: false, unsigned: true, timeout: 2s, retry: {max_attempts: 2, min_backoff: 100ms, max_backoff: 200ms}}",
	"secrets":     "{key: " + SecretsKey + "}",
	"task_queues": "[default]",
	"egress":      `{allow: ["127.0.0.0/8"]}`,
	"worker":      "{concurrency: 4, shutdown_timeout: 2s}",
	"log":         "{format: json, level: info}",
}

// Proc is a running binary; it is killed when its test ends, and its log's
// tail shown when the test failed.
type Proc struct {
	// URL is a throttler's base URL ("http://127.0.0.1:port").
	URL    string
	cmd    *exec.Cmd
	logs   *redistest.SyncBuffer
	exited chan struct{}
}

// StartThrottler starts the throttler binary with the configuration file
// cfg on the Redis at redisURL ("" = the harness's) and returns once its
// /readyz answers 200.
func (b Binaries) StartThrottler(t testing.TB, cfg, redisURL string) *Proc {
	t.Helper()
	p := start(t, b["throttler"], cfg, redisURL)
	redistest.PollMsg(t, StartTimeout, func() (bool, string) {
		if p.ended() {
			t.Fatalf("throttler ended before listening:\n%s", p.logs.String())
		}
		for _, m := range p.logged("throttler listening") {
			if addr, ok := m["addr"].(string); ok {
				p.URL = "http://" + addr
			}
		}
		return p.URL != "", "the throttler did not log its address"
	})
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	redistest.PollMsg(t, StartTimeout, func() (bool, string) {
		resp, err := hc.Get(p.URL + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, "/readyz answered " + resp.Status
	})
	return p
}

// StartWorker starts the worker binary (no metrics listener) and returns
// once it serves its queues.
func (b Binaries) StartWorker(t testing.TB, cfg, redisURL string) *Proc {
	t.Helper()
	p := start(t, b["worker"], cfg, redisURL, "--metrics-listen", "off")
	redistest.PollMsg(t, StartTimeout, func() (bool, string) {
		if p.ended() {
			t.Fatalf("worker ended before running:\n%s", p.logs.String())
		}
		return len(p.logged("worker running")) > 0, "the worker did not log that it runs"
	})
	return p
}

func start(t testing.TB, bin, cfg, redisURL string, args ...string) *Proc {
	t.Helper()
	if bin == "" {
		t.Fatal("throttlertest: binary not built (Build)")
	}
	if redisURL == "" {
		redisURL = redistest.URL()
	}
	cmd := exec.Command(bin, append([]string{"--config", cfg}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "SLUICE_REDIS_URL="+redisURL)
	p := &Proc{cmd: cmd, logs: &redistest.SyncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("--- %s log:\n%s", filepath.Base(bin), tail(p.logs.String(), 40))
		}
	})
	return p
}

func (p *Proc) ended() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// logged returns the JSON log lines whose msg is msg.
func (p *Proc) logged(msg string) []map[string]any {
	var out []map[string]any
	for line := range strings.Lines(p.logs.String()) {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
