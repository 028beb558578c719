package client_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/throttlertest"
)

// bins are the throttler and worker binaries the tests run.
var bins throttlertest.Binaries

func TestMain(m *testing.M) {
	var err error
	if bins, err = throttlertest.Build(); err != nil {
		fmt.Fprintln(os.Stderr, "client tests:", err)
		os.Exit(1)
	}
	redistest.Main(m)
}

// deployment is a real throttler (and, when asked, a worker) on the
// harness Redis, with a client for each key of throttlertest.Defaults.
type deployment struct {
	url             string
	cfg             string
	admin, producer *client.Client
}

// deploy starts a throttler with cfg over throttlertest.Defaults, and a
// worker when withWorker is set.
func deploy(t *testing.T, cfg throttlertest.Config, withWorker bool) *deployment {
	t.Helper()
	path := cfg.Write(t)
	p := bins.StartThrottler(t, path, "")
	if withWorker {
		bins.StartWorker(t, path, "")
	}
	return &deployment{url: p.URL, cfg: path,
		admin:    newClient(t, p.URL, throttlertest.AdminKey),
		producer: newClient(t, p.URL, throttlertest.ProducerKey)}
}

// newClient is a client of url with key over a transport of t's own,
// closed when t ends.
func newClient(t *testing.T, url, key string, opts ...client.Option) *client.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c, err := client.New(url, key, append([]client.Option{client.WithHTTPClient(&http.Client{Transport: tr})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// cutProxy forwards HTTP connections to a throttler; the first cuts
// connections close as soon as the throttler's answer starts — after the
// throttler handled the request, before the client reads a byte of it.
type cutProxy struct {
	ln     net.Listener
	target string
	cuts   atomic.Int32 // connections still to cut
	cut    atomic.Int32 // connections cut
	wg     sync.WaitGroup
}

func newCutProxy(t *testing.T, target string, cuts int) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	p.cuts.Store(int32(cuts))
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *cutProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.serve(conn) }()
	}
}

func (p *cutProxy) serve(conn net.Conn) {
	defer conn.Close()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(up, conn); up.Close() }() // the client hung up: so does the throttler's side
	if p.cuts.Add(-1) >= 0 {
		var b [1]byte
		_, _ = up.Read(b[:]) // the answer started: the request was handled
		p.cut.Add(1)
		return // both sides closed, the answer unread
	}
	_, _ = io.Copy(conn, up)
}
