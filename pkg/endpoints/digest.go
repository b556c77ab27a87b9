package endpoints

import (
	"encoding/base64"
	"encoding/binary"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unique"

	"github.com/cespare/xxhash/v2"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The daemon's hub caches hold digests of its EndpointSlices and Endpoints
// rather than the objects: the metadata in full, and of the content only
// what the sync logic reads (for a slice, its group, and a key of each
// endpoint's first address, which places it) plus a hash of the fields the
// daemon writes. A digest is an in-memory stand-in; it is never sent to an
// API server.
//
// Every slice and Endpoints the daemon writes carries its digest in
// AnnotationContent, so the hub caches are fed by metadata-only watches: the
// daemon never decodes the echoes of its own writes. The hashes are
// deterministic (xxhash), so that a restarted daemon reads the digests its
// predecessor wrote. Their inputs come from members, which can make two
// contents of their own hash alike; that can only keep a member's own stale
// endpoints in the hub, which it could as well have left there.

// SliceDigest is what the daemon keeps in memory of one of its hub
// EndpointSlices.
type SliceDigest struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	AddressType discoveryv1.AddressType
	// Group identifies the slice's address type and ports: the groupHash
	// of their groupKey. Hash covers the groupKey itself, so a colliding
	// group can cost a rewrite, never a slice with the wrong ports.
	Group uint64
	// AddressKeys holds the key (AddressKey) of each endpoint's first
	// address, in the slice's order; 0 for an endpoint without one. The
	// planner keeps an endpoint in the slice that holds its key; Hash, which
	// covers the addresses themselves, decides whether the slice changed, so
	// a colliding key can cost a rewrite, never a wrong slice.
	AddressKeys []uint64
	// Hash covers, in the slice's order, the endpoint fields the daemon
	// writes (see hashEndpoint); never 0.
	Hash uint64
	// Unzoned says a ready endpoint has no zone: the service's other
	// sources then hint none (see HintsFor).
	Unzoned bool
}

// DigestSlice returns the digest of s, read from its content. It shares
// s's metadata, so s must not be modified afterwards.
func DigestSlice(s *discoveryv1.EndpointSlice) *SliceDigest {
	d := &SliceDigest{
		TypeMeta:    s.TypeMeta,
		ObjectMeta:  s.ObjectMeta,
		AddressType: s.AddressType,
	}
	d.Annotations = digestAnnotations(s.Annotations)
	d.Group, d.AddressKeys, d.Hash, d.Unzoned = sliceContent(s)
	return d
}

// groupHash is the Group of a slice of the group key identifies.
func groupHash(key string) uint64 {
	return max(xxhash.Sum64String(key), 1)
}

// sliceContent returns what a digest holds of s's ports and endpoints.
func sliceContent(s *discoveryv1.EndpointSlice) (group uint64, keys []uint64, hash uint64, unzoned bool) {
	key := groupKey(s.AddressType, s.Ports)
	group = groupHash(key)
	keys = make([]uint64, len(s.Endpoints))
	var h xxhash.Digest
	h.Reset()
	writeString(&h, key)
	writeInt(&h, len(s.Endpoints))
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		if len(ep.Addresses) > 0 {
			keys[i] = AddressKey(ep.Addresses[0])
		}
		unzoned = unzoned || unzonedReady(ep)
		hashEndpoint(&h, ep)
	}
	return group, keys, sum(&h), unzoned
}

// digestAnnotations are the annotations a digest keeps: AnnotationContent,
// which it holds parsed, dropped, and the export record, which every slice
// of a source carries, kept once in memory.
func digestAnnotations(in map[string]string) map[string]string {
	_, content := in[AnnotationContent]
	record, hasRecord := in[AnnotationExportRecord]
	if !content && !hasRecord {
		return in
	}
	if content && len(in) == 1 {
		return nil
	}
	out := maps.Clone(in)
	delete(out, AnnotationContent)
	if hasRecord {
		out[AnnotationExportRecord] = unique.Make(record).Value()
	}
	return out
}

// contentVersion starts every AnnotationContent value: a daemon reads only
// the version it writes, and rewrites other objects.
const contentVersion = "1"

// setSliceContent records the digest of s's content in its annotations,
// which must be s's own.
func setSliceContent(s *discoveryv1.EndpointSlice) {
	group, keys, hash, unzoned := sliceContent(s)
	packed := make([]byte, 8*len(keys))
	for i, k := range keys {
		binary.LittleEndian.PutUint64(packed[8*i:], k)
	}
	flag := "z"
	if unzoned {
		flag = "u"
	}
	if s.Annotations == nil {
		s.Annotations = make(map[string]string, 1)
	}
	s.Annotations[AnnotationContent] = strings.Join([]string{contentVersion, strconv.FormatUint(hash, 16), flag,
		base64.RawStdEncoding.EncodeToString(packed), string(s.AddressType), strconv.FormatUint(group, 16)}, ";")
}

