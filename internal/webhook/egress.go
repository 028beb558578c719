package webhook

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// ErrEgressDenied is matched (errors.Is) by every error that refuses an
// outgoing connection or URL because of its address; the concrete error is
// an *EgressError.
var ErrEgressDenied = errors.New("egress denied")

// EgressError says which host and address were refused and why.
type EgressError struct {
	Host string     // the host as given (name or literal)
	Addr netip.Addr // the refused address; invalid for a refused host form
	// Reason is a short snake_case word: loopback, private, link_local,
	// metadata, cgnat, multicast, unspecified, broadcast, documentation,
	// benchmarking, this_network, reserved, ietf_protocol, 6to4_relay,
	// unique_local, site_local, teredo, nat64_local, non_global_ipv6,
	// noncanonical_ip (a numeric host in a form other than dotted quad),
	// invalid_ip, or one of those prefixed with "nat64_" or "6to4_" for an
	// embedded IPv4 address.
	Reason string
}

func (e *EgressError) Error() string {
	if e.Addr.IsValid() && e.Addr.String() != e.Host {
		return fmt.Sprintf("egress denied: %s (%s): %s", e.Host, e.Addr, e.Reason)
	}
	return fmt.Sprintf("egress denied: %s: %s", e.Host, e.Reason)
}

// Is makes errors.Is(err, ErrEgressDenied) true.
func (e *EgressError) Is(target error) bool { return target == ErrEgressDenied }

// CheckAddr returns nil when a may be dialled and an *EgressError otherwise.
//
// The zone is ignored and an IPv4-mapped IPv6 address (::ffff:a.b.c.d) is
// judged as its IPv4 address. An address inside any prefix of allow is
// permitted whatever else applies. Otherwise refused are: the IPv4 blocks
// that are not globally reachable (0/8, 10/8, 100.64/10, 127/8, 169.254/16,
// 172.16/12, 192.0.0/24, 192.0.2/24, 192.88.99/24, 192.168/16, 198.18/15,
// 198.51.100/24, 203.0.113/24, 224/4 multicast, 240/4 incl. broadcast),
// cloud metadata addresses (169.254.169.254, 169.254.170.2,
// 100.100.100.200, fd00:ec2::254), and every IPv6 address outside global
// unicast 2000::/3 or inside a special block of it (Teredo 2001::/32 and
// the rest of 2001::/23, documentation 2001:db8::/32 and 3fff::/20). NAT64
// 64:ff9b::/96 and 6to4 2002::/16 addresses are judged by the IPv4 address
// they embed. Safe for concurrent use; allow is only read.
func CheckAddr(a netip.Addr, allow []netip.Prefix) error {
	return checkAddr(a.String(), a, allow)
}

func checkAddr(host string, a netip.Addr, allow []netip.Prefix) error {
	if !a.IsValid() {
		return &EgressError{Host: host, Reason: "invalid_ip"}
	}
	a = a.WithZone("").Unmap()
	for _, p := range allow {
		if p.Contains(a) {
			return nil
		}
	}
	if reason := deniedReason(a); reason != "" {
		return &EgressError{Host: host, Addr: a, Reason: reason}
	}
	if embedded, kind, ok := embeddedV4(a); ok {
		if err := checkAddr(host, embedded, allow); err != nil {
			var ee *EgressError
			if errors.As(err, &ee) {
				ee.Addr, ee.Reason = a, kind+"_"+ee.Reason
			}
			return err
		}
	}
	return nil
}

// deniedReason is the reason a (unmapped, no zone) is refused, or "" when
// only its embedded IPv4 address (if any) remains to be judged.
func deniedReason(a netip.Addr) string {
	table := deniedV6
	if a.Is4() {
		table = deniedV4
	}
	for _, r := range table {
		if r.prefix.Contains(a) {
			return r.reason
		}
	}
	if a.Is6() && !globalV6.Contains(a) && !nat64WKP.Contains(a) {
		return "non_global_ipv6"
	}
	return ""
}

