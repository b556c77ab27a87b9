package endpoints

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// maxMemberSliceEndpoints is the API server's limit on endpoints per
// EndpointSlice; a member that sends more is lying, and the rest is dropped.
const maxMemberSliceEndpoints = 1000

// Sanitize returns src without what the hub's API server would reject or a
// well-behaved member could never have sent: endpoints whose address is not
// an address of the slice's type, or whose hostname, node name or zone is
// invalid; slices with invalid ports; endpoints past the per-slice limit;
// an unnamed port beside named ones (no Service port can map to it, and
// Endpoints subsets could not hold it).
// Each endpoint keeps only its first address, the one consumers use. dropped
// counts the endpoints removed. src is not modified; when nothing is
// dropped, the slices are returned as they are.
func Sanitize(src Source) (out Source, dropped int) {
	out = src
	var clean []*discoveryv1.EndpointSlice
	for i, sl := range src.Slices {
		keep, n := sanitizeSlice(sl)
		if n == 0 && keep == sl {
			if clean != nil {
				clean = append(clean, sl)
			}
			continue
		}
		dropped += n
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
	return out, dropped
}

// sanitizeSlice returns sl itself when it is clean, a cleaned copy, or nil
// when nothing of it can be used; n counts the endpoints dropped.
func sanitizeSlice(sl *discoveryv1.EndpointSlice) (*discoveryv1.EndpointSlice, int) {
	if sl == nil {
		return nil, 0
	}
	if sl.AddressType != discoveryv1.AddressTypeIPv4 && sl.AddressType != discoveryv1.AddressTypeIPv6 {
		return sl, 0 // FQDN slices are never aggregated anyway
	}
	for _, p := range sl.Ports {
		if !validPort(p) {
			return nil, len(sl.Endpoints)
		}
	}
	dropPort, dropPorts := portsToDrop(sl.Ports)
	bad := 0
	for i := range sl.Endpoints {
		if i >= maxMemberSliceEndpoints || !validEndpoint(sl.AddressType, &sl.Endpoints[i]) || len(sl.Endpoints[i].Addresses) > 1 {
			bad++
		}
	}
	if bad == 0 && dropPorts == 0 {
		return sl, 0
	}
	c := sl.DeepCopy()
	if dropPorts > 0 {
		c.Ports = c.Ports[:0]
		for i, p := range sl.Ports {
			if !dropPort[i] {
				c.Ports = append(c.Ports, *p.DeepCopy())
			}
		}
	}
	c.Endpoints = c.Endpoints[:0]
	dropped := 0
	for i, ep := range sl.Endpoints {
		if i >= maxMemberSliceEndpoints || !validEndpoint(sl.AddressType, &sl.Endpoints[i]) {
			dropped++
			continue
		}
		ep = *ep.DeepCopy()
		ep.Addresses = ep.Addresses[:1]
		c.Endpoints = append(c.Endpoints, ep)
	}
	return c, dropped
}

func validEndpoint(at discoveryv1.AddressType, ep *discoveryv1.Endpoint) bool {
	if len(ep.Addresses) == 0 {
		return false
	}
	a, err := netip.ParseAddr(ep.Addresses[0])
	if err != nil || a.Zone() != "" || a.String() != ep.Addresses[0] {
		return false
	}
	if (at == discoveryv1.AddressTypeIPv4) != a.Is4() {
		return false
	}
	if ep.Hostname != nil && len(validation.IsDNS1123Label(*ep.Hostname)) > 0 {
		return false
	}
	if ep.NodeName != nil && len(validation.IsDNS1123Subdomain(*ep.NodeName)) > 0 {
		return false
	}
	if ep.Zone != nil && len(validation.IsValidLabelValue(*ep.Zone)) > 0 {
		return false
	}
	if ep.Hints != nil {
		for _, z := range ep.Hints.ForZones {
			if len(validation.IsValidLabelValue(z.Name)) > 0 {
				return false
			}
		}
		for _, n := range ep.Hints.ForNodes {
			if len(validation.IsDNS1123Subdomain(n.Name)) > 0 {
				return false
			}
		}
	}
	return true
}

func validPort(p discoveryv1.EndpointPort) bool {
	if p.Name != nil && *p.Name != "" && len(validation.IsDNS1123Label(*p.Name)) > 0 {
		return false
	}
	if p.Port != nil && (*p.Port < 1 || *p.Port > 65535) {
		return false
	}
	if p.Protocol != nil {
		switch *p.Protocol {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			return false
		}
	}
	if p.AppProtocol != nil && len(validation.IsQualifiedName(*p.AppProtocol)) > 0 {
		return false
	}
	return true
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
