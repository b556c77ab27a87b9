package endpoints

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// sliceAnnotationKeys are the annotations we own on hub EndpointSlices.
var sliceAnnotationKeys = []string{AnnotationExportRecord}

// sliceLabelKeys are the labels we own on hub EndpointSlices.
var sliceLabelKeys = []string{
	discoveryv1.LabelServiceName,
	discoveryv1.LabelManagedBy,
	mcsv1beta1.LabelServiceName,
	mcsv1beta1.LabelSourceCluster,
	LabelManagedBy,
}

// SliceLabels returns the labels of the hub EndpointSlices aggregated from
// service in cluster. kubernetes.io/service-name attaches them to the derived
// Service, so that kube-proxy and DNS serve them.
func SliceLabels(namespace, service, cluster string) map[string]string {
	return map[string]string{
		discoveryv1.LabelServiceName:  DerivedServiceName(namespace, service),
		discoveryv1.LabelManagedBy:    SliceManagedByValue,
		mcsv1beta1.LabelServiceName:   service,
		mcsv1beta1.LabelSourceCluster: cluster,
		LabelManagedBy:                ManagedByValue,
	}
}

// sliceGroup holds the desired endpoints sharing an address type and a port
// set. Each hub slice holds endpoints of a single group.
type sliceGroup struct {
	// key is the group's groupKey, hash its groupHash.
	key         string
	hash        uint64
	addressType discoveryv1.AddressType
	ports       []discoveryv1.EndpointPort // sorted by comparePorts
	// endpoints maps addresses to member endpoints: they are read-only and
	// written out by hubEndpointInto. No address is made text to plan: a
	// plan that writes nothing allocates nothing per endpoint.
	endpoints map[netip.Addr]*MemberEndpoint
	// byKey maps the AddressKey of each address in endpoints to it, made
	// when first needed (addressOf).
	byKey map[uint64]netip.Addr
	// hints hints the group's endpoints (see groupHints).
	hints Hints
}

// addressOf returns the address of g whose AddressKey is key.
func (g *sliceGroup) addressOf(key uint64) (netip.Addr, bool) {
	if g.byKey == nil {
		g.byKey = make(map[uint64]netip.Addr, len(g.endpoints))
		for addr := range g.endpoints {
			g.byKey[addrKey(addr)] = addr
		}
	}
	addr, ok := g.byKey[key]
	return addr, ok
}

// desiredEndpoint is a member endpoint with its address, which orders the
// endpoints of a hub slice.
type desiredEndpoint struct {
	addr netip.Addr
	ep   *MemberEndpoint
}

// desiredGroups returns the groups of src's member endpoints by key,
// without hints. An address listed more than once in a group (a member
// mid-rollout) keeps its preferred endpoint.
func desiredGroups(src Source) map[string]*sliceGroup {
	groups := make(map[string]*sliceGroup)
	ipSlices := src.ipSlices()
	total := 0 // sizes each group's map for all of them: usually one group
	for _, sl := range ipSlices {
		total += len(sl.Endpoints)
	}
	var keys groupKeys
	for _, sl := range ipSlices {
		key := keys.of(sl.AddressType, sl.Ports)
		g := groups[key]
		if g == nil {
			g = &sliceGroup{
				key:         key,
				hash:        groupHash(key),
				addressType: sl.AddressType,
				ports:       sortedPorts(sl.Ports),
				endpoints:   make(map[netip.Addr]*MemberEndpoint, total),
			}
			groups[key] = g
		}
		for i := range sl.Endpoints {
			ep := &sl.Endpoints[i]
			addr := ep.Addr()
			if cur, ok := g.endpoints[addr]; !ok || preferred(addr, ep, cur) {
				g.endpoints[addr] = ep
			}
		}
	}
	return groups
}

