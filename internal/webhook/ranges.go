package webhook

import "net/netip"

// deniedRange is one refused block and the reason reported for it.
type deniedRange struct {
	prefix netip.Prefix
	reason string
}

func mustRanges(pairs ...string) []deniedRange {
	out := make([]deniedRange, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, deniedRange{netip.MustParsePrefix(pairs[i]), pairs[i+1]})
	}
	return out
}

// deniedV4 is every IPv4 block that is not globally reachable (IANA IPv4
// Special-Purpose Address Registry) or that reaches cloud metadata, most
// specific first so the reason names the narrowest block.
var deniedV4 = mustRanges(
	"169.254.169.254/32", "metadata", // AWS, GCP, Azure, OCI instance metadata
	"169.254.170.2/32", "metadata", // AWS ECS task metadata
	"100.100.100.200/32", "metadata", // Alibaba Cloud metadata (inside CGNAT)
	"255.255.255.255/32", "broadcast",
	"0.0.0.0/32", "unspecified",
	"0.0.0.0/8", "this_network",
	"10.0.0.0/8", "private",
	"100.64.0.0/10", "cgnat",
	"127.0.0.0/8", "loopback",
	"169.254.0.0/16", "link_local",
	"172.16.0.0/12", "private",
	"192.0.0.0/24", "ietf_protocol",
	"192.0.2.0/24", "documentation",
	"192.88.99.0/24", "6to4_relay",
	"192.168.0.0/16", "private",
	"198.18.0.0/15", "benchmarking",
	"198.51.100.0/24", "documentation",
	"203.0.113.0/24", "documentation",
	"224.0.0.0/4", "multicast",
	"240.0.0.0/4", "reserved",
)

// Only IPv6 global unicast (2000::/3) is ever dialled, less the blocks
// below; everything outside it (loopback ::1, unspecified ::, the deprecated
// IPv4-compatible ::/96, IPv4-translated ::ffff:0:0:0/96, discard 100::/64,
// SRv6 5f00::/16, unique local fc00::/7, link-local fe80::/10, site-local
// fec0::/10, multicast ff00::/8) is refused as non_global_ipv6, with
// 64:ff9b::/96 (NAT64) as the one exception that is judged by its embedded
// IPv4 address.
var (
	globalV6  = netip.MustParsePrefix("2000::/3")
	nat64WKP  = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// deniedV6 is refused inside 2000::/3 or named more precisely than
// non_global_ipv6, most specific first.
var deniedV6 = mustRanges(
	"fd00:ec2::254/128", "metadata", // AWS instance metadata over IPv6
	"::1/128", "loopback",
	"::/128", "unspecified",
	"64:ff9b:1::/48", "nat64_local", // RFC 8215 local-use NAT64: embedding varies, refuse whole
	"2001::/32", "teredo", // the client IPv4 is obfuscated and the relay is anyone's: refuse whole
	"2001::/23", "ietf_protocol", // incl. benchmarking 2001:2::/48, ORCHID 2001:10::/28, 2001:20::/28
	"2001:db8::/32", "documentation",
	"3fff::/20", "documentation", // RFC 9637
	"fc00::/7", "unique_local",
	"fe80::/10", "link_local",
	"fec0::/10", "site_local",
	"ff00::/8", "multicast",
)
