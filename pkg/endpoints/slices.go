package endpoints

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
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

// ownsSlice reports whether slice is one of our hub slices for service in
// cluster.
func ownsSlice(slice *SliceDigest, namespace, service, cluster string) bool {
	return slice.Labels[discoveryv1.LabelManagedBy] == SliceManagedByValue &&
		slice.Namespace == namespace &&
		slice.Labels[mcsv1beta1.LabelServiceName] == service &&
		slice.Labels[mcsv1beta1.LabelSourceCluster] == cluster
}

// sliceGroup holds the desired endpoints sharing an address type and a port
// set. Each hub slice holds endpoints of a single group.
type sliceGroup struct {
	addressType discoveryv1.AddressType
	ports       []discoveryv1.EndpointPort // sorted by comparePorts
	// endpoints maps first addresses to member endpoints: they are read-only
	// and copied by hubEndpointInto only when written out.
	endpoints map[string]*discoveryv1.Endpoint
}

// desiredGroups returns the groups of src's member endpoints by key. An
// address listed more than once in a group (a member mid-rollout) keeps its
// preferred endpoint.
func desiredGroups(src Source) map[string]*sliceGroup {
	groups := make(map[string]*sliceGroup)
	for _, sl := range src.ipSlices() {
		key := groupKey(sl.AddressType, sl.Ports)
		g := groups[key]
		if g == nil {
			g = &sliceGroup{
				addressType: sl.AddressType,
				ports:       sortedPorts(sl.Ports),
				endpoints:   make(map[string]*discoveryv1.Endpoint, len(sl.Endpoints)),
			}
			groups[key] = g
		}
		for i := range sl.Endpoints {
			ep := &sl.Endpoints[i]
			if len(ep.Addresses) == 0 {
				continue
			}
			if cur, ok := g.endpoints[ep.Addresses[0]]; !ok || preferred(ep, cur) {
				g.endpoints[ep.Addresses[0]] = ep
			}
		}
	}
	return groups
}

// hubEndpointInto copies into out the fields of ep the hub carries: TargetRef
// names an object of the member cluster and DeprecatedTopology is obsolete.
func hubEndpointInto(ep, out *discoveryv1.Endpoint) {
	*out = discoveryv1.Endpoint{
		Addresses: slices.Clone(ep.Addresses),
		Conditions: discoveryv1.EndpointConditions{
			Ready:       clonePtr(ep.Conditions.Ready),
			Serving:     clonePtr(ep.Conditions.Serving),
			Terminating: clonePtr(ep.Conditions.Terminating),
		},
		Hostname: clonePtr(ep.Hostname),
		NodeName: clonePtr(ep.NodeName),
		Zone:     clonePtr(ep.Zone),
		Hints:    ep.Hints.DeepCopy(),
	}
}

// preferred reports whether a should represent an address rather than b:
// ready first, then serving, then not terminating. The final tie-break on
// the carried fields only makes the choice independent of input order.
func preferred(a, b *discoveryv1.Endpoint) bool {
	if ra, rb := isReady(a), isReady(b); ra != rb {
		return ra
	}
	if sa, sb := isServing(a), isServing(b); sa != sb {
		return sa
	}
	if ta, tb := isTerminating(a), isTerminating(b); ta != tb {
		return tb
	}
	var ha, hb discoveryv1.Endpoint
	hubEndpointInto(a, &ha)
	hubEndpointInto(b, &hb)
	return ha.String() < hb.String()
}

// isReady interprets an unset ready condition as ready, as the API requires.
func isReady(ep *discoveryv1.Endpoint) bool {
	return ep.Conditions.Ready == nil || *ep.Conditions.Ready
}

// isServing falls back to the ready condition when serving is unset.
func isServing(ep *discoveryv1.Endpoint) bool {
	if ep.Conditions.Serving == nil {
		return isReady(ep)
	}
	return *ep.Conditions.Serving
}

func isTerminating(ep *discoveryv1.Endpoint) bool {
	return ep.Conditions.Terminating != nil && *ep.Conditions.Terminating
}

// comparePorts orders ports by name, then by the rest of their content.
func comparePorts(a, b discoveryv1.EndpointPort) int {
	return cmp.Or(
		cmp.Compare(deref(a.Name), deref(b.Name)),
		cmp.Compare(protocolOrTCP(deref(a.Protocol)), protocolOrTCP(deref(b.Protocol))),
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

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
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
		b.WriteString(deref(p.Name))
		b.WriteByte('/')
		b.WriteString(string(protocolOrTCP(deref(p.Protocol))))
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
