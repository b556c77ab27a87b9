package endpoints

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/addresses"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// maxMemberSliceEndpoints is the API server's limit on endpoints per
// EndpointSlice; a member that sends more is lying, and the rest is dropped.
const maxMemberSliceEndpoints = 1000

// Refusals counts the member endpoints Sanitize refused, by reason, and
// keeps the first few for messages.
type Refusals struct {
	Counts [addresses.NumReasons]int
	// Samples are the first refused endpoints, in slice order.
	Samples []Refusal
}

// Refusal is one refused endpoint: its first address (or "" for none) and
// why it was refused.
type Refusal struct {
	Address string
	Verdict addresses.Verdict
}

// maxRefusalSamples bounds Refusals.Samples.
const maxRefusalSamples = 5

// Total is the number of endpoints refused.
func (r Refusals) Total() int {
	n := 0
	for _, c := range r.Counts[addresses.Invalid:] {
		n += c
	}
	return n
}

// String sums r up: the counts by reason, then the first refused
// endpoints with why, e.g. "2 special_address: 127.0.0.1 (loopback
// address), 0.0.0.0 (unspecified address)".
func (r Refusals) String() string {
	var counts []string
	for _, reason := range addresses.Refused {
		if n := r.Counts[reason]; n > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", n, reason))
		}
	}
	var samples []string
	for _, s := range r.Samples {
		addr := s.Address
		if addr == "" {
			addr = "(no address)"
		}
		samples = append(samples, fmt.Sprintf("%s (%s)", addr, s.Verdict))
	}
	if n := r.Total() - len(r.Samples); n > 0 {
		samples = append(samples, fmt.Sprintf("%d more", n))
	}
	return strings.Join(counts, ", ") + ": " + strings.Join(samples, ", ")
}

func (r *Refusals) add(addr string, v addresses.Verdict, n int) {
	r.Counts[v.Reason] += n
	if len(r.Samples) < maxRefusalSamples {
		r.Samples = append(r.Samples, Refusal{addr, v})
	}
}

// Sanitize returns src without what the hub must not get from a member:
// endpoints the hub's API server would reject or a well-behaved member could
// never have sent (an address not of the slice's type, an invalid hostname,
// node name or zone, invalid ports, past the per-slice limit), endpoints
// whose address policy refuses (see addresses.Policy: special addresses,
// the hub's Service ranges, denied and not-allowed ranges), and an unnamed
// port beside named ones (no Service port can map to it, and Endpoints
// subsets could not hold it). The other endpoints of a slice stay.
// Each endpoint keeps only its first address, the one consumers use, and
// is judged by it. refused counts what was removed, by reason. src is not
// modified; when nothing is refused, the slices are returned as they are.
// A nil policy checks only what the hub would reject.
func Sanitize(src Source, policy *addresses.Policy) (out Source, refused Refusals) {
	if policy == nil {
		policy = &addresses.Policy{}
	}
	out = src
	var clean []*discoveryv1.EndpointSlice
	for i, sl := range src.Slices {
		keep := sanitizeSlice(sl, policy, &refused)
		if keep == sl {
			if clean != nil {
				clean = append(clean, sl)
			}
			continue
		}
		if clean == nil {
			clean = append(make([]*discoveryv1.EndpointSlice, 0, len(src.Slices)), src.Slices[:i]...)
		}
		if keep != nil {
			clean = append(clean, keep)
		}
	}
	if clean != nil {
		out.Slices = clean
	}
	return out, refused
}

