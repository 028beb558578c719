package webhook

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// Resolver looks up the addresses of a host name; *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Defaults of ClientConfig.
const (
	MaxIdleConnsPerHostDefault = 16
	TLSHandshakeTimeoutDefault = 10 * time.Second
	IdleConnTimeoutDefault     = 90 * time.Second
	// MaxResponseHeaderBytes bounds the response header block.
	MaxResponseHeaderBytes = 64 << 10
	// minDialSlice is the shortest time one address gets when the attempt's
	// deadline is shared among several resolved addresses.
	minDialSlice = 2 * time.Second
)

// ClientConfig configures NewClient. The zero value is valid: no ranges
// opened, the system resolver, default pool sizes.
type ClientConfig struct {
	// Allow opens address ranges CheckAddr would refuse (config
	// egress.allow); nil opens none.
	Allow []netip.Prefix
	// Resolver resolves host names; nil means net.DefaultResolver.
	Resolver Resolver
	// MaxIdleConnsPerHost is the keep-alive pool per host; 0 means
	// MaxIdleConnsPerHostDefault.
	MaxIdleConnsPerHost int

	// dial, when set, replaces the final connect to a checked address (tests
	// route every permitted dial to a local listener with it).
	dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// NewClient returns the *http.Client workers send every job with. It
// follows no redirects (a 3xx is returned as the response, see Classify),
// uses no proxy whatever the environment says, keeps no cookies and has no
// overall timeout (the attempt's context carries it). Its transport is
// NewTransport(cfg). Safe for concurrent use; call CloseIdleConnections when
// done with it.
func NewClient(cfg ClientConfig) *http.Client {
	return &http.Client{
		Transport: NewTransport(cfg),
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// NewTransport returns an *http.Transport whose every connection goes
// through the egress check: the dial host is classified without DNS
// (literal, localhost or name, refusing non-canonical numeric forms), a name
// is resolved once, each address is judged by CheckAddr, and only permitted
// addresses are dialled — by address, so there is no second lookup for a
// DNS rebinding to slip into. A net.Dialer.Control hook checks the socket's
// address once more just before connect. When every address is refused the
// dial fails with an *EgressError (errors.Is ErrEgressDenied) and no
// connection is attempted. Proxy is nil; HTTP/2 is attempted over TLS.
func NewTransport(cfg ClientConfig) *http.Transport {
	g := &guard{allow: cfg.Allow, resolver: cfg.Resolver, dial: cfg.dial}
	if g.resolver == nil {
		g.resolver = net.DefaultResolver
	}
	if g.dial == nil {
		d := &net.Dialer{KeepAlive: 30 * time.Second, Control: g.control}
		g.dial = d.DialContext
	}
	perHost := cfg.MaxIdleConnsPerHost
	if perHost <= 0 {
		perHost = MaxIdleConnsPerHostDefault
	}
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            g.dialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConnsPerHost:    perHost,
		IdleConnTimeout:        IdleConnTimeoutDefault,
		TLSHandshakeTimeout:    TLSHandshakeTimeoutDefault,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: MaxResponseHeaderBytes,
	}
}

// guard is the egress check wired into a transport's dialer.
type guard struct {
	allow    []netip.Prefix
	resolver Resolver
	dial     func(ctx context.Context, network, address string) (net.Conn, error)
}

// control re-checks the exact socket address before connect.
func (g *guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &EgressError{Host: address, Reason: "invalid_ip"}
	}
	return checkAddr(ap.Addr().String(), ap.Addr(), g.allow)
}

// dialContext resolves, checks and dials address ("host:port").
func (g *guard) dialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", address, err)
	}
	addrs, err := g.permitted(ctx, network, host)
	if err != nil {
		return nil, err
	}
	var errs []error
	for i, a := range addrs {
		dctx, cancel := sliceDeadline(ctx, len(addrs)-i)
		conn, err := g.dial(dctx, network, net.JoinHostPort(a.String(), port))
		cancel()
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("dial %s: %w", address, errors.Join(errs...))
}

// permitted returns the addresses of host that may be dialled on network,
// in resolver order, or the first refusal when there are none.
func (g *guard) permitted(ctx context.Context, network, host string) ([]netip.Addr, error) {
	kind, lit, err := parseHost(host)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	switch kind {
	case hostLiteral:
		addrs = []netip.Addr{lit}
	case hostLocalhost:
		addrs = localhostAddrs
	default:
		addrs, err = g.resolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("resolve %q: %w", host, err)
		}
	}
	var ok []netip.Addr
	var denied error
	for _, a := range addrs {
		a = a.WithZone("").Unmap()
		if (network == "tcp4" && !a.Is4()) || (network == "tcp6" && !a.Is6()) {
			continue
		}
		if err := checkAddr(host, a, g.allow); err != nil {
			denied = cmp.Or(denied, err)
			continue
		}
		ok = append(ok, a)
	}
	switch {
	case len(ok) > 0:
		return ok, nil
	case denied != nil:
		return nil, denied
	}
	return nil, fmt.Errorf("resolve %q: no %s address", host, network)
}

// sliceDeadline gives one of n remaining addresses its share of ctx's
// deadline (at least minDialSlice, never past the deadline), as net.Dialer
// does for several addresses; without a deadline it returns ctx.
func sliceDeadline(ctx context.Context, n int) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok || n <= 1 {
		return ctx, func() {}
	}
	left := time.Until(deadline)
	share := max(left/time.Duration(n), min(minDialSlice, left))
	return context.WithTimeout(ctx, share)
}
