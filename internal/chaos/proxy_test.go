package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer answers every line with the same line, on loopback.
func echoServer(t *testing.T) string {
	t.Helper()
	return server(t, func(c net.Conn) { _, _ = io.Copy(c, c) })
}

// server serves each connection with serve (then closes it), on loopback,
// until the test ends; it returns the address.
func server(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { serve(c); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().String()
}

func newProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := Listen(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatalf("dial the proxy: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip writes line and reads the echo within d; it returns the echo
// and the error of the read.
func roundTrip(c net.Conn, r *bufio.Reader, line string, d time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	s, err := r.ReadString('\n')
	if len(s) > 0 {
		s = s[:len(s)-1]
	}
	return s, err
}

func TestProxyForwards(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	for _, line := range []string{"ping", "pong", "a longer line of bytes"} {
		if got, err := roundTrip(c, r, line, 2*time.Second); err != nil || got != line {
			t.Fatalf("echo of %q through the proxy: %q, %v", line, got, err)
		}
	}
}

func TestLatencyIsAddedEachWay(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, "warm", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	const lat = 60 * time.Millisecond
	p.SetLatency(lat)
	start := time.Now()
	if got, err := roundTrip(c, r, "slow", 2*time.Second); err != nil || got != "slow" {
		t.Fatalf("echo with latency: %q, %v", got, err)
	}
	if took := time.Since(start); took < 2*lat {
		t.Errorf("round trip with %s each way took %s, want ≥ %s", lat, took, 2*lat)
	}
	p.SetLatency(0)
	start = time.Now()
	if _, err := roundTrip(c, r, "fast", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= 2*lat {
		t.Errorf("round trip after SetLatency(0) took %s, want < %s", took, 2*lat)
	}
}

func TestCutClosesEveryOpenConnection(t *testing.T) {
	p := newProxy(t)
	type conn struct {
		c net.Conn
		r *bufio.Reader
	}
	var cs []conn
	for range 3 {
		c, r := dial(t, p)
		if _, err := roundTrip(c, r, "hi", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, conn{c, r})
	}
	if n := p.Cut(); n != 3 {
		t.Errorf("Cut closed %d connections, want 3", n)
	}
	for i, c := range cs {
		_ = c.c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := c.r.ReadString('\n')
		var ne net.Error
		if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
			t.Errorf("connection %d after Cut: read %v, want it closed", i, err)
		}
	}
	if got := p.Open(); got != 0 {
		t.Errorf("%d connections open after Cut, want 0", got)
	}
	c, r := dial(t, p) // a new connection works
	if got, err := roundTrip(c, r, "again", 2*time.Second); err != nil || got != "again" {
		t.Fatalf("echo after Cut: %q, %v", got, err)
	}
}

func TestBlackholeAcceptsAndNeverAnswersUntilResume(t *testing.T) {
	p := newProxy(t)
	old, oldR := dial(t, p)
	if _, err := roundTrip(old, oldR, "before", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	// An open connection carries nothing.
	if got, err := roundTrip(old, oldR, "held", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("open connection in the black hole: %q, %v, want a timeout", got, err)
	}
	// A new one is accepted (the dial succeeds) and gets no answer.
	fresh, freshR := dial(t, p)
	if got, err := roundTrip(fresh, freshR, "new", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("new connection in the black hole: %q, %v, want a timeout", got, err)
	}
	p.Resume()
	// The held bytes go through on resume, the new connection is connected.
	_ = old.SetReadDeadline(time.Now().Add(2 * time.Second))
	if got, err := oldR.ReadString('\n'); err != nil || got != "held\n" {
		t.Errorf("open connection after Resume: %q, %v, want the held line", got, err)
	}
	_ = fresh.SetReadDeadline(time.Now().Add(2 * time.Second))
	if got, err := freshR.ReadString('\n'); err != nil || got != "new\n" {
		t.Errorf("new connection after Resume: %q, %v, want its line", got, err)
	}
	if got, err := roundTrip(fresh, freshR, "after", 2*time.Second); err != nil || got != "after" {
		t.Errorf("echo after Resume: %q, %v", got, err)
	}
}

// TestDropRepliesLetsRequestsThroughAndLosesTheAnswers: while replies are
// dropped the target still gets every request (it answers them: the echoes
// are counted at the target) and the client reads nothing; after Resume
// the dropped answers stay lost and the next one arrives.
func TestDropRepliesLetsRequestsThroughAndLosesTheAnswers(t *testing.T) {
	var lines atomic.Int64
	target := server(t, func(c net.Conn) { // an echo that counts the lines it read
		r := bufio.NewReader(c)
		for {
			s, err := r.ReadString('\n')
			if err != nil {
				return
			}
			lines.Add(1)
			if _, err := io.WriteString(c, s); err != nil {
				return
			}
		}
	})
	p, err := Listen(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, r := dial(t, p)
	if got, err := roundTrip(c, r, "before", 2*time.Second); err != nil || got != "before" {
		t.Fatalf("echo before: %q, %v", got, err)
	}
	p.DropReplies()
	if got, err := roundTrip(c, r, "lost", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("reply while dropping: %q, %v, want a timeout", got, err)
	}
	if n := lines.Load(); n != 2 {
		t.Errorf("the target read %d lines, want 2: a request goes through while its reply is dropped", n)
	}
	p.Resume()
	if got, err := roundTrip(c, r, "after", 2*time.Second); err != nil || got != "after" {
		t.Errorf("echo after Resume: %q, %v; want \"after\" (the dropped reply stays lost)", got, err)
	}
}

func TestCloseEndsEverything(t *testing.T) {
	p, err := Listen(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c, r := dial(t, p)
	p.Blackhole()
	_, _ = roundTrip(c, r, "x", 50*time.Millisecond)
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Error("the proxy accepts after Close")
	}
}

// TestBytesInFlightLandAfterTheSenderCloses: bytes the proxy holds for a
// latency reach the target at their due time even when the client closed
// meanwhile, as a request sent by a caller that gave up still lands;
// InFlight counts them until they do.
func TestBytesInFlightLandAfterTheSenderCloses(t *testing.T) {
	got := make(chan string, 1)
	target := server(t, func(c net.Conn) {
		if s, err := bufio.NewReader(c).ReadString('\n'); err == nil {
			got <- s
		}
	})
	p, err := Listen(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, _ := dial(t, p)
	p.SetLatency(time.Second)
	if _, err := io.WriteString(c, "late\n"); err != nil {
		t.Fatal(err)
	}
	redistest.Poll(t, 2*time.Second, "the proxy holding the line", func() bool { return p.InFlight() > 0 })
	if n := p.InFlight(); n != 1 {
		t.Fatalf("InFlight %d after a write under latency, want 1", n)
	}
	_ = c.Close()
	select {
	case s := <-got:
		t.Fatalf("the target read %q while the proxy held it", s)
	default:
	}
	select {
	case s := <-got:
		if s != "late\n" {
			t.Errorf("the target read %q, want the line sent before the close", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the line sent before the client closed never reached the target")
	}
	redistest.PollMsg(t, 5*time.Second, func() (bool, string) {
		n := p.InFlight()
		return n == 0, fmt.Sprintf("InFlight %d after the line landed, want 0", n)
	})
}
