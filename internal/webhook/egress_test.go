package webhook

import (
	"errors"
	"net/netip"
	"testing"
)

var loopback4 = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

func TestCheckAddr(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		allow  []netip.Prefix
		reason string // "" = permitted
	}{
		{"93.184.215.14", nil, ""},
		{"8.8.8.8", nil, ""},
		{"1.1.1.1", nil, ""},
		{"172.32.0.1", nil, ""},  // just past 172.16/12
		{"100.128.0.1", nil, ""}, // just past 100.64/10
		{"198.20.0.1", nil, ""},  // just past 198.18/15
		{"2606:4700::6810:85e5", nil, ""},
		{"2a00:1450:4001:80b::200e", nil, ""},
		{"127.0.0.1", nil, "loopback"},
		{"127.255.255.254", nil, "loopback"},
		{"10.1.2.3", nil, "private"},
		{"172.16.0.1", nil, "private"},
		{"172.31.255.255", nil, "private"},
		{"192.168.0.1", nil, "private"},
		{"169.254.169.254", nil, "metadata"},
		{"169.254.170.2", nil, "metadata"},
		{"169.254.0.1", nil, "link_local"},
		{"100.64.0.1", nil, "cgnat"},
		{"100.127.255.255", nil, "cgnat"},
		{"100.100.100.200", nil, "metadata"},
		{"224.0.0.1", nil, "multicast"},
		{"239.255.255.250", nil, "multicast"},
		{"0.0.0.0", nil, "unspecified"},
		{"0.1.2.3", nil, "this_network"},
		{"255.255.255.255", nil, "broadcast"},
		{"240.0.0.1", nil, "reserved"},
		{"192.0.0.8", nil, "ietf_protocol"},
		{"192.0.2.1", nil, "documentation"},
		{"198.51.100.1", nil, "documentation"},
		{"203.0.113.1", nil, "documentation"},
		{"198.18.0.1", nil, "benchmarking"},
		{"198.19.255.255", nil, "benchmarking"},
		{"192.88.99.1", nil, "6to4_relay"},
		{"::1", nil, "loopback"},
		{"::", nil, "unspecified"},
		{"::127.0.0.1", nil, "non_global_ipv6"},     // IPv4-compatible (deprecated)
		{"::ffff:0:7f00:1", nil, "non_global_ipv6"}, // IPv4-translated
		{"100::1", nil, "non_global_ipv6"},          // discard-only
		{"fc00::1", nil, "unique_local"},
		{"fd12:3456::1", nil, "unique_local"},
		{"fd00:ec2::254", nil, "metadata"},
		{"fe80::1", nil, "link_local"},
		{"fe80::1%eth0", nil, "link_local"},
		{"fec0::1", nil, "site_local"},
		{"ff02::1", nil, "multicast"},
		{"2001:db8::1", nil, "documentation"},
		{"3fff::1", nil, "documentation"},
		{"2001::1", nil, "teredo"},
		{"2001:2::1", nil, "ietf_protocol"}, // benchmarking
		{"64:ff9b:1::1", nil, "nat64_local"},
		{"::ffff:127.0.0.1", nil, "loopback"},
		{"::ffff:10.0.0.1", nil, "private"},
		{"::ffff:169.254.169.254", nil, "metadata"},
		{"64:ff9b::7f00:1", nil, "nat64_loopback"},
		{"64:ff9b::a9fe:a9fe", nil, "nat64_metadata"},
		{"64:ff9b::5db8:d70e", nil, ""}, // NAT64 of 93.184.215.14
		{"2002:7f00:1::1", nil, "6to4_loopback"},
		{"2002:c0a8:101::1", nil, "6to4_private"},
		{"2002:5db8:d70e::1", nil, ""}, // 6to4 of 93.184.215.14
		// the allow-list opens ranges, in every form of the address
		{"127.0.0.1", loopback4, ""},
		{"::ffff:127.0.0.1", loopback4, ""},
		{"64:ff9b::7f00:1", loopback4, ""},
		{"::1", loopback4, "loopback"},
		{"10.0.0.1", loopback4, "private"},
		{"10.9.8.7", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, ""},
		{"fd00::5", []netip.Prefix{netip.MustParsePrefix("fd00::/8")}, ""},
		{"169.254.169.254", []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16")}, ""},
	} {
		err := CheckAddr(netip.MustParseAddr(tc.addr), tc.allow)
		if tc.reason == "" {
			if err != nil {
				t.Errorf("CheckAddr(%s, %v) = %v, want permitted", tc.addr, tc.allow, err)
			}
			continue
		}
		var ee *EgressError
		if !errors.As(err, &ee) || !errors.Is(err, ErrEgressDenied) {
			t.Errorf("CheckAddr(%s, %v) = %v, want an *EgressError", tc.addr, tc.allow, err)
			continue
		}
		if ee.Reason != tc.reason {
			t.Errorf("CheckAddr(%s) reason = %q, want %q", tc.addr, ee.Reason, tc.reason)
		}
	}
	if err := CheckAddr(netip.Addr{}, nil); !errors.Is(err, ErrEgressDenied) {
		t.Errorf("CheckAddr(invalid) = %v, want ErrEgressDenied", err)
	}
}