// SliceDigestFromMeta returns the digest of one of our slices whose
// metadata is meta, read from its AnnotationContent; false when that is
// missing or unreadable. It shares meta's labels.
func SliceDigestFromMeta(meta metav1.ObjectMeta) (*SliceDigest, bool) {
	parts := strings.Split(meta.Annotations[AnnotationContent], ";")
	if len(parts) != 6 || parts[0] != contentVersion || (parts[2] != "u" && parts[2] != "z") {
		return nil, false
	}
	hash, err := strconv.ParseUint(parts[1], 16, 64)
	if err != nil || hash == 0 {
		return nil, false
	}
	packed, err := base64.RawStdEncoding.DecodeString(parts[3])
	if err != nil || len(packed)%8 != 0 {
		return nil, false
	}
	addressType := parts[4]
	if addressType != string(discoveryv1.AddressTypeIPv4) && addressType != string(discoveryv1.AddressTypeIPv6) {
		return nil, false
	}
	group, err := strconv.ParseUint(parts[5], 16, 64)
	if err != nil || group == 0 {
		return nil, false
	}
	d := &SliceDigest{
		TypeMeta:    metav1.TypeMeta{APIVersion: discoveryv1.SchemeGroupVersion.String(), Kind: "EndpointSlice"},
		ObjectMeta:  meta,
		AddressType: discoveryv1.AddressType(addressType),
		Group:       group,
		AddressKeys: make([]uint64, len(packed)/8),
		Hash:        hash,
		Unzoned:     parts[2] == "u",
	}
	for i := range d.AddressKeys {
		d.AddressKeys[i] = binary.LittleEndian.Uint64(packed[8*i:])
	}
	d.Annotations = digestAnnotations(meta.Annotations)
	return d, true
}

// DigestSliceRead returns the digest of one of our slices read in full:
// DigestSlice, with Hash 0 when its AnnotationContent does not describe its
// content, so that the slice is rewritten with one that does.
func DigestSliceRead(s *discoveryv1.EndpointSlice) *SliceDigest {
	d := DigestSlice(s)
	if m, ok := SliceDigestFromMeta(s.ObjectMeta); !ok || m.Hash != d.Hash || m.Group != d.Group ||
		m.Unzoned != d.Unzoned || !slices.Equal(m.AddressKeys, d.AddressKeys) {
		d.Hash = 0
	}
	return d
}

// resetOwnersOfUnknown makes an update of an object whose digest had Hash
// 0 (its content read in full, or unknown) reset its managedFields: a list
// of one empty entry, which the API server takes as "drop every manager's
// record". An update that leaves a field's value as it was does not take
// that field over, so without the reset another manager (an earlier
// release, say) would keep owning the content, and the object would be
// read in full again at every change and every start.
func resetOwnersOfUnknown(meta *metav1.ObjectMeta, hash uint64) {
	if hash == 0 {
		meta.ManagedFields = []metav1.ManagedFieldsEntry{{}}
	}
}

// UnknownSliceDigest is the digest of one of our slices whose content is
// unknown: Hash 0 and no group, which no plan keeps, so the slice is
// rewritten or deleted. It shares meta's labels.
func UnknownSliceDigest(meta metav1.ObjectMeta) *SliceDigest {
	d := &SliceDigest{TypeMeta: metav1.TypeMeta{APIVersion: discoveryv1.SchemeGroupVersion.String(), Kind: "EndpointSlice"}, ObjectMeta: meta}
	d.Annotations = digestAnnotations(meta.Annotations)
	return d
}

// AddressKey is the key a digest holds of addr: a 64-bit hash, never 0.
func AddressKey(addr string) uint64 {
	return max(xxhash.Sum64String(addr), 1)
}

// maxAddrText is the longest text form of an address without a zone.
const maxAddrText = len("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255")

// addrKey is AddressKey of addr in text form, without making the string.
func addrKey(addr netip.Addr) uint64 {
	var buf [maxAddrText]byte
	return max(xxhash.Sum64(addr.AppendTo(buf[:0])), 1)
}

// hashEndpoints is the Hash a slice of the group groupKey names holding
// eps, in this order and as hubEndpointInto writes them with hints,
// digests to.
func hashEndpoints(groupKey string, eps []desiredEndpoint, hints Hints) uint64 {
	var h xxhash.Digest
	h.Reset()
	writeString(&h, groupKey)
	writeInt(&h, len(eps))
	for _, d := range eps {
		hashMemberEndpoint(&h, d.addr, d.ep, hints.zonesFor(d.ep))
	}
	return sum(&h)
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
	d := &EndpointsDigest{TypeMeta: e.TypeMeta, ObjectMeta: e.ObjectMeta, Hash: hashSubsets(e.Subsets)}
	d.Annotations = digestAnnotations(e.Annotations)
	return d
}

// setEndpointsContent records the digest of e's content in its
// annotations, which must be e's own.
func setEndpointsContent(e *corev1.Endpoints, hash uint64) {
	if e.Annotations == nil {
		e.Annotations = make(map[string]string, 1)
	}
	e.Annotations[AnnotationContent] = contentVersion + ";" + strconv.FormatUint(hash, 16)
}

