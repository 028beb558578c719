package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// proc is one redis-server process (a data node or a sentinel) the harness
// started, on 127.0.0.1:port.
type proc struct {
	addr   string
	log    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// startProc starts redis-server with args on a free loopback port (one
// whose port+10000 is free too when bus is set: a Cluster node's bus) and
// waits until it answers PING. args come after the port, bind, dir and log
// options. A port taken between probe and bind is retried on another.
func startProc(dir string, bus bool, args ...string) (*proc, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not on PATH (install it, e.g. apt-get install redis-server, or set %s): %w", EnvURL, err)
	}
	var lastErr error
	for range 5 {
		port, err := freePortFor(bus)
		if err != nil {
			return nil, err
		}
		p, err := launch(bin, dir, port, args)
		if err == nil {
			return p, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func launch(bin, dir string, port int, args []string) (*proc, error) {
	name := "redis-" + strconv.Itoa(port)
	p := &proc{
		addr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		log:    filepath.Join(dir, name+".log"),
		exited: make(chan struct{}),
	}
	full := []string{}
	if len(args) > 0 && strings.HasSuffix(args[0], ".conf") {
		full, args = append(full, args[0]), args[1:] // a config file comes first
	}
	full = append(full, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", dir, "--loglevel", "warning", "--logfile", p.log)
	p.cmd = exec.Command(bin, append(full, args...)...)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	if err := p.awaitPing(10 * time.Second); err != nil {
		p.kill()
		log, _ := os.ReadFile(p.log)
		return nil, fmt.Errorf("redis-server on %s: %w; log: %s", p.addr, err, strings.TrimSpace(string(log)))
	}
	return p, nil
}

// awaitPing waits until p answers PING, or fails when p exits or within
// passes.
func (p *proc) awaitPing(within time.Duration) error {
	c := p.client()
	defer c.Close()
	return pingUntil(c, within, p.exited)
}

// pingUntil PINGs through c until it answers, failing when gone is closed
// (nil: never) or within passes.
func pingUntil(c *redis.Client, within time.Duration, gone <-chan struct{}) error {
	deadline := time.Now().Add(within)
	for {
		select {
		case <-gone:
			return errors.New("exited")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer within %s: %w", within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill sends SIGKILL (kill -9) and waits for the process to be gone.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// alive reports whether the process has not exited.
func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// client returns a client to this one process; the caller closes it.
func (p *proc) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: p.addr, MaxRetries: -1, DialTimeout: time.Second})
}

// freePortFor returns a free loopback port; with bus, one whose port+10000
// (a Cluster node's bus port) is free too.
func freePortFor(bus bool) (int, error) {
	for range 100 {
		port, err := freePort()
		if err != nil {
			return 0, err
		}
		if !bus {
			return port, nil
		}
		if port+10000 > 65535 {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		if err != nil {
			continue
		}
		_ = l.Close()
		return port, nil
	}
	return 0, errors.New("no free port with a free cluster bus port after 100 tries")
}

// waitFor checks cond every 20 ms until it returns nil, or returns its last
// error wrapped with what after within.
func waitFor(within time.Duration, what string, cond func(ctx context.Context) error) error {
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := cond(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s: %w", what, within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// group is the processes of one setup (a Cluster, a Sentinel setup) and the
// directory they share. Its methods are safe for concurrent use.
type group struct {
	mu    sync.Mutex
	dir   string
	procs []*proc
}

func (g *group) add(p *proc) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.procs = append(g.procs, p)
}

// snapshot returns the processes, killed ones included, in start order.
func (g *group) snapshot() []*proc {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.procs)
}

// addrs returns the processes' addresses in start order.
func (g *group) addrs() []string {
	ps := g.snapshot()
	addrs := make([]string, len(ps))
	for i, p := range ps {
		addrs[i] = p.addr
	}
	return addrs
}

// live returns the processes of ps that have not exited.
func live(ps []*proc) []*proc {
	var out []*proc
	for _, p := range ps {
		if p.alive() {
			out = append(out, p)
		}
	}
	return out
}

// kill kills the live process at addr (kill -9) and waits until it is gone;
// it is an error when no live process has that address.
func (g *group) kill(addr string) error {
	for _, p := range live(g.snapshot()) {
		if p.addr == addr {
			p.kill()
			return nil
		}
	}
	return fmt.Errorf("no live process at %s", addr)
}

// stop kills every process and removes the directory. Idempotent.
func (g *group) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range g.procs {
		p.kill()
	}
	if g.dir != "" {
		_ = os.RemoveAll(g.dir)
		g.dir = ""
	}
}
