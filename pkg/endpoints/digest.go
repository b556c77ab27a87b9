package endpoints

import (
	"encoding/binary"
	"hash/maphash"
	"maps"
	"net/netip"
	"slices"
	"unique"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/intern"
)

// The daemon's hub caches hold digests of its EndpointSlices and Endpoints
// rather than the objects: the metadata in full, and of the content only
// what the sync logic reads (for a slice, a key of each endpoint's first
// address, which places it) plus a hash of the fields the daemon writes. A
// digest is an in-memory stand-in; it is never sent to an API server.

// hashSeed is per process: digests are compared only with hashes computed
// by the same process, and members cannot aim at a seed they do not know.
var hashSeed = maphash.MakeSeed()

// SliceDigest is what the daemon keeps in memory of one of its hub
// EndpointSlices.
type SliceDigest struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	AddressType discoveryv1.AddressType
	Ports       []discoveryv1.EndpointPort
	// AddressKeys holds the key (AddressKey) of each endpoint's first
	// address, in the slice's order; 0 for an endpoint without one. The
	// planner keeps an endpoint in the slice that holds its key; Hash, which
	// covers the addresses themselves, decides whether the slice changed, so
	// a colliding key can cost a rewrite, never a wrong slice.
	AddressKeys []uint64
	// Hash covers, in the slice's order, the endpoint fields the daemon
	// writes (see hashEndpoint).
	Hash uint64
	// Unzoned says a ready endpoint has no zone: the service's other
	// sources then hint none (see HintsFor).
	Unzoned bool
}

// DigestSlice returns the digest of s. It shares s's metadata, so s must
// not be modified afterwards; its ports are shared with every other digest
// of equal ports (intern.Ports), which lets the planner key each set once.
func DigestSlice(s *discoveryv1.EndpointSlice) *SliceDigest {
	d := &SliceDigest{
		TypeMeta:    s.TypeMeta,
		ObjectMeta:  s.ObjectMeta,
		AddressType: s.AddressType,
		Ports:       intern.Ports(s.Ports),
		AddressKeys: make([]uint64, len(s.Endpoints)),
	}
	if r, ok := s.Annotations[AnnotationExportRecord]; ok {
		// Every slice of a source carries the same record: keep one copy.
		d.Annotations = maps.Clone(s.Annotations)
		d.Annotations[AnnotationExportRecord] = unique.Make(r).Value()
	}
	var h maphash.Hash
	h.SetSeed(hashSeed)
	writeInt(&h, len(s.Endpoints))
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		if len(ep.Addresses) > 0 {
			d.AddressKeys[i] = AddressKey(ep.Addresses[0])
		}
		d.Unzoned = d.Unzoned || unzonedReady(ep)
		hashEndpoint(&h, ep)
	}
	d.Hash = h.Sum64()
	return d
}

// AddressKey is the key a digest holds of addr: a hash with this process's
// seed, never 0.
func AddressKey(addr string) uint64 {
	return max(maphash.String(hashSeed, addr), 1)
}

// maxAddrText is the longest text form of an address without a zone.
const maxAddrText = len("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255")

// addrKey is AddressKey of addr in text form, without making the string.
func addrKey(addr netip.Addr) uint64 {
	var buf [maxAddrText]byte
	return max(maphash.Bytes(hashSeed, addr.AppendTo(buf[:0])), 1)
}

// hashEndpoints is the Hash a slice holding eps, in this order and as
// hubEndpointInto writes them with hints, digests to.
func hashEndpoints(eps []desiredEndpoint, hints Hints) uint64 {
	var h maphash.Hash
	h.SetSeed(hashSeed)
	writeInt(&h, len(eps))
	for _, d := range eps {
		hashMemberEndpoint(&h, d.addr, d.ep, hints.zonesFor(d.ep))
	}
	return h.Sum64()
}

