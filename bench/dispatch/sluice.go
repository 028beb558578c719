package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// setup is one Sluice run's configuration.
type setup struct {
	name        string
	defaultRate string            // defaults.rate, e.g. "1000/s"
	defaultConc int               // defaults.concurrency (per tenant)
	tenants     map[string]string // tenant → its override, YAML flow map
	workerConc  int               // worker.concurrency
	startWorker bool              // start the worker with the throttler (else call startWorker)
	extra       string            // further top-level YAML sections, e.g. "retention: {succeeded: 30s}\n"
}

// sluice is a running throttler and, once started, a worker.
type sluice struct {
	e          *env
	s          setup
	config     string
	api        string // http://host:port
	throttler  *proc
	worker     *proc
	metrics    string // the worker's /metrics base URL
	rs0        redisStats
	started    time.Time
	throttlers int    // throttler starts, for log names
	tag        string // in log names: one of several throttlers or workers on one config
	capacity   int    // the workers' capacity startWorker waits for; 0: s.workerConc
}

// config renders s as the YAML file both binaries read (docs/design.md §7):
// admission, backlog caps and the API's own limiter set so that nothing is
// refused, loopback webhooks allowed and sent unsigned (the receiver checks
// no signatures; without unsigned a tenant with no secret is refused); a
// Redis Cluster of seed addresses addrs when not empty, else the single node
// of $SLUICE_REDIS_URL.
func (s setup) config(tci time.Duration, fetchers int, addrs []string) string {
	var b strings.Builder
	cluster := ""
	if len(addrs) > 0 {
		cluster = fmt.Sprintf(", addrs: [%s]", strings.Join(addrs, ", "))
	}
	fmt.Fprintf(&b, `redis: {prefix: %s, shards: %d%s}
auth:
  keys:
    - {name: bench, key: %s, tenants: ["*"], admin: true}
defaults:
  unsigned: true
  rate: %s
  burst: 1
  concurrency: %d
  admit: {rate: 1000000/s, burst: 1000000}
  max_backlog: 100000000
  max_backlog_bytes: 8GiB
limits:
  api: {algorithm: sliding_window, limit: 50000000, window: 1m}
egress: {allow: ["127.0.0.0/8"]}
worker: {concurrency: %d, task_check_interval: %s%s}
log: {level: warn}
`, prefix, shards, cluster, apiKey, s.defaultRate, s.defaultConc, s.workerConc, tci, fetchersField(fetchers))
	if len(s.tenants) > 0 {
		b.WriteString("tenants:\n")
		for t, o := range s.tenants {
			fmt.Fprintf(&b, "  %s: %s\n", t, o)
		}
	}
	b.WriteString(s.extra)
	return b.String()
}

// fetchersField is the worker's fetchers setting in its flow mapping, or
// nothing for the default.
func fetchersField(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(", fetchers: %d", n)
}

// startSluice flushes Redis, writes s's configuration and starts the
// throttler (and the worker when s.startWorker), waiting until the API is
// ready (and the worker's capacity is announced).
func (e *env) startSluice(ctx context.Context, s setup) (*sluice, error) {
	if err := e.flush(ctx); err != nil {
		return nil, err
	}
	*e.runs++
	base := filepath.Join(e.o.dir, fmt.Sprintf("%02d-%s", *e.runs, s.name))
	conf := s.config(e.o.tci, e.o.fetchers, e.addrs)
	if e.o.planner != "" {
		conf += "dispatch: {planner: " + e.o.planner + "}\n"
	}
	if err := os.WriteFile(base+".yaml", []byte(conf), 0o600); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	rs0, err := e.redisStats(ctx)
	if err != nil {
		return nil, err
	}
	sl := &sluice{e: e, s: s, config: base + ".yaml", api: "http://" + port, rs0: rs0, started: time.Now()}
	if err := sl.startThrottler(ctx); err != nil {
		return nil, err
	}
	if s.startWorker {
		if err := sl.startWorker(ctx); err != nil {
			sl.stop()
			return nil, err
		}
	}
	return sl, nil
}