// embeddedV4 returns the IPv4 address inside a NAT64 (64:ff9b::/96, last 32
// bits) or 6to4 (2002::/16, bits 16–47) address.
func embeddedV4(a netip.Addr) (netip.Addr, string, bool) {
	b := a.As16()
	switch {
	case !a.Is6():
		return netip.Addr{}, "", false
	case nat64WKP.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), "nat64", true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), "6to4", true
	}
	return netip.Addr{}, "", false
}

// hostKind is what a URL or dial host is before any DNS.
type hostKind uint8

const (
	hostName      hostKind = iota // a DNS name: resolve, then check each address
	hostLiteral                   // an IP literal: check it, never resolve
	hostLocalhost                 // "localhost" or "*.localhost" (RFC 6761): loopback without DNS
)

var localhostAddrs = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}

// parseHost classifies host (no port, no brackets; a trailing dot allowed).
// Numeric hosts that libc's inet_aton or a browser would read as IPv4
// (2130706433, 0177.0.0.1, 0x7f.1, 127.1, 1.2.3.4.5) are refused unless they
// are canonical dotted quads: the WHATWG URL rule is that a host whose last
// label is a number is an IPv4 address, and Sluice accepts only the one
// unambiguous spelling of it.
func parseHost(host string) (hostKind, netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return hostLiteral, a, nil
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if a, err := netip.ParseAddr(name); err == nil && a.Is4() {
		return hostLiteral, a, nil // "127.0.0.1."
	}
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return hostLocalhost, netip.Addr{}, nil
	}
	labels := strings.Split(name, ".")
	if strings.Contains(name, ":") {
		return 0, netip.Addr{}, &EgressError{Host: host, Reason: "invalid_ip"}
	}
	if isNumericLabel(labels[len(labels)-1]) {
		return 0, netip.Addr{}, &EgressError{Host: host, Reason: "noncanonical_ip"}
	}
	return hostName, netip.Addr{}, nil
}

// isNumericLabel reports whether l is all decimal digits or 0x followed by
// hex digits (possibly none): the WHATWG "ends in a number" test.
func isNumericLabel(l string) bool {
	if l == "" {
		return false
	}
	if rest, ok := strings.CutPrefix(l, "0x"); ok {
		_, err := strconv.ParseUint("0"+rest, 16, 64)
		return err == nil || errors.Is(err, strconv.ErrRange)
	}
	return strings.Trim(l, "0123456789") == ""
}

// CheckLiteral is the enqueue-time check (docs/design.md §4.2: a 422): it returns an
// *EgressError when the host of rawURL is refused without any DNS lookup —
// an IP literal that CheckAddr refuses, a non-canonical numeric host
// (decimal, octal, hex or short forms), or "localhost" / "*.localhost" unless
// allow opens 127.0.0.1. A DNS name returns nil: it is checked on its
// resolved addresses when dialled. An unparseable URL returns an error that
// is not ErrEgressDenied (job validation reports those).
func CheckLiteral(rawURL string, allow []netip.Prefix) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("check egress of url: %w", err)
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("check egress of url: no host")
	}
	kind, a, err := parseHost(host)
	switch {
	case err != nil:
		return err
	case kind == hostLiteral:
		return checkAddr(host, a, allow)
	case kind == hostLocalhost:
		return checkAddr(host, localhostAddrs[0], allow)
	}
	return nil
}

// Destination is the circuit key of a job's URL (docs/design.md §4.5): its
// scheme, host and port, lower case, the port explicit ("https://api.example.com:443",
// "http://[::1]:8080"); false for a URL that is not absolute http(s).
func Destination(rawURL string) (string, bool) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", false
	}
	return DestinationOf(u)
}

// DestinationOf is Destination of a URL the caller has parsed (url.Parse);
// false for nil.
func DestinationOf(u *url.URL) (string, bool) {
	if u == nil || u.Host == "" {
		return "", false
	}
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	switch {
	case scheme != "http" && scheme != "https":
		return "", false
	case port == "" && scheme == "https":
		port = "443"
	case port == "":
		port = "80"
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port), true
}
