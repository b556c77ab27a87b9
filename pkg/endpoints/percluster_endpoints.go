package endpoints

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	subs, truncated := perClusterSubsets(src)
	out := &corev1.Endpoints{ObjectMeta: perClusterEndpointsMeta(src, truncated), Subsets: buildSubsets(subs)}
	setEndpointsContent(out, hashPlannedSubsets(subs))
	return out
}

// perClusterEndpointsUpdate returns the update that brings live to what
// PerClusterEndpoints(src) returns, or nil when live holds it already. It
// plans the subsets once, and an in-sync plan makes no text of any address.
func perClusterEndpointsUpdate(src Source, live *EndpointsDigest) *corev1.Endpoints {
	subs, truncated := perClusterSubsets(src)
	meta, hash := perClusterEndpointsMeta(src, truncated), hashPlannedSubsets(subs)
	if ownedEqual(meta.Labels, live.Labels, perClusterLabelKeys) &&
		ownedEqual(meta.Annotations, live.Annotations, endpointsAnnotationKeys) &&
		hash == live.Hash {
		return nil
	}
	out := live.Meta()
	out.Labels = mergeOwned(meta.Labels, live.Labels, perClusterLabelKeys)
	out.Annotations = mergeOwned(meta.Annotations, live.Annotations, endpointsAnnotationKeys)
	out.Subsets = buildSubsets(subs)
	setEndpointsContent(out, hash)
	resetOwnersOfUnknown(&out.ObjectMeta, live.Hash)
	return out
}

// perClusterSubsets returns the subsets of src's per-cluster Endpoints,
// truncated to MaxEndpointsAddresses, and whether they were.
func perClusterSubsets(src Source) ([]plannedSubset, bool) {
	subs := planSubsets(src)
	if !truncateSubsets(subs, MaxEndpointsAddresses) {
		return subs, false
	}
	return slices.DeleteFunc(subs, func(s plannedSubset) bool {
		return len(s.ready) == 0 && len(s.notReady) == 0
	}), true
}

// perClusterEndpointsMeta is the metadata of src's per-cluster Endpoints,
// annotated with AnnotationOverCapacity when truncated.
func perClusterEndpointsMeta(src Source, truncated bool) metav1.ObjectMeta {
	meta := perClusterMeta(src)
	if truncated {
		if meta.Annotations == nil {
			meta.Annotations = make(map[string]string, 1)
		}
		meta.Annotations[AnnotationOverCapacity] = OverCapacityTruncated
	}
	return meta
}

// plannedSubset is a subset of a per-cluster Endpoints before it is made:
// its ports and, sorted by address in text form, the member endpoints
// that represent its ready and not-ready addresses.
type plannedSubset struct {
	ports           []corev1.EndpointPort
	ready, notReady []desiredEndpoint
}

// preferredAddress reports whether a should represent an address rather
// than b: ready first, then, only for determinism, the lower hostname and
// node name.
func preferredAddress(a, b *MemberEndpoint) bool {
	if ra, rb := a.IsReady(), b.IsReady(); ra != rb {
		return ra
	}
	return cmp.Or(
		strings.Compare(a.hostnameOrEmpty(), b.hostnameOrEmpty()),
		strings.Compare(a.attrs.Value().node, b.attrs.Value().node),
	) < 0
}

// planSubsets groups the addresses of src by port set, sorted by ports.
func planSubsets(src Source) []plannedSubset {
	type subset struct {
		ports []corev1.EndpointPort
		addrs map[netip.Addr]*MemberEndpoint
	}
	byPorts := make(map[string]*subset)
	ipSlices := src.ipSlices()
	total := 0 // sizes each subset's map for all of them: usually one subset
	for _, sl := range ipSlices {
		total += len(sl.Endpoints)
	}
	// Member slices share their ports when equal (intern.Ports): the last
	// slice's subset is reused while they are the same.
	var s *subset
	var lastPorts []discoveryv1.EndpointPort
	for _, sl := range ipSlices {
		if s == nil || !samePorts(sl.Ports, lastPorts) {
			ports := endpointPorts(sl.Ports)
			key := endpointPortsKey(ports)
			if s = byPorts[key]; s == nil {
				s = &subset{ports: ports, addrs: make(map[netip.Addr]*MemberEndpoint, total)}
				byPorts[key] = s
			}
			lastPorts = sl.Ports
		}
		for i := range sl.Endpoints {
			ep := &sl.Endpoints[i]
			addr := ep.Addr()
			if cur, ok := s.addrs[addr]; !ok || preferredAddress(ep, cur) {
				s.addrs[addr] = ep
			}
		}
	}

	var out []plannedSubset
	for _, key := range slices.Sorted(maps.Keys(byPorts)) {
		s := byPorts[key]
		if len(s.addrs) == 0 {
			continue
		}
		all := make([]desiredEndpoint, 0, len(s.addrs))
		for addr, ep := range s.addrs {
			all = append(all, desiredEndpoint{addr, ep})
		}
		// Ready addresses first, each part sorted.
		slices.SortFunc(all, func(a, b desiredEndpoint) int {
			return cmp.Or(cmp.Compare(b2i(!a.ep.IsReady()), b2i(!b.ep.IsReady())), compareEndpoints(a, b))
		})
		ready := slices.IndexFunc(all, func(d desiredEndpoint) bool { return !d.ep.IsReady() })
		if ready < 0 {
			ready = len(all)
		}
		out = append(out, plannedSubset{ports: s.ports, ready: all[:ready:ready], notReady: all[ready:]})
	}
	return out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// buildSubsets makes the planned subsets.
func buildSubsets(subs []plannedSubset) []corev1.EndpointSubset {
	var out []corev1.EndpointSubset
	for _, ps := range subs {
		subset := corev1.EndpointSubset{Ports: ps.ports}
		subset.Addresses = subsetAddresses(ps.ready)
		subset.NotReadyAddresses = subsetAddresses(ps.notReady)
		out = append(out, subset)
	}
	return out
}

func subsetAddresses(list []desiredEndpoint) []corev1.EndpointAddress {
	if len(list) == 0 {
		return nil
	}
	out := make([]corev1.EndpointAddress, len(list))
	for i, d := range list {
		out[i] = corev1.EndpointAddress{IP: d.addr.String(), Hostname: d.ep.hostnameOrEmpty(), NodeName: d.ep.NodeName()}
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
func truncateSubsets(subsets []plannedSubset, limit int) bool {
	ready, notReady := 0, 0
	for _, s := range subsets {
		ready += len(s.ready)
		notReady += len(s.notReady)
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
		list := &s.notReady
		if cutReady {
			s.notReady = nil
			list = &s.ready
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
	setEndpointsContent(out, hashSubsets(out.Subsets))
	return out
}
