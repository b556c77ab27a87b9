package addresses

import (
	"net/netip"
	"testing"
)

func mustPrefixes(t *testing.T, s ...string) []netip.Prefix {
	t.Helper()
	p, err := ParsePrefixes(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheck(t *testing.T) {
	p := &Policy{
		HubServiceRanges: mustPrefixes(t, "10.96.0.0/12", "fd00:96::/108"),
		Denied:           mustPrefixes(t, "192.168.100.0/24"),
	}
	for _, tc := range []struct {
		addr string
		want Reason
	}{
		{"10.244.1.7", Accepted},
		{"2001:db8::7", Accepted},
		{"64:ff9b::a00:1", Accepted}, // NAT64 is unicast
		{"100.64.0.1", Accepted},
		{"127.0.0.1", Special},
		{"127.1.2.3", Special},
		{"169.254.169.254", Special},
		{"0.0.0.0", Special},
		{"0.1.2.3", Special},
		{"224.0.0.1", Special},
		{"239.255.255.250", Special},
		{"255.255.255.255", Special},
		{"240.0.0.1", Special},
		{"::", Special},
		{"::1", Special},
		{"::ffff:10.1.1.1", Special},
		{"::10.1.1.1", Special},
		{"fe80::1", Special},
		{"febf::1", Special},
		{"ff02::1", Special},
		{"10.96.0.1", HubServiceRange},
		{"10.111.255.254", HubServiceRange},
		{"10.112.0.1", Accepted},
		{"fd00:96::1", HubServiceRange},
		{"192.168.100.9", DeniedRange},
		{"192.168.101.9", Accepted},
	} {
		got := p.Check(netip.MustParseAddr(tc.addr))
		if got.Reason != tc.want {
			t.Errorf("Check(%s) = %v (%s), want %v", tc.addr, got.Reason, got, tc.want)
		}
	}
	if v := p.Check(netip.MustParseAddr("fe80::1%eth0")); v.Reason != Invalid {
		t.Errorf("a zoned address: %v, want invalid", v)
	}
	if v := p.Check(netip.Addr{}); v.Reason != Invalid {
		t.Errorf("the zero address: %v, want invalid", v)
	}
}

func TestCheckAllowedNarrowsNeverWidens(t *testing.T) {
	global := mustPrefixes(t, "10.0.0.0/8")
	member := mustPrefixes(t, "10.1.0.0/16", "172.16.0.0/12")
	for _, tc := range []struct {
		name            string
		allowed, member []netip.Prefix
		addr            string
		want            Reason
	}{
		{"no lists", nil, nil, "172.16.0.1", Accepted},
		{"inside the daemon's", global, nil, "10.2.0.1", Accepted},
		{"outside the daemon's", global, nil, "172.16.0.1", NotAllowedRange},
		{"inside both", global, member, "10.1.0.1", Accepted},
		{"inside the daemon's, outside the member's", global, member, "10.2.0.1", NotAllowedRange},
		{"the member's cannot widen the daemon's", global, member, "172.16.0.1", NotAllowedRange},
		{"the member's alone", nil, member, "172.16.0.1", Accepted},
		{"outside the member's alone", nil, member, "10.2.0.1", NotAllowedRange},
	} {
		p := &Policy{Allowed: tc.allowed, MemberAllowed: tc.member}
		if got := p.Check(netip.MustParseAddr(tc.addr)); got.Reason != tc.want {
			t.Errorf("%s: Check(%s) = %v, want %v", tc.name, tc.addr, got, tc.want)
		}
	}
	// The hub's ranges win over an allowed range that covers them.
	p := &Policy{HubServiceRanges: mustPrefixes(t, "10.96.0.0/12"), Allowed: global}
	if got := p.Check(netip.MustParseAddr("10.96.0.1")); got.Reason != HubServiceRange {
		t.Errorf("a hub ClusterIP inside an allowed range: %v, want hub_service_range", got)
	}
}

func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes([]string{" 10.0.0.0/8", "", "fd00::/8"})
	if err != nil || len(got) != 2 {
		t.Fatalf("ParsePrefixes = %v, %v; want two prefixes", got, err)
	}
	for _, bad := range []string{"10.0.0.1/8", "10.0.0.0", "10.0.0.0/33", "nope"} {
		if _, err := ParsePrefixes([]string{bad}); err == nil {
			t.Errorf("ParsePrefixes(%q) = nil error", bad)
		}
	}
}

// FuzzCheck holds Check to what it promises for any address: an accepted
// one is a global unicast address of its own family (never IPv4-mapped),
// outside the hub's ranges and the denied ones and inside the allowed ones;
// a refused one says which rule refused it, and that rule holds.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"10.96.0.1", "127.0.0.1", "169.254.169.254", "255.255.255.255", "::ffff:10.0.0.1", "fe80::1", "2001:db8::1", "10.1.2.3", "0.0.0.0"} {
		a := netip.MustParseAddr(s)
		b := a.As16()
		f.Add(b[:], a.Is4())
	}
	p := &Policy{
		HubServiceRanges: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:96::/64")},
		Denied:           []netip.Prefix{netip.MustParsePrefix("10.200.0.0/16")},
		Allowed:          []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2000::/3"), netip.MustParsePrefix("fd00::/8")},
	}
	f.Fuzz(func(t *testing.T, raw []byte, v4 bool) {
		var a netip.Addr
		switch {
		case v4 && len(raw) >= 4:
			a = netip.AddrFrom4([4]byte(raw[len(raw)-4:]))
		case len(raw) >= 16:
			a = netip.AddrFrom16([16]byte(raw[:16]))
		default:
			return
		}
		v := p.Check(a)
		in := func(ps []netip.Prefix) bool {
			_, ok := containing(ps, a)
			return ok
		}
		switch v.Reason {
		case Accepted:
			if !a.IsGlobalUnicast() || a.Is4In6() || a.IsLoopback() || a.IsMulticast() || a.IsLinkLocalUnicast() {
				t.Fatalf("%s accepted but not a unicast host address", a)
			}
			if in(p.HubServiceRanges) || in(p.Denied) || !in(p.Allowed) {
				t.Fatalf("%s accepted against the ranges", a)
			}
		case Special:
			if SpecialKind(a) == "" {
				t.Fatalf("%s refused as special (%s), but SpecialKind says it is not", a, v)
			}
		case HubServiceRange:
			if !in(p.HubServiceRanges) {
				t.Fatalf("%s refused as a hub Service address, outside the hub's ranges", a)
			}
		case DeniedRange:
			if !in(p.Denied) {
				t.Fatalf("%s refused as denied, outside the denied ranges", a)
			}
		case NotAllowedRange:
			if in(p.Allowed) {
				t.Fatalf("%s refused as not allowed, inside the allowed ranges", a)
			}
		default:
			t.Fatalf("%s: unexpected verdict %v", a, v)
		}
		if v.Reason != Special && !a.IsGlobalUnicast() {
			t.Fatalf("%s is not global unicast, yet refused as %v rather than special", a, v)
		}
	})
}

// A registration's list that cannot be read is empty, not absent: the
// member's endpoints are refused until it is fixed.
func TestCheckEmptyMemberListAcceptsNothing(t *testing.T) {
	p := &Policy{MemberAllowed: []netip.Prefix{}}
	if v := p.Check(netip.MustParseAddr("10.1.0.1")); v.Reason != NotAllowedRange {
		t.Errorf("Check = %v, want not_allowed_range", v)
	}
}