// Meta returns an EndpointSlice with d's metadata only: enough to delete it
// or to record an Event about it.
func (d *SliceDigest) Meta() *discoveryv1.EndpointSlice {
	out := &discoveryv1.EndpointSlice{TypeMeta: d.TypeMeta, AddressType: d.AddressType}
	d.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// DeepCopyObject implements runtime.Object.
func (d *SliceDigest) DeepCopyObject() runtime.Object {
	out := *d
	d.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if d.Ports != nil {
		out.Ports = make([]discoveryv1.EndpointPort, len(d.Ports))
		for i := range d.Ports {
			d.Ports[i].DeepCopyInto(&out.Ports[i])
		}
	}
	out.AddressKeys = slices.Clone(d.AddressKeys)
	return &out
}

// EndpointsDigest is what the daemon keeps in memory of one of its hub
// per-cluster Endpoints.
type EndpointsDigest struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	// Hash covers the subsets (see hashSubsets).
	Hash uint64
}

// DigestEndpoints returns the digest of e. It shares e's metadata, so e
// must not be modified afterwards.
func DigestEndpoints(e *corev1.Endpoints) *EndpointsDigest {
	return &EndpointsDigest{TypeMeta: e.TypeMeta, ObjectMeta: e.ObjectMeta, Hash: hashSubsets(e.Subsets)}
}