// redisEnv is the environment that points a Sluice process at the Redis:
// $SLUICE_REDIS_URL for a single node; nothing for a Cluster (its
// addresses are in the config file).
func (e *env) redisEnv() []string {
	if len(e.addrs) > 0 {
		return nil
	}
	return []string{"SLUICE_REDIS_URL=" + e.o.redisURL}
}

// startThrottler starts the throttler (again) and waits until it is ready.
func (sl *sluice) startThrottler(ctx context.Context) error {
	var err error
	sl.throttler, err = startProc("throttler", sl.e.o.throttler, []string{"--config", sl.config},
		append(sl.e.redisEnv(), "SLUICE_LISTEN="+strings.TrimPrefix(sl.api, "http://")),
		fmt.Sprintf("%s-throttler%s-%d.log", strings.TrimSuffix(sl.config, ".yaml"), sl.tag, sl.throttlers))
	if err != nil {
		return err
	}
	sl.throttlers++
	if err := sl.waitReady(ctx); err != nil {
		sl.stop()
		return err
	}
	return nil
}

func (sl *sluice) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if sl.throttler.exited() {
			return fmt.Errorf("throttler exited: %s", sl.throttler.tail(20))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, sl.api+"/readyz", nil)
		if resp, err := sl.e.http.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("throttler not ready after 20s: %s", sl.throttler.tail(20))
}

// startWorker starts the worker and waits until its capacity (sl.capacity
// when set: the total of several) is announced.
func (sl *sluice) startWorker(ctx context.Context) error {
	base := strings.TrimSuffix(sl.config, ".yaml")
	maddr, err := freePort()
	if err != nil {
		return err
	}
	sl.metrics = "http://" + maddr
	sl.worker, err = startProc("worker", sl.e.o.worker, []string{"--config", sl.config, "--metrics-listen", maddr},
		sl.e.redisEnv(), base+"-worker"+sl.tag+".log")
	if err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if sl.worker.exited() {
			return fmt.Errorf("worker exited: %s", sl.worker.tail(20))
		}
		if c, err := sl.e.st.Capacity(ctx); err == nil && c >= cmp.Or(sl.capacity, sl.s.workerConc) {
			return nil
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("worker announced no capacity after 20s: %s", sl.worker.tail(20))
}

// stop stops the throttler (no more releases), then the worker.
func (sl *sluice) stop() {
	sl.throttler.stop(10 * time.Second)
	if sl.worker != nil {
		sl.worker.stop(10 * time.Second)
	}
}

// problems returns the warning and error lines of both logs (the
// plaintext-key warning excepted), at most n of each.
func (sl *sluice) problems(n int) string {
	var b strings.Builder
	for _, p := range []*proc{sl.throttler, sl.worker} {
		if p == nil {
			continue
		}
		lines := p.grep(func(l string) bool {
			return (strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR")) &&
				!strings.Contains(l, "plaintext")
		}, n)
		for _, l := range lines {
			fmt.Fprintf(&b, "  %s: %s\n", p.name, l)
		}
	}
	return b.String()
}

// proc is a child process whose output goes to a log file. It is killed
// when this program dies (Linux).
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func startProc(name, bin string, args, env []string, log string) (*proc, error) {
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and, after timeout, SIGKILL.
func (p *proc) stop(timeout time.Duration) {
	if p == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail is the last n lines of the log, on one line.
func (p *proc) tail(n int) string {
	lines := p.grep(func(string) bool { return true }, 0)
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// grep returns the log lines keep accepts, the first n (all when n = 0).
func (p *proc) grep(keep func(string) bool, n int) []string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() && (n == 0 || len(out) < n) {
		if keep(sc.Text()) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// freePort returns 127.0.0.1:<a free port>.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

var errTimeout = errors.New("timed out")
