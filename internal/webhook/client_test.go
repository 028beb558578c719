package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/wire"
)

// counting is an HTTP receiver on 127.0.0.1 that counts the TCP
// connections it accepted and the requests it served.
type counting struct {
	*httptest.Server
	conns, requests atomic.Int64
	port            string
}

func newCounting(t testing.TB, h http.HandlerFunc) *counting {
	t.Helper()
	c := &counting{}
	c.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.requests.Add(1)
		h(w, r)
	}))
	c.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			c.conns.Add(1)
		}
	}
	c.Start()
	t.Cleanup(c.Close)
	_, c.port, _ = net.SplitHostPort(c.Listener.Addr().String())
	return c
}

func noContent(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }

// fakeDNS resolves the names of the tests without the network.
type fakeDNS map[string][]netip.Addr

func (f fakeDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, v := range s {
		out[i] = netip.MustParseAddr(v)
	}
	return out
}

var testDNS = fakeDNS{
	"rebind.test":   addrs("127.0.0.1"),
	"internal.test": addrs("10.1.2.3", "fd12::1"),
	"mapped.test":   addrs("::ffff:192.168.0.1"),
	"metadata.test": addrs("169.254.169.254", "fd00:ec2::254"),
	"public.test":   addrs("10.0.0.1", "93.184.215.14"),
}

// routed returns a client whose permitted dials all go to rcv, whatever
// address passed the check, and the addresses that were dialled.
func routed(t testing.TB, rcv *counting, allow []netip.Prefix) (*http.Client, func() []string) {
	var mu sync.Mutex
	var dialled []string
	cfg := ClientConfig{Allow: allow, Resolver: testDNS}
	cfg.dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		mu.Lock()
		dialled = append(dialled, address)
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, network, rcv.Listener.Addr().String())
	}
	c := NewClient(cfg)
	t.Cleanup(c.CloseIdleConnections)
	return c, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), dialled...) }
}