// hubEndpointInto writes into out the endpoint the hub carries for ep at
// addr: everything the projection holds, and the hints h gives it, in fresh
// memory.
func hubEndpointInto(addr netip.Addr, ep *MemberEndpoint, h Hints, out *discoveryv1.Endpoint) {
	*out = discoveryv1.Endpoint{
		Addresses: []string{addr.String()},
		Conditions: discoveryv1.EndpointConditions{
			Ready:       ep.Ready(),
			Serving:     ep.Serving(),
			Terminating: ep.Terminating(),
		},
		Hostname: ep.Hostname(),
		NodeName: ep.NodeName(),
		Zone:     ep.Zone(),
		Hints:    h.endpointHints(ep),
	}
}

// preferred reports whether a should represent addr rather than b: ready
// first, then serving, then not terminating. The final tie-break on the
// carried fields only makes the choice independent of input order.
func preferred(addr netip.Addr, a, b *MemberEndpoint) bool {
	if ra, rb := a.IsReady(), b.IsReady(); ra != rb {
		return ra
	}
	if sa, sb := a.IsServing(), b.IsServing(); sa != sb {
		return sa
	}
	if ta, tb := a.IsTerminating(), b.IsTerminating(); ta != tb {
		return tb
	}
	var ha, hb discoveryv1.Endpoint
	hubEndpointInto(addr, a, Hints{}, &ha)
	hubEndpointInto(addr, b, Hints{}, &hb)
	return ha.String() < hb.String()
}

// comparePorts orders ports by name, then by the rest of their content.
func comparePorts(a, b discoveryv1.EndpointPort) int {
	return cmp.Or(
		cmp.Compare(ptr.Deref(a.Name, ""), ptr.Deref(b.Name, "")),
		cmp.Compare(protocolOrTCP(ptr.Deref(a.Protocol, "")), protocolOrTCP(ptr.Deref(b.Protocol, ""))),
		comparePtr(a.Port, b.Port),
		comparePtr(a.AppProtocol, b.AppProtocol),
	)
}

// comparePtr orders nil before any value.
func comparePtr[T cmp.Ordered](a, b *T) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return -1
	case b == nil:
		return 1
	}
	return cmp.Compare(*a, *b)
}

// sortedPorts returns a sorted deep copy of ports.
func sortedPorts(ports []discoveryv1.EndpointPort) []discoveryv1.EndpointPort {
	out := make([]discoveryv1.EndpointPort, len(ports))
	for i := range ports {
		ports[i].DeepCopyInto(&out[i])
	}
	slices.SortFunc(out, comparePorts)
	return out
}

// groupKeys makes groupKey's keys, reusing the last one while the ports
// are the same list: member slices share their ports when equal
// (intern.Ports), so a service's slices are keyed once.
type groupKeys struct {
	addressType discoveryv1.AddressType
	ports       []discoveryv1.EndpointPort
	key         string
}

func (k *groupKeys) of(addressType discoveryv1.AddressType, ports []discoveryv1.EndpointPort) string {
	if k.key == "" || addressType != k.addressType || !samePorts(ports, k.ports) {
		k.key, k.addressType, k.ports = groupKey(addressType, ports), addressType, ports
	}
	return k.key
}

// samePorts reports whether a and b are the same list in memory (not
// merely equal).
func samePorts(a, b []discoveryv1.EndpointPort) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// groupKey identifies the group of a slice with addressType and ports,
// whatever the order of ports and with an unset protocol read as TCP.
func groupKey(addressType discoveryv1.AddressType, ports []discoveryv1.EndpointPort) string {
	sorted := slices.Clone(ports) // shallow: only read below
	slices.SortFunc(sorted, comparePorts)
	var b strings.Builder
	b.WriteString(string(addressType))
	for _, p := range sorted {
		// Names and protocols never contain '/' or '|', app protocols never '|'.
		b.WriteByte('|')
		b.WriteString(ptr.Deref(p.Name, ""))
		b.WriteByte('/')
		b.WriteString(string(protocolOrTCP(ptr.Deref(p.Protocol, ""))))
		b.WriteByte('/')
		if p.Port != nil {
			b.WriteString(strconv.Itoa(int(*p.Port)))
		} else {
			b.WriteByte('*')
		}
		if p.AppProtocol != nil {
			b.WriteByte('/')
			b.WriteString(*p.AppProtocol)
		}
	}
	return b.String()
}