// EndpointsDigestFromMeta returns the digest of one of our per-cluster
// Endpoints whose metadata is meta, read from its AnnotationContent; false
// when that is missing or unreadable. It shares meta's labels.
func EndpointsDigestFromMeta(meta metav1.ObjectMeta) (*EndpointsDigest, bool) {
	version, text, _ := strings.Cut(meta.Annotations[AnnotationContent], ";")
	hash, err := strconv.ParseUint(text, 16, 64)
	if version != contentVersion || err != nil || hash == 0 {
		return nil, false
	}
	d := UnknownEndpointsDigest(meta)
	d.Hash = hash
	return d, true
}

// DigestEndpointsRead returns the digest of one of our per-cluster
// Endpoints read in full: DigestEndpoints, with Hash 0 when its
// AnnotationContent does not describe its content, so that it is
// rewritten with one that does.
func DigestEndpointsRead(e *corev1.Endpoints) *EndpointsDigest {
	d := DigestEndpoints(e)
	if m, ok := EndpointsDigestFromMeta(e.ObjectMeta); !ok || m.Hash != d.Hash {
		d.Hash = 0
	}
	return d
}

// UnknownEndpointsDigest is the digest of one of our per-cluster Endpoints
// whose content is unknown: Hash 0, so that it is rewritten. It shares
// meta's labels.
func UnknownEndpointsDigest(meta metav1.ObjectMeta) *EndpointsDigest {
	d := &EndpointsDigest{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Endpoints"}, ObjectMeta: meta}
	d.Annotations = digestAnnotations(meta.Annotations)
	return d
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
func hashEndpoint(h *xxhash.Digest, ep *discoveryv1.Endpoint) {
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
func hashMemberEndpoint(h *xxhash.Digest, addr netip.Addr, ep *MemberEndpoint, zones []string) {
	writeInt(h, 1)
	writeAddr(h, addr)
	t := ep.attrs.Value()
	for _, c := range []struct{ set, isTrue conditions }{
		{readySet, readyTrue}, {servingSet, servingTrue}, {terminatingSet, terminatingTrue},
	} {
		switch {
		case t.cond&c.set == 0:
			writeByte(h, 0)
		case t.cond&c.isTrue != 0:
			writeByte(h, 1)
		default:
			writeByte(h, 2)
		}
	}
	if ep.hostname == (unique.Handle[string]{}) {
		writeByte(h, 0)
	} else {
		writeByte(h, 1)
		writeString(h, ep.hostname.Value())
	}
	for _, f := range []struct {
		set   topologySet
		value string
	}{{nodeSet, t.node}, {zoneSet, t.zone}} {
		if t.set&f.set == 0 {
			writeByte(h, 0)
			continue
		}
		writeByte(h, 1)
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
	var h xxhash.Digest
	h.Reset()
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
					writeByte(&h, 0)
				} else {
					r := a.TargetRef
					writeByte(&h, 1)
					for _, s := range []string{r.Kind, r.Namespace, r.Name, string(r.UID), r.APIVersion, r.ResourceVersion, r.FieldPath} {
						writeString(&h, s)
					}
				}
			}
		}
		hashEndpointPorts(&h, ss.Ports)
	}
	return sum(&h)
}

func hashEndpointPorts(h *xxhash.Digest, ports []corev1.EndpointPort) {
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
	var h xxhash.Digest
	h.Reset()
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
					writeByte(&h, 0)
				} else {
					writeByte(&h, 1)
					writeString(&h, t.node)
				}
				writeByte(&h, 0) // no TargetRef
			}
		}
		hashEndpointPorts(&h, ss.ports)
	}
	return sum(&h)
}

// writeAddr writes addr as writeString writes its text form.
func writeAddr(h *xxhash.Digest, addr netip.Addr) {
	var buf [maxAddrText]byte
	text := addr.AppendTo(buf[:0])
	writeInt(h, len(text))
	_, _ = h.Write(text)
}

// The writers below frame every value (length prefixes, presence bytes) so
// that different field contents never write the same bytes.

func writeInt(h *xxhash.Digest, n int) {
	var buf [binary.MaxVarintLen64]byte
	_, _ = h.Write(binary.AppendVarint(buf[:0], int64(n))) // self-delimiting
}

func writeString(h *xxhash.Digest, s string) {
	writeInt(h, len(s))
	_, _ = h.WriteString(s)
}

func writeStringPtr(h *xxhash.Digest, p *string) {
	if p == nil {
		writeByte(h, 0)
		return
	}
	writeByte(h, 1)
	writeString(h, *p)
}

func writeBoolPtr(h *xxhash.Digest, p *bool) {
	switch {
	case p == nil:
		writeByte(h, 0)
	case *p:
		writeByte(h, 1)
	default:
		writeByte(h, 2)
	}
}

func writeByte(h *xxhash.Digest, b byte) {
	_, _ = h.Write([]byte{b})
}

// sum is h's sum, never 0: a digest with Hash 0 matches nothing.
func sum(h *xxhash.Digest) uint64 {
	return max(h.Sum64(), 1)
}