// direct returns a client with the production dialer (Control hook included).
func direct(t testing.TB, allow []netip.Prefix) *http.Client {
	c := NewClient(ClientConfig{Allow: allow, Resolver: testDNS})
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// getURL delivers an http GET job for url with a short attempt timeout.
func getURL(c *http.Client, url string) Result {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return Deliver(ctx, c, Request{ID: "j0_t", Job: job.Spec{Type: wire.TypeHTTP, Method: http.MethodGet, URL: url}})
}

// deniedTargets are refused without the allow-list; PORT is the receiver's.
var deniedTargets = []string{
	// IPv4
	"http://127.0.0.1:PORT/", "http://127.8.9.10:PORT/", "http://10.0.0.1/", "http://172.16.5.4/",
	"http://172.31.255.255/", "http://192.168.1.1/", "http://169.254.169.254/latest/meta-data/",
	"http://169.254.1.1/", "http://100.64.0.1/", "http://100.100.100.200/", "http://224.0.0.1/",
	"http://0.0.0.0:PORT/", "http://0.1.2.3/", "http://255.255.255.255/", "http://240.0.0.1/",
	"http://192.0.2.10/", "http://198.51.100.7/", "http://203.0.113.9/", "http://198.18.0.1/",
	"http://192.0.0.8/",
	// IPv6 and IPv4 inside IPv6
	"http://[::1]:PORT/", "http://[::]:PORT/", "http://[fc00::1]/", "http://[fd00:ec2::254]/",
	"http://[fe80::1%25lo]:PORT/", "http://[ff02::1]/", "http://[2001:db8::1]/", "http://[3fff::1]/",
	"http://[fec0::1]/", "http://[2001::5efe:7f00:1]/", "http://[::127.0.0.1]:PORT/",
	"http://[::ffff:127.0.0.1]:PORT/", "http://[::ffff:7f00:1]:PORT/", "http://[0:0:0:0:0:ffff:7f00:1]:PORT/",
	"http://[::ffff:169.254.169.254]/", "http://[::ffff:10.0.0.1]/",
	"http://[64:ff9b::7f00:1]:PORT/", "http://[64:ff9b::a9fe:a9fe]/", "http://[2002:7f00:1::1]:PORT/",
	"http://[2002:c0a8:101::1]/",
	// numeric host encodings of 127.0.0.1
	"http://2130706433:PORT/", "http://0177.0.0.1:PORT/", "http://0x7f.1:PORT/", "http://0x7f000001:PORT/",
	"http://127.1:PORT/", "http://017700000001:PORT/", "http://127.0.0.1.:PORT/", "http://0:PORT/",
	"http://127.000.000.001:PORT/",
	// names
	"http://localhost:PORT/", "http://LOCALHOST.:PORT/", "http://api.localhost:PORT/",
	"http://rebind.test:PORT/", "http://internal.test/", "http://mapped.test/", "http://metadata.test/",
}

// TestEgressMatrixDenied: every refused target fails with ErrEgressDenied
// and no TCP connection reaches the receiver — neither with every permitted
// dial routed to the receiver (so a wrongly permitted address of any range
// would be counted) nor with the production dialer (so a loopback target
// would be counted).
func TestEgressMatrixDenied(t *testing.T) {
	for _, mode := range []string{"routed", "real"} {
		t.Run(mode, func(t *testing.T) {
			rcv := newCounting(t, noContent)
			c, dialled := routed(t, rcv, nil)
			if mode == "real" {
				c = direct(t, nil)
			}
			for _, target := range deniedTargets {
				url := strings.ReplaceAll(target, "PORT", rcv.port)
				res := getURL(c, url)
				if !errors.Is(res.Err, ErrEgressDenied) || res.Status != 0 {
					t.Errorf("%s: status %d, err %v; want ErrEgressDenied", url, res.Status, res.Err)
				}
				if kind, _, reason := Classify(res.Status, res.Header, res.Err, time.Now()); kind != wire.FinishPermanent || reason != ReasonEgressDenied {
					t.Errorf("%s: Classify = %v %q, want permanent egress_denied", url, kind, reason)
				}
			}
			if n := rcv.conns.Load(); n != 0 {
				t.Fatalf("receiver accepted %d connections, want 0", n)
			}
			if d := dialled(); len(d) != 0 {
				t.Fatalf("dialled %v, want nothing", d)
			}
			t.Logf("%d targets refused, 0 connections", len(deniedTargets))
		})
	}
}

// TestEgressMatrixPermitted: public addresses pass the check (routed to the
// receiver) — the guard is not deny-all — and a name that resolves to both
// a refused and a public address is dialled on the public one only.
func TestEgressMatrixPermitted(t *testing.T) {
	for target, wantDial := range map[string]string{
		"http://93.184.215.14:PORT/":          "93.184.215.14:PORT",
		"http://[2606:4700::6810:85e5]:PORT/": "[2606:4700::6810:85e5]:PORT",
		"http://[64:ff9b::5db8:d70e]:PORT/":   "[64:ff9b::5db8:d70e]:PORT",
		"http://[2002:5db8:d70e::1]:PORT/":    "[2002:5db8:d70e::1]:PORT",
		"http://[::ffff:93.184.215.14]:PORT/": "93.184.215.14:PORT",
		"http://public.test:PORT/":            "93.184.215.14:PORT",
	} {
		rcv := newCounting(t, noContent)
		c, dialled := routed(t, rcv, nil)
		res := getURL(c, strings.ReplaceAll(target, "PORT", rcv.port))
		if res.Err != nil || res.Status != http.StatusNoContent {
			t.Errorf("%s: status %d, err %v; want 204", target, res.Status, res.Err)
		}
		want := strings.ReplaceAll(wantDial, "PORT", rcv.port)
		if d := dialled(); len(d) != 1 || d[0] != want {
			t.Errorf("%s: dialled %v, want [%s]", target, d, want)
		}
		if rcv.conns.Load() != 1 {
			t.Errorf("%s: receiver connections %d, want 1", target, rcv.conns.Load())
		}
	}
}

// TestEgressAllowLoopback: with egress.allow 127.0.0.0/8 the loopback
// receiver is reached by the production dialer in its IPv4, mapped and
// localhost forms, while other ranges, IPv6 loopback and ambiguous numeric
// spellings stay refused.
func TestEgressAllowLoopback(t *testing.T) {
	rcv := newCounting(t, noContent)
	c := direct(t, loopback4)
	for _, target := range []string{"http://127.0.0.1:PORT/", "http://localhost:PORT/", "http://[::ffff:127.0.0.1]:PORT/", "http://rebind.test:PORT/"} {
		url := strings.ReplaceAll(target, "PORT", rcv.port)
		if res := getURL(c, url); res.Err != nil || res.Status != http.StatusNoContent {
			t.Errorf("%s: status %d, err %v; want 204", url, res.Status, res.Err)
		}
	}
	if rcv.requests.Load() != 4 {
		t.Fatalf("receiver served %d requests, want 4", rcv.requests.Load())
	}
	before := rcv.conns.Load()
	for _, target := range []string{"http://[::1]:PORT/", "http://10.0.0.1:PORT/", "http://2130706433:PORT/", "http://127.1:PORT/", "http://[fe80::1%25lo]:PORT/"} {
		url := strings.ReplaceAll(target, "PORT", rcv.port)
		if res := getURL(c, url); !errors.Is(res.Err, ErrEgressDenied) {
			t.Errorf("%s with allow 127/8: err %v, want ErrEgressDenied", url, res.Err)
		}
	}
	if rcv.conns.Load() != before {
		t.Fatalf("refused targets opened %d connections", rcv.conns.Load()-before)
	}
}

// TestRedirectNotFollowed: a 302 to the loopback receiver is returned as a
// permanent failure and the target sees no connection, with or without the
// allow-list.
func TestRedirectNotFollowed(t *testing.T) {
	target := newCounting(t, noContent)
	redirector := newCounting(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://127.0.0.1:"+target.port+"/", http.StatusFound)
	})
	noAllow, _ := routed(t, redirector, nil) // public.test → the redirector
	withAllow := direct(t, loopback4)
	for name, tc := range map[string]struct {
		c   *http.Client
		url string
	}{
		"no allow-list":     {noAllow, "http://public.test:" + redirector.port + "/"},
		"allow 127.0.0.0/8": {withAllow, redirector.URL + "/"},
	} {
		res := getURL(tc.c, tc.url)
		if res.Err != nil || res.Status != http.StatusFound {
			t.Errorf("%s: status %d, err %v; want the 302 itself", name, res.Status, res.Err)
		}
		if kind, _, reason := Classify(res.Status, res.Header, res.Err, time.Now()); kind != wire.FinishPermanent || reason != "http_302" {
			t.Errorf("%s: Classify = %v %q, want permanent http_302", name, kind, reason)
		}
	}
	if redirector.requests.Load() != 2 || target.conns.Load() != 0 {
		t.Fatalf("redirector served %d (want 2), redirect target accepted %d connections (want 0)",
			redirector.requests.Load(), target.conns.Load())
	}
}

