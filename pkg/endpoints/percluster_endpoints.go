package endpoints

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// endpointsAnnotationKeys are the annotations we own on per-cluster Endpoints.
var endpointsAnnotationKeys = []string{AnnotationSource, AnnotationOverCapacity}

// PerClusterEndpoints returns the Endpoints of src's per-cluster Service (see
// PerClusterService), built from the member's IPv4 and IPv6 EndpointSlices;
// the hub's EndpointSlice mirroring controller turns it into slices.
//
// Addresses of endpoints that are ready (or of unknown readiness) go to
// Addresses, others to NotReadyAddresses. Endpoints of slices with the same
// ports share a subset, in which an address appears once, ready if any of its
// endpoints is. Addresses and subsets are sorted, so the result does not
// depend on input order. Beyond MaxEndpointsAddresses addresses the
// Endpoints is truncated as the upstream Endpoints controller does, keeping
// ready addresses first, and annotated with AnnotationOverCapacity. A Service
// without endpoints gets an Endpoints without subsets.
func PerClusterEndpoints(src Source) *corev1.Endpoints {
	ep := &corev1.Endpoints{
		ObjectMeta: perClusterMeta(src),
		Subsets:    endpointSubsets(src),
	}
	if truncateSubsets(ep.Subsets, MaxEndpointsAddresses) {
		ep.Subsets = slices.DeleteFunc(ep.Subsets, func(s corev1.EndpointSubset) bool {
			return len(s.Addresses) == 0 && len(s.NotReadyAddresses) == 0
		})
		if ep.Annotations == nil {
			ep.Annotations = make(map[string]string, 1)
		}
		ep.Annotations[AnnotationOverCapacity] = OverCapacityTruncated
	}
	return ep
}

// subsetAddress is an address of a subset being built.
type subsetAddress struct {
	corev1.EndpointAddress
	ready bool
}

// preferredAddress reports whether a should represent an IP rather than b:
// ready first, then, only for determinism, the lower hostname and node name.
func preferredAddress(a, b subsetAddress) bool {
	if a.ready != b.ready {
		return a.ready
	}
	return cmp.Or(
		strings.Compare(a.Hostname, b.Hostname),
		strings.Compare(ptr.Deref(a.NodeName, ""), ptr.Deref(b.NodeName, "")),
	) < 0
}

// endpointSubsets groups the addresses of src by port set, sorted by ports.
func endpointSubsets(src Source) []corev1.EndpointSubset {
	type subset struct {
		ports []corev1.EndpointPort
		addrs map[string]subsetAddress
	}
	byPorts := make(map[string]*subset)
	ipSlices := src.ipSlices()
	total := 0 // sizes each subset's map for all of them: usually one subset
	for _, sl := range ipSlices {
		total += len(sl.Endpoints)
	}
	for _, sl := range ipSlices {
		ports := endpointPorts(sl.Ports)
		key := endpointPortsKey(ports)
		s := byPorts[key]
		if s == nil {
			s = &subset{ports: ports, addrs: make(map[string]subsetAddress, total)}
			byPorts[key] = s
		}
		for i := range sl.Endpoints {
			ep := &sl.Endpoints[i]
			ip := ep.Addr().String()
			a := subsetAddress{
				EndpointAddress: corev1.EndpointAddress{IP: ip, Hostname: ptr.Deref(ep.Hostname(), ""), NodeName: ep.NodeName()},
				ready:           ep.IsReady(),
			}
			if cur, ok := s.addrs[ip]; !ok || preferredAddress(a, cur) {
				s.addrs[ip] = a
			}
		}
	}

	var out []corev1.EndpointSubset
	for _, key := range slices.Sorted(maps.Keys(byPorts)) {
		s := byPorts[key]
		if len(s.addrs) == 0 {
			continue
		}
		subset := corev1.EndpointSubset{Ports: s.ports}
		for _, ip := range slices.Sorted(maps.Keys(s.addrs)) {
			if a := s.addrs[ip]; a.ready {
				subset.Addresses = append(subset.Addresses, a.EndpointAddress)
			} else {
				subset.NotReadyAddresses = append(subset.NotReadyAddresses, a.EndpointAddress)
			}
		}
		out = append(out, subset)
	}
	return out
}

