// Package addresses decides which endpoint addresses a member may put into
// the hub's routing. What a member returns is data its admin, or whoever
// owns it, controls; its API server's validation is not ours to rely on.
// An address becomes a hub endpoint only if it is a unicast host address,
// outside the hub's own Service IP ranges, outside the operator's denied
// ranges and, when allowed ranges are set, inside them.
package addresses

import (
	"fmt"
	"net/netip"
	"strings"
)

// Reason is why an endpoint is refused; the zero value accepts it. The
// String values are metric label values.
type Reason uint8

const (
	// Accepted: the endpoint may be aggregated.
	Accepted Reason = iota
	// Invalid: not an address of its slice's type, or an endpoint the hub's
	// API server would reject (see endpoints.Sanitize).
	Invalid
	// Special: loopback, link-local, unspecified, multicast, broadcast,
	// reserved, IPv4-mapped or IPv4-compatible IPv6.
	Special
	// HubServiceRange: inside one of the hub's Service IP ranges.
	HubServiceRange
	// DeniedRange: inside one of the operator's denied ranges.
	DeniedRange
	// NotAllowedRange: outside the allowed ranges (the daemon's, or the
	// member registration's).
	NotAllowedRange

	// NumReasons counts the reasons, Accepted included.
	NumReasons = iota
)

// Refused lists the reasons an endpoint can be refused for, in order.
var Refused = []Reason{Invalid, Special, HubServiceRange, DeniedRange, NotAllowedRange}

func (r Reason) String() string {
	switch r {
	case Accepted:
		return "accepted"
	case Invalid:
		return "invalid"
	case Special:
		return "special_address"
	case HubServiceRange:
		return "hub_service_range"
	case DeniedRange:
		return "denied_range"
	case NotAllowedRange:
		return "not_allowed_range"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Verdict is what Check decided of one address: the reason, and what it
// matched (a kind of address, or a range) for messages.
type Verdict struct {
	Reason Reason
	Detail string
}

func (v Verdict) String() string {
	switch v.Reason {
	case Accepted:
		return "accepted"
	case Invalid:
		return "invalid: " + v.Detail
	case Special:
		return v.Detail + " address"
	case HubServiceRange:
		return "inside the hub's Service range " + v.Detail
	case DeniedRange:
		return "inside the denied range " + v.Detail
	case NotAllowedRange:
		return "outside the allowed ranges" + v.Detail
	}
	return v.Reason.String()
}

// special are the ranges no member endpoint may be in, most specific
// first, each with what it is.
var special = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/32"), "unspecified"},
	{netip.MustParsePrefix("0.0.0.0/8"), `"this network"`},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// SpecialKind returns what a that is not a unicast host address is
// (loopback, link-local, ...), or "" for a unicast host address.
func SpecialKind(a netip.Addr) string {
	for _, s := range special {
		if s.prefix.Contains(a) {
			return s.what
		}
	}
	return ""
}

// Policy is what the daemon accepts of one member's addresses. The zero
// value accepts every unicast host address.
type Policy struct {
	// HubServiceRanges are the hub's Service IP ranges (its ServiceCIDRs).
	HubServiceRanges []netip.Prefix
	// Denied are the operator's denied ranges.
	Denied []netip.Prefix
	// Allowed, when not empty, are the only ranges accepted.
	Allowed []netip.Prefix
	// MemberAllowed, when not nil, are a member registration's own: an
	// address must be in it too (a registration narrows, never widens).
	// Empty and not nil accepts nothing, as for a list that cannot be read.
	MemberAllowed []netip.Prefix
}

// Check decides whether a member endpoint at a may be aggregated. a must
// be valid; zones are refused.
func (p *Policy) Check(a netip.Addr) Verdict {
	if !a.IsValid() || a.Zone() != "" {
		return Verdict{Invalid, "not an address without a zone"}
	}
	if what := SpecialKind(a); what != "" {
		return Verdict{Special, what}
	}
	if r, ok := containing(p.HubServiceRanges, a); ok {
		return Verdict{HubServiceRange, r.String()}
	}
	if r, ok := containing(p.Denied, a); ok {
		return Verdict{DeniedRange, r.String()}
	}
	if len(p.Allowed) > 0 {
		if _, ok := containing(p.Allowed, a); !ok {
			return Verdict{NotAllowedRange, " of --allowed-endpoint-cidrs"}
		}
	}
	if p.MemberAllowed != nil {
		if _, ok := containing(p.MemberAllowed, a); !ok {
			return Verdict{NotAllowedRange, " of the member's registration"}
		}
	}
	return Verdict{}
}

func containing(ranges []netip.Prefix, a netip.Addr) (netip.Prefix, bool) {
	for _, r := range ranges {
		if r.Contains(a) {
			return r, true
		}
	}
	return netip.Prefix{}, false
}

// ParsePrefixes parses CIDRs ("10.0.0.0/8", "fd00::/8"), as flags and
// annotations give them; a prefix with host bits set is refused, so that
// what an operator wrote is what is enforced.
func ParsePrefixes(cidrs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range cidrs {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR: %w", s, err)
		}
		if p.Masked() != p {
			return nil, fmt.Errorf("%q has host bits set (did you mean %s?)", s, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}