// Meta returns an Endpoints with d's metadata only.
func (d *EndpointsDigest) Meta() *corev1.Endpoints {
	out := &corev1.Endpoints{TypeMeta: d.TypeMeta}
	d.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// DeepCopyObject implements runtime.Object.
func (d *EndpointsDigest) DeepCopyObject() runtime.Object {
	out := *d
	d.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// hashEndpoint writes the fields hubEndpointInto carries, hints included
// (node hints, which it never sets, too, so that a hub slice with them
// differs from ours); nil hints and empty ones write the same. TargetRef and DeprecatedTopology, which the
// hub never carries, are left out, so adding them to a hub slice is not a
// difference. digest_test.go checks the hash against field-by-field equality.
func hashEndpoint(h *maphash.Hash, ep *discoveryv1.Endpoint) {
	writeInt(h, len(ep.Addresses))
	for _, a := range ep.Addresses {
		writeString(h, a)
	}
	writeBoolPtr(h, ep.Conditions.Ready)
	writeBoolPtr(h, ep.Conditions.Serving)
	writeBoolPtr(h, ep.Conditions.Terminating)
	writeStringPtr(h, ep.Hostname)
	writeStringPtr(h, ep.NodeName)
	writeStringPtr(h, ep.Zone)
	var zones []discoveryv1.ForZone
	var nodes []discoveryv1.ForNode
	if ep.Hints != nil {
		zones, nodes = ep.Hints.ForZones, ep.Hints.ForNodes
	}
	writeInt(h, len(zones))
	for _, z := range zones {
		writeString(h, z.Name)
	}
	writeInt(h, len(nodes))
	for _, n := range nodes {
		writeString(h, n.Name)
	}
}

// hashMemberEndpoint writes what hashEndpoint writes for the endpoint
// hubEndpointInto makes of ep at addr, hinted for zones, without making it.
func hashMemberEndpoint(h *maphash.Hash, addr netip.Addr, ep *MemberEndpoint, zones []string) {
	writeInt(h, 1)
	writeAddr(h, addr)
	t := ep.attrs.Value()
	for _, c := range []struct{ set, isTrue conditions }{
		{readySet, readyTrue}, {servingSet, servingTrue}, {terminatingSet, terminatingTrue},
	} {
		switch {
		case t.cond&c.set == 0:
			h.WriteByte(0)
		case t.cond&c.isTrue != 0:
			h.WriteByte(1)
		default:
			h.WriteByte(2)
		}
	}
	if ep.hostname == (unique.Handle[string]{}) {
		h.WriteByte(0)
	} else {
		h.WriteByte(1)
		writeString(h, ep.hostname.Value())
	}
	for _, f := range []struct {
		set   topologySet
		value string
	}{{nodeSet, t.node}, {zoneSet, t.zone}} {
		if t.set&f.set == 0 {
			h.WriteByte(0)
			continue
		}
		h.WriteByte(1)
		writeString(h, f.value)
	}
	writeInt(h, len(zones))
	for _, z := range zones {
		writeString(h, z)
	}
	writeInt(h, 0) // no node hints: a member's nodes are not the hub's
}

// hashSubsets hashes every field of subsets, in order, except that an
// unset port protocol reads as TCP, as the API server defaults it.
func hashSubsets(subsets []corev1.EndpointSubset) uint64 {
	var h maphash.Hash
	h.SetSeed(hashSeed)
	writeInt(&h, len(subsets))
	for i := range subsets {
		ss := &subsets[i]
		for _, as := range [][]corev1.EndpointAddress{ss.Addresses, ss.NotReadyAddresses} {
			writeInt(&h, len(as))
			for j := range as {
				a := &as[j]
				writeString(&h, a.IP)
				writeString(&h, a.Hostname)
				writeStringPtr(&h, a.NodeName)
				if a.TargetRef == nil {
					h.WriteByte(0)
				} else {
					r := a.TargetRef
					h.WriteByte(1)
					for _, s := range []string{r.Kind, r.Namespace, r.Name, string(r.UID), r.APIVersion, r.ResourceVersion, r.FieldPath} {
						writeString(&h, s)
					}
				}
			}
		}
		hashEndpointPorts(&h, ss.Ports)
	}
	return h.Sum64()
}

func hashEndpointPorts(h *maphash.Hash, ports []corev1.EndpointPort) {
	writeInt(h, len(ports))
	for _, p := range ports {
		writeString(h, p.Name)
		writeInt(h, int(p.Port))
		writeString(h, string(protocolOrTCP(p.Protocol)))
		writeStringPtr(h, p.AppProtocol)
	}
}

// hashPlannedSubsets is hashSubsets of buildSubsets(subs), without making
// them.
func hashPlannedSubsets(subs []plannedSubset) uint64 {
	var h maphash.Hash
	h.SetSeed(hashSeed)
	writeInt(&h, len(subs))
	for i := range subs {
		ss := &subs[i]
		for _, list := range [][]desiredEndpoint{ss.ready, ss.notReady} {
			writeInt(&h, len(list))
			for _, d := range list {
				writeAddr(&h, d.addr)
				writeString(&h, d.ep.hostnameOrEmpty())
				t := d.ep.attrs.Value()
				if t.set&nodeSet == 0 {
					h.WriteByte(0)
				} else {
					h.WriteByte(1)
					writeString(&h, t.node)
				}
				h.WriteByte(0) // no TargetRef
			}
		}
		hashEndpointPorts(&h, ss.ports)
	}
	return h.Sum64()
}

// writeAddr writes addr as writeString writes its text form.
func writeAddr(h *maphash.Hash, addr netip.Addr) {
	var buf [maxAddrText]byte
	text := addr.AppendTo(buf[:0])
	writeInt(h, len(text))
	_, _ = h.Write(text)
}

// The writers below frame every value (length prefixes, presence bytes) so
// that different field contents never write the same bytes.

func writeInt(h *maphash.Hash, n int) {
	var buf [binary.MaxVarintLen64]byte
	h.Write(binary.AppendVarint(buf[:0], int64(n))) // self-delimiting
}

func writeString(h *maphash.Hash, s string) {
	writeInt(h, len(s))
	h.WriteString(s)
}

func writeStringPtr(h *maphash.Hash, p *string) {
	if p == nil {
		h.WriteByte(0)
		return
	}
	h.WriteByte(1)
	writeString(h, *p)
}

func writeBoolPtr(h *maphash.Hash, p *bool) {
	switch {
	case p == nil:
		h.WriteByte(0)
	case *p:
		h.WriteByte(1)
	default:
		h.WriteByte(2)
	}
}