// sanitizeSlice returns sl itself when it is clean, a cleaned copy, or nil
// when nothing of it can be used, and adds what it refused to r.
func sanitizeSlice(sl *discoveryv1.EndpointSlice, p *addresses.Policy, r *Refusals) *discoveryv1.EndpointSlice {
	if sl == nil {
		return nil
	}
	if sl.AddressType != discoveryv1.AddressTypeIPv4 && sl.AddressType != discoveryv1.AddressTypeIPv6 {
		return sl // FQDN slices are never aggregated anyway
	}
	for _, port := range sl.Ports {
		if !validPort(port) {
			if len(sl.Endpoints) > 0 {
				r.add(firstAddress(&sl.Endpoints[0]), addresses.Verdict{Reason: addresses.Invalid, Detail: "the slice has an invalid port"}, len(sl.Endpoints))
			}
			return nil
		}
	}
	dropPort, dropPorts := portsToDrop(sl.Ports)
	var verdicts []addresses.Verdict // nil while every endpoint is accepted
	multi := false                   // an endpoint has more than one address
	for i := range sl.Endpoints {
		multi = multi || len(sl.Endpoints[i].Addresses) > 1
		v := checkEndpoint(sl.AddressType, &sl.Endpoints[i], p)
		if i >= maxMemberSliceEndpoints {
			v = addresses.Verdict{Reason: addresses.Invalid, Detail: "past the API's 1000 endpoints per slice"}
		}
		if v.Reason != addresses.Accepted && verdicts == nil {
			verdicts = make([]addresses.Verdict, len(sl.Endpoints))
		}
		if verdicts != nil {
			verdicts[i] = v
		}
	}
	if verdicts == nil && dropPorts == 0 && !multi {
		return sl
	}
	c := sl.DeepCopy()
	if dropPorts > 0 {
		c.Ports = c.Ports[:0]
		for i, port := range sl.Ports {
			if !dropPort[i] {
				c.Ports = append(c.Ports, *port.DeepCopy())
			}
		}
	}
	c.Endpoints = c.Endpoints[:0]
	for i, ep := range sl.Endpoints {
		if verdicts != nil && verdicts[i].Reason != addresses.Accepted {
			r.add(firstAddress(&sl.Endpoints[i]), verdicts[i], 1)
			continue
		}
		ep = *ep.DeepCopy()
		ep.Addresses = ep.Addresses[:1]
		c.Endpoints = append(c.Endpoints, ep)
	}
	return c
}

func firstAddress(ep *discoveryv1.Endpoint) string {
	if len(ep.Addresses) == 0 {
		return ""
	}
	return ep.Addresses[0]
}

// checkEndpoint judges one endpoint by its first address and its other
// fields.
func checkEndpoint(at discoveryv1.AddressType, ep *discoveryv1.Endpoint, p *addresses.Policy) addresses.Verdict {
	invalid := func(why string) addresses.Verdict {
		return addresses.Verdict{Reason: addresses.Invalid, Detail: why}
	}
	if len(ep.Addresses) == 0 {
		return invalid("no address")
	}
	a, err := netip.ParseAddr(ep.Addresses[0])
	if err != nil || a.Zone() != "" || a.String() != ep.Addresses[0] {
		return invalid("not an IP address in canonical form")
	}
	if (at == discoveryv1.AddressTypeIPv4) != a.Is4() {
		return invalid("not an address of the slice's type " + string(at))
	}
	if ep.Hostname != nil && len(validation.IsDNS1123Label(*ep.Hostname)) > 0 {
		return invalid("invalid hostname")
	}
	if ep.NodeName != nil && len(validation.IsDNS1123Subdomain(*ep.NodeName)) > 0 {
		return invalid("invalid node name")
	}
	if ep.Zone != nil && len(validation.IsValidLabelValue(*ep.Zone)) > 0 {
		return invalid("invalid zone")
	}
	if ep.Hints != nil {
		for _, z := range ep.Hints.ForZones {
			if len(validation.IsValidLabelValue(z.Name)) > 0 {
				return invalid("invalid zone hint")
			}
		}
		for _, n := range ep.Hints.ForNodes {
			if len(validation.IsDNS1123Subdomain(n.Name)) > 0 {
				return invalid("invalid node hint")
			}
		}
	}
	return p.Check(a)
}

func validPort(p discoveryv1.EndpointPort) bool {
	return portProblem(deref(p.Name), p.Port, p.Protocol, p.AppProtocol) == ""
}

// portProblem says what the hub's API server would refuse in a port of a
// slice or a Service (port nil: none given); "" for nothing.
func portProblem(name string, port *int32, protocol *corev1.Protocol, appProtocol *string) string {
	switch {
	case name != "" && len(validation.IsDNS1123Label(name)) > 0:
		return "name is not a DNS label"
	case port != nil && (*port < 1 || *port > 65535):
		return "port number out of range"
	case protocol != nil && *protocol != corev1.ProtocolTCP && *protocol != corev1.ProtocolUDP && *protocol != corev1.ProtocolSCTP:
		return "unknown protocol"
	case appProtocol != nil && len(validation.IsQualifiedName(*appProtocol)) > 0:
		return "appProtocol is not a qualified name"
	}
	return ""
}

// portsToDrop marks the ports the hub would refuse beside the others of
// their slice: an unnamed port among several, and a name used again (the
// first port of a name stays). n counts them.
func portsToDrop(ports []discoveryv1.EndpointPort) (drop []bool, n int) {
	if len(ports) < 2 {
		return nil, 0
	}
	drop = make([]bool, len(ports))
	seen := make(map[string]bool, len(ports))
	for i, p := range ports {
		name := deref(p.Name)
		if name == "" || seen[name] {
			drop[i] = true
			n++
			continue
		}
		seen[name] = true
	}
	return drop, n
}
