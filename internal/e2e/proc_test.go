package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// startTimeout bounds a process's start: config, Redis, readiness.
const startTimeout = 20 * time.Second

// proc is one running binary. Its output goes to logs, shown (the tail) in
// the test log when the test fails; the process is killed when the test
// ends.
type proc struct {
	t    *testing.T
	name string // "throttler-1", "worker-2": names it in messages
	cmd  *exec.Cmd
	logs *redistest.SyncBuffer
	addr string // a throttler's API address, host:port

	exited chan struct{} // closed once the process has ended and its output is read
	status *os.ProcessState
}

// startProc starts binary with args and the environment env (added to this
// process's, less any SLUICE_ variable). It does not wait for readiness.
func startProc(t *testing.T, name, binary string, args []string, env map[string]string) *proc {
	t.Helper()
	cmd := exec.Command(binary, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &proc{t: t, name: name, cmd: cmd, logs: &redistest.SyncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = cmd.Wait()
		p.status = cmd.ProcessState
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		<-p.exited
		if t.Failed() {
			t.Logf("--- %s (pid %d, %s) log tail:\n%s", name, cmd.Process.Pid, p.status, tail(p.logs.String(), 60))
		}
	})
	return p
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("… %d lines before", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// signal sends sig unless the process has ended.
func (p *proc) signal(sig syscall.Signal) {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(sig)
	}
}

// pause stops the process (SIGSTOP) until resume (SIGCONT), and returns
// once the kernel reports it stopped (state T in /proc/<pid>/stat): the
// signal is delivered asynchronously, and a process still running for a
// moment after kill(2) returned can send one more request (a lease taken
// from under the test).
func (p *proc) pause() {
	p.t.Helper()
	p.signal(syscall.SIGSTOP)
	stat := fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid)
	poll(p.t, 5*time.Second, func() (bool, string) {
		if !p.running() {
			return true, ""
		}
		b, err := os.ReadFile(stat)
		if err != nil {
			return false, err.Error()
		}
		// pid (comm) state …: comm may hold spaces, the state follows the last ')'.
		_, rest, _ := strings.Cut(string(b[bytes.LastIndexByte(b, ')')+1:]), " ")
		return strings.HasPrefix(rest, "T"), fmt.Sprintf("%s not stopped: stat %q", p.name, b)
	})
}

func (p *proc) resume() { p.signal(syscall.SIGCONT) }

// running reports whether the process has not ended.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill9 sends SIGKILL and waits for the process to end.
func (p *proc) kill9() {
	p.t.Helper()
	p.signal(syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.t.Fatalf("%s still running 10s after SIGKILL", p.name)
	}
}

// term sends SIGTERM and waits up to within for the process to end; it
// fails the test unless it exited 0 in time, and returns how long it took.
func (p *proc) term(within time.Duration) time.Duration {
	p.t.Helper()
	start := time.Now()
	p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(within):
		p.t.Fatalf("%s still running %s after SIGTERM", p.name, within)
	}
	took := time.Since(start)
	if code := p.status.ExitCode(); code != 0 {
		p.t.Fatalf("%s exited with %s after SIGTERM, want exit status 0", p.name, p.status)
	}
	return took
}

// waitLog polls the process's output until it holds want.
func (p *proc) waitLog(want string, within time.Duration) {
	p.t.Helper()
	poll(p.t, within, func() (bool, string) {
		if !p.running() {
			p.t.Fatalf("%s ended (%s) before logging %s", p.name, p.status, want)
		}
		return strings.Contains(p.logs.String(), want), fmt.Sprintf("%s did not log %s", p.name, want)
	})
}

// url is the throttler's base URL.
func (p *proc) url() string { return "http://" + p.addr }

// readyz returns the throttler's /readyz status, or 0 when it does not answer.
func (p *proc) readyz() int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url()+"/readyz", nil)
	req.Close = true // no idle connection left behind
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitReadyz polls /readyz until it answers want.
func (p *proc) waitReadyz(want int, within time.Duration) {
	p.t.Helper()
	var last int
	poll(p.t, within, func() (bool, string) {
		if !p.running() {
			p.t.Fatalf("%s ended (%s) while waiting for /readyz %d", p.name, p.status, want)
		}
		last = p.readyz()
		return last == want, fmt.Sprintf("%s: /readyz answered %d, want %d", p.name, last, want)
	})
}

// pollInterval is how often the receiver re-checks a waited-for condition.
const pollInterval = 20 * time.Millisecond

// poll is redistest.PollMsg: it calls cond until it reports done, and fails the
// test with cond's last message when within passes first.
func poll(t *testing.T, within time.Duration, cond func() (done bool, msg string)) {
	t.Helper()
	redistest.PollMsg(t, within, cond)
}

// freeAddr returns a loopback address with a port free at the time of the
// call.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// freePort is freeAddr's port.
func freePort(t *testing.T) int {
	_, port, _ := net.SplitHostPort(freeAddr(t))
	n, _ := strconv.Atoi(port)
	return n
}