// endpointPorts converts slice ports, sorted; ports without a number (all
// ports) cannot be expressed in Endpoints and are skipped.
func endpointPorts(ports []discoveryv1.EndpointPort) []corev1.EndpointPort {
	var out []corev1.EndpointPort
	for _, p := range ports {
		if p.Port == nil {
			continue
		}
		out = append(out, corev1.EndpointPort{
			Name:        ptr.Deref(p.Name, ""),
			Port:        *p.Port,
			Protocol:    protocolOrTCP(ptr.Deref(p.Protocol, "")),
			AppProtocol: clonePtr(p.AppProtocol),
		})
	}
	slices.SortFunc(out, func(a, b corev1.EndpointPort) int {
		return cmp.Or(
			strings.Compare(a.Name, b.Name),
			cmp.Compare(a.Port, b.Port),
			strings.Compare(string(a.Protocol), string(b.Protocol)),
			comparePtr(a.AppProtocol, b.AppProtocol),
		)
	})
	return out
}

// endpointPortsKey identifies a sorted port set.
func endpointPortsKey(ports []corev1.EndpointPort) string {
	var b strings.Builder
	for _, p := range ports {
		b.WriteString(p.Name)
		b.WriteByte('/')
		b.WriteString(string(p.Protocol))
		b.WriteByte('/')
		b.WriteString(strconv.Itoa(int(p.Port)))
		if p.AppProtocol != nil {
			b.WriteByte('/')
			b.WriteString(*p.AppProtocol)
		}
		b.WriteByte('|')
	}
	return b.String()
}

// truncateSubsets keeps at most limit addresses, as the upstream Endpoints
// controller does: ready addresses first, and the budget of the kind being
// cut shared across subsets in proportion to their size, rounded up, in
// subset order. Addresses are kept in order. It reports whether any address
// was dropped; subsets may be left empty.
func truncateSubsets(subsets []corev1.EndpointSubset, limit int) bool {
	ready, notReady := 0, 0
	for _, s := range subsets {
		ready += len(s.Addresses)
		notReady += len(s.NotReadyAddresses)
	}
	if ready+notReady <= limit {
		return false
	}
	cutReady := ready > limit
	budget, total := limit-ready, notReady
	if cutReady {
		budget, total = limit, ready
	}
	left := budget
	for i := range subsets {
		s := &subsets[i]
		list := &s.NotReadyAddresses
		if cutReady {
			s.NotReadyAddresses = nil
			list = &s.Addresses
		}
		keep := min((len(*list)*budget+total-1)/total, left)
		if keep == 0 {
			*list = nil
		} else {
			*list = (*list)[:keep]
		}
		left -= keep
	}
	return true
}

// EndpointsUpToDate reports whether live, a per-cluster Endpoints, already has
// the labels, annotations and subsets of desired that we own. An unset port
// protocol reads as TCP.
func EndpointsUpToDate(desired *corev1.Endpoints, live *EndpointsDigest) bool {
	return ownedEqual(desired.Labels, live.Labels, perClusterLabelKeys) &&
		ownedEqual(desired.Annotations, live.Annotations, endpointsAnnotationKeys) &&
		hashSubsets(desired.Subsets) == live.Hash
}

// MergeEndpoints returns a copy of live, a per-cluster Endpoints, with the
// labels, annotations and subsets of desired that we own applied, ready for
// an update.
func MergeEndpoints(desired *corev1.Endpoints, live *EndpointsDigest) *corev1.Endpoints {
	out := live.Meta()
	out.Labels = mergeOwned(desired.Labels, live.Labels, perClusterLabelKeys)
	out.Annotations = mergeOwned(desired.Annotations, live.Annotations, endpointsAnnotationKeys)
	out.Subsets = nil
	for i := range desired.Subsets {
		out.Subsets = append(out.Subsets, *desired.Subsets[i].DeepCopy())
	}
	return out
}
