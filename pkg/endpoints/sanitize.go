package endpoints

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/addresses"
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
// never have sent (the projection's Invalid endpoints: see ProjectSlice;
// and past the per-slice limit), slices with invalid ports, endpoints
// whose address policy refuses (see addresses.Policy: special addresses,
// the hub's Service ranges, denied and not-allowed ranges), and an unnamed
// port beside named ones (no Service port can map to it, and Endpoints
// subsets could not hold it). The other endpoints of a slice stay.
// refused counts what was removed, by reason, in the member's order. src
// is not modified; when nothing is refused, the slices are returned as
// they are. A nil policy checks only what the hub would reject.
func Sanitize(src Source, policy *addresses.Policy) (out Source, refused Refusals) {
	if policy == nil {
		policy = &addresses.Policy{}
	}
	out = src
	var clean []*MemberSlice
	for i, sl := range src.Slices {
		keep := sanitizeSlice(sl, policy, &refused)
		if keep == sl {
			if clean != nil {
				clean = append(clean, sl)
			}
			continue
		}
		if clean == nil {
			clean = append(make([]*MemberSlice, 0, len(src.Slices)), src.Slices[:i]...)
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

// maxSlicePorts is the API's bound on an EndpointSlice's ports.
const maxSlicePorts = 20000

// sanitizeSlice returns sl itself when it is clean, a cleaned copy, or nil
// when nothing of it can be used, and adds what it refused to r.
func sanitizeSlice(sl *MemberSlice, p *addresses.Policy, r *Refusals) *MemberSlice {
	if sl == nil {
		return nil
	}
	if !sl.isIP() {
		return sl // FQDN slices are never aggregated anyway
	}
	total := len(sl.Endpoints) + len(sl.Invalid)
	if len(sl.Ports) > maxSlicePorts {
		if total > 0 {
			r.add(sl.firstAddress(), addresses.Verdict{Reason: addresses.Invalid, Detail: fmt.Sprintf("the slice has %d ports, over the API's %d", len(sl.Ports), maxSlicePorts)}, total)
		}
		return nil
	}
	for _, port := range sl.Ports {
		if !validPort(port) {
			if total > 0 {
				r.add(sl.firstAddress(), addresses.Verdict{Reason: addresses.Invalid, Detail: "the slice has an invalid port"}, total)
			}
			return nil
		}
	}
	dropPort, dropPorts := portsToDrop(sl.Ports)
	pastLimit := addresses.Verdict{Reason: addresses.Invalid, Detail: "past the API's 1000 endpoints per slice"}
	// Walk the endpoints in the member's order: Invalid ones stand at
	// their Index, the others fill the positions in between.
	var verdicts []addresses.Verdict // of sl.Endpoints; nil while every one is accepted
	for i, inv := 0, 0; i < total; i++ {
		if inv < len(sl.Invalid) && sl.Invalid[inv].Index == i {
			inv++
			continue
		}
		j := i - inv
		v := p.Check(sl.Endpoints[j].Addr())
		if i >= maxMemberSliceEndpoints {
			v = pastLimit
		}
		if v.Reason != addresses.Accepted && verdicts == nil {
			verdicts = make([]addresses.Verdict, len(sl.Endpoints))
		}
		if verdicts != nil {
			verdicts[j] = v
		}
	}
	if verdicts == nil && dropPorts == 0 && len(sl.Invalid) == 0 {
		return sl
	}
	c := *sl // metadata and ports are read-only, so shared
	c.Invalid = nil
	if dropPorts > 0 {
		c.Ports = make([]discoveryv1.EndpointPort, 0, len(sl.Ports)-dropPorts)
		for i, port := range sl.Ports {
			if !dropPort[i] {
				c.Ports = append(c.Ports, *port.DeepCopy())
			}
		}
	}
	c.Endpoints = make([]MemberEndpoint, 0, len(sl.Endpoints))
	for i, inv := 0, 0; i < total; i++ {
		if inv < len(sl.Invalid) && sl.Invalid[inv].Index == i {
			v := addresses.Verdict{Reason: addresses.Invalid, Detail: sl.Invalid[inv].Detail}
			if i >= maxMemberSliceEndpoints {
				v = pastLimit
			}
			r.add(sl.Invalid[inv].Address, v, 1)
			inv++
			continue
		}
		j := i - inv
		if verdicts != nil && verdicts[j].Reason != addresses.Accepted {
			r.add(sl.Endpoints[j].Addr().String(), verdicts[j], 1)
			continue
		}
		c.Endpoints = append(c.Endpoints, sl.Endpoints[j])
	}
	return &c
}

func validPort(p discoveryv1.EndpointPort) bool {
	return portProblem(ptr.Deref(p.Name, ""), p.Port, p.Protocol, p.AppProtocol) == ""
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
		name := ptr.Deref(p.Name, "")
		if name == "" || seen[name] {
			drop[i] = true
			n++
			continue
		}
		seen[name] = true
	}
	return drop, n
}