// TestProxyFromEnvironmentIgnored: the transport has no proxy function even
// when the environment names one, and the request goes straight out.
func TestProxyFromEnvironmentIgnored(t *testing.T) {
	proxy := newCounting(t, noContent)
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("HTTPS_PROXY", proxy.URL)
	t.Setenv("NO_PROXY", "")
	rcv := newCounting(t, noContent)
	c, _ := routed(t, rcv, nil)
	if tr, ok := c.Transport.(*http.Transport); !ok || tr.Proxy != nil {
		t.Fatalf("transport %T has a Proxy function", c.Transport)
	}
	if res := getURL(c, "http://public.test:"+rcv.port+"/"); res.Status != http.StatusNoContent {
		t.Fatalf("status %d, err %v", res.Status, res.Err)
	}
	if proxy.conns.Load() != 0 || rcv.requests.Load() != 1 {
		t.Fatalf("proxy connections %d (want 0), receiver requests %d (want 1)", proxy.conns.Load(), rcv.requests.Load())
	}
}

func TestDNSFailureIsRetryable(t *testing.T) {
	rcv := newCounting(t, noContent)
	c, _ := routed(t, rcv, nil)
	res := getURL(c, "http://nowhere.test/")
	kind, _, reason := Classify(res.Status, res.Header, res.Err, time.Now())
	if kind != wire.FinishRetry || reason != ReasonDNS {
		t.Fatalf("Classify(%v) = %v %q, want retry dns_error", res.Err, kind, reason)
	}
}

func ExampleCheckLiteral() {
	for _, u := range []string{"https://hooks.example.com/in", "http://0x7f.1/", "http://[::ffff:169.254.169.254]/"} {
		fmt.Println(CheckLiteral(u, nil))
	}
	// Output:
	// <nil>
	// egress denied: 0x7f.1: noncanonical_ip
	// egress denied: ::ffff:169.254.169.254 (169.254.169.254): metadata
}