func TestCheckLiteral(t *testing.T) {
	for _, tc := range []struct {
		url    string
		allow  []netip.Prefix
		reason string // "" = nil error
	}{
		{"https://hooks.example.com/in", nil, ""},
		{"https://93.184.215.14/x", nil, ""},
		{"http://[2606:4700::1]:8443/", nil, ""},
		{"https://rebind.example/", nil, ""}, // a name: judged at dial time
		{"http://127.0.0.1/", nil, "loopback"},
		{"http://127.0.0.1./", nil, "loopback"},
		{"http://10.0.0.1:8080/", nil, "private"},
		{"http://169.254.169.254/latest/meta-data/", nil, "metadata"},
		{"http://[::1]/", nil, "loopback"},
		{"http://[::ffff:127.0.0.1]/", nil, "loopback"},
		{"http://[::ffff:a9fe:a9fe]/", nil, "metadata"},
		{"http://[fe80::1%25eth0]/", nil, "link_local"},
		{"http://[fd00:ec2::254]/", nil, "metadata"},
		{"http://[64:ff9b::a00:1]/", nil, "nat64_private"},
		{"http://2130706433/", nil, "noncanonical_ip"},
		{"http://0177.0.0.1/", nil, "noncanonical_ip"},
		{"http://0x7f.1/", nil, "noncanonical_ip"},
		{"http://0X7F.0.0.1/", nil, "noncanonical_ip"},
		{"http://0x7f000001/", nil, "noncanonical_ip"},
		{"http://127.1/", nil, "noncanonical_ip"},
		{"http://127.0.1/", nil, "noncanonical_ip"},
		{"http://017700000001/", nil, "noncanonical_ip"},
		{"http://0/", nil, "noncanonical_ip"},
		{"http://1.2.3.4.5/", nil, "noncanonical_ip"},
		{"http://127.000.000.001/", nil, "noncanonical_ip"},
		{"http://8.8.8.010/", nil, "noncanonical_ip"}, // octal even when public
		{"http://localhost/", nil, "loopback"},
		{"http://LocalHost.:8080/", nil, "loopback"},
		{"http://api.localhost/", nil, "loopback"},
		{"http://127.1/", loopback4, "noncanonical_ip"}, // an ambiguous spelling stays refused
		{"http://127.0.0.1:9000/", loopback4, ""},
		{"http://localhost:9000/", loopback4, ""},
	} {
		err := CheckLiteral(tc.url, tc.allow)
		if tc.reason == "" {
			if err != nil {
				t.Errorf("CheckLiteral(%q) = %v, want nil", tc.url, err)
			}
			continue
		}
		var ee *EgressError
		if !errors.As(err, &ee) || !errors.Is(err, ErrEgressDenied) {
			t.Errorf("CheckLiteral(%q) = %v, want an *EgressError", tc.url, err)
			continue
		}
		if ee.Reason != tc.reason {
			t.Errorf("CheckLiteral(%q) reason = %q, want %q", tc.url, ee.Reason, tc.reason)
		}
	}
	for _, bad := range []string{"http://[::1", "http:///path", "://x"} {
		if err := CheckLiteral(bad, nil); err == nil || errors.Is(err, ErrEgressDenied) {
			t.Errorf("CheckLiteral(%q) = %v, want a parse error that is not ErrEgressDenied", bad, err)
		}
	}
}

func TestEgressErrorMessage(t *testing.T) {
	err := CheckLiteral("http://[::ffff:127.0.0.1]/", nil)
	if got, want := err.Error(), "egress denied: ::ffff:127.0.0.1 (127.0.0.1): loopback"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

func TestControlRefusesSocketAddress(t *testing.T) {
	g := &guard{allow: loopback4}
	for addr, denied := range map[string]bool{
		"10.0.0.1:80":           true,
		"[::1]:80":              true,
		"[::ffff:10.0.0.1]:443": true,
		"garbage":               true,
		"127.0.0.1:80":          false,
		"93.184.215.14:443":     false,
	} {
		err := g.control("tcp", addr, nil)
		if denied != errors.Is(err, ErrEgressDenied) {
			t.Errorf("control(%q) = %v, want denied=%v", addr, err, denied)
		}
	}
}

func TestDestination(t *testing.T) {
	for in, want := range map[string]string{
		"https://API.Example.com/hook?x=1": "https://api.example.com:443",
		"http://example.com/":              "http://example.com:80",
		"HTTP://example.com:8080/a":        "http://example.com:8080",
		"https://[::1]:8443/":              "https://[::1]:8443",
		"https://user:pw@h.example/p":      "https://h.example:443",
		"ftp://example.com/":               "",
		"/relative":                        "",
		"::bad":                            "",
	} {
		got, ok := Destination(in)
		if got != want || ok != (want != "") {
			t.Errorf("Destination(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}
