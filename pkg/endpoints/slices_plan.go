package endpoints

import (
	"bytes"
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// SlicePlan lists the hub EndpointSlice writes that bring the slices of one
// Source to the desired state. Its objects are fresh copies, sorted by name;
// Update and Delete objects keep the resourceVersion they were planned from.
type SlicePlan struct {
	Create, Update, Delete []*discoveryv1.EndpointSlice
}

// Empty reports whether the plan has no writes.
func (p SlicePlan) Empty() bool {
	return len(p.Create) == 0 && len(p.Update) == 0 && len(p.Delete) == 0
}

// plannedSlice is a hub slice being planned.
type plannedSlice struct {
	existing  *SliceDigest // nil for a new slice; read-only
	group     *sliceGroup
	endpoints []desiredEndpoint
}

// fill moves endpoints from the front of rest into s while it has room and
// returns what is left.
func (s *plannedSlice) fill(rest []desiredEndpoint) []desiredEndpoint {
	n := min(MaxEndpointsPerSlice-len(s.endpoints), len(rest))
	if n <= 0 {
		return rest
	}
	s.endpoints = append(s.endpoints, rest[:n]...)
	return rest[n:]
}

// PlanSlices returns the writes that turn existing, the digests of the hub
// slices of src read from a cache, into the desired aggregation of src's
// member slices, hinted as loc allows (see HintsFor).
// existing is never modified. Slices not ours for src (see ownsSlice) are
// ignored, but their names are never reused.
//
// Like the upstream EndpointSlice reconciler it minimizes churn:
//  1. existing slices keep the endpoints still desired (in their desired
//     version); a slice whose content changed is updated, an emptied one is
//     deleted;
//  2. remaining endpoints fill the slices already being updated, then, if
//     they all fit, the fullest unchanged slice with room, then new slices
//     named with the lowest free SliceName indices;
//  3. a new slice and a deleted slice of the same address type become one
//     update of the deleted slice.
//
// Every slice carries src.Record. A source without endpoints has one empty
// placeholder slice, as upstream writes for a Service without endpoints: it
// holds the record, so the hub knows the export.
//
// The result depends only on the content of its inputs, not on their order,
// and is empty when existing is in sync.
func PlanSlices(src Source, loc Locality, existing []*SliceDigest) SlicePlan {
	namespace, service, cluster := src.Service.Namespace, src.Service.Name, src.Cluster
	labels := SliceLabels(namespace, service, cluster)
	var annotations map[string]string
	if src.Record != "" {
		annotations = map[string]string{AnnotationExportRecord: src.Record}
	}
	groups := desiredGroups(src)
	if hints, _ := groupHints(src.Cluster, groups, loc); !hints.none() {
		for _, g := range groups {
			g.hints = hints
		}
	}
	placeholder := placeholderGroup(src, groups)

	var toUpdate []*plannedSlice
	var toDelete []*SliceDigest
	unchanged := make(map[*sliceGroup][]*plannedSlice)
	changed := make(map[*sliceGroup][]*plannedSlice)

	// 1. Keep the endpoints of existing slices that are still desired. The
	// planned slices and their endpoints share two allocations, whatever
	// the number of slices: a plan that writes nothing allocates little.
	owned := ownedSlices(existing, namespace, service, cluster)
	kept := make([]plannedSlice, len(owned))
	total := 0
	for _, es := range owned {
		total += len(es.AddressKeys)
	}
	keptEndpoints := make([]desiredEndpoint, total)
	// Two groups whose hashes collide match no slice: theirs are replaced.
	byGroup := make(map[uint64]*sliceGroup, len(groups))
	for _, g := range groups {
		if _, taken := byGroup[g.hash]; taken {
			byGroup[g.hash] = nil
			continue
		}
		byGroup[g.hash] = g
	}
	for i, es := range owned {
		g := byGroup[es.Group]
		if g == nil {
			toDelete = append(toDelete, es)
			continue
		}
		n := len(es.AddressKeys)
		ps, dirty := &kept[i], keepDesired(es, g, &kept[i], keptEndpoints[:0:n])
		keptEndpoints = keptEndpoints[n:]
		dirty = dirty || !ownedEqual(labels, es.Labels, sliceLabelKeys) ||
			!ownedEqual(annotations, es.Annotations, sliceAnnotationKeys)
		switch {
		case g == placeholder && len(changed[g])+len(unchanged[g]) == 0:
			// The first slice of the placeholder's type stays, emptied.
			if dirty {
				changed[g] = append(changed[g], ps)
			} else {
				unchanged[g] = append(unchanged[g], ps)
			}
		case len(ps.endpoints) == 0:
			toDelete = append(toDelete, es)
		case dirty:
			changed[g] = appendPlanned(changed[g], ps, len(owned))
		default:
			unchanged[g] = appendPlanned(unchanged[g], ps, len(owned))
		}
	}

	// 2. Place the remaining endpoints, group by group.
	var toCreate []*plannedSlice
	for _, key := range slices.Sorted(maps.Keys(groups)) {
		g := groups[key]
		rest := remainingEndpoints(g)
		updating := changed[g]
		slices.SortFunc(updating, fullestFirst)
		for _, ps := range updating {
			rest = ps.fill(rest)
		}
		for len(rest) > 0 {
			if len(rest) < MaxEndpointsPerSlice {
				if ps := takeSliceToFill(unchanged, g, len(rest)); ps != nil {
					rest = ps.fill(rest)
					updating = append(updating, ps)
					continue
				}
			}
			ps := &plannedSlice{group: g}
			rest = ps.fill(rest)
			toCreate = append(toCreate, ps)
		}
		if g == placeholder && len(updating)+len(unchanged[g]) == 0 {
			toCreate = append(toCreate, &plannedSlice{group: g})
		}
		toUpdate = append(toUpdate, updating...)
	}

	// 3. Reuse slices that would be deleted for new content. AddressType is
	// immutable, so only a slice of the same type can be reused.
	var created []*plannedSlice
	for _, ps := range toCreate {
		i := slices.IndexFunc(toDelete, func(es *SliceDigest) bool {
			return es.AddressType == ps.group.addressType
		})
		if i < 0 {
			created = append(created, ps)
			continue
		}
		ps.existing = toDelete[i]
		toDelete = slices.Delete(toDelete, i, i+1)
		toUpdate = append(toUpdate, ps)
	}

	var plan SlicePlan
	if len(created) > 0 {
		names := newSliceNamer(existing, namespace, service, cluster)
		for _, ps := range created {
			plan.Create = append(plan.Create, ps.object(names.next(), namespace, labels, annotations))
		}
	}
	for _, ps := range toUpdate {
		plan.Update = append(plan.Update, ps.object("", namespace, labels, annotations))
	}
	for _, es := range toDelete {
		plan.Delete = append(plan.Delete, es.Meta())
	}
	sortByName(plan.Create)
	sortByName(plan.Update)
	sortByName(plan.Delete)
	return plan
}

// PlanSlicesDelete returns the deletion of every hub slice in existing that is
// ours for service of namespace in cluster, for when the member Service is
// gone or no longer exported.
func PlanSlicesDelete(namespace, service, cluster string, existing []*SliceDigest) SlicePlan {
	var plan SlicePlan
	for _, es := range ownedSlices(existing, namespace, service, cluster) {
		plan.Delete = append(plan.Delete, es.Meta())
	}
	return plan
}

// ownedSlices returns the slices of existing that are ours for the source,
// sorted by name.
func ownedSlices(existing []*SliceDigest, namespace, service, cluster string) []*SliceDigest {
	out := make([]*SliceDigest, 0, len(existing))
	for _, es := range existing {
		if es != nil && ownsSlice(es, namespace, service, cluster) {
			out = append(out, es)
		}
	}
	slices.SortFunc(out, func(a, b *SliceDigest) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// SourceRecord returns the export record the hub slices of one source
// carry, from existing (the hub slices that may be ours for it), and
// whether any slice is ours for it. The slices of a source agree on their
// record but for a moment mid-write; the first by name is read then.
func SourceRecord(namespace, service, cluster string, existing []*SliceDigest) (string, bool) {
	owned := ownedSlices(existing, namespace, service, cluster)
	if len(owned) == 0 {
		return "", false
	}
	return owned[0].Annotations[AnnotationExportRecord], true
}

// keepDesired fills ps, planned from es, with the endpoints of es still
// desired in g, in their desired (member) version, taken from g; their
// list is built in buf (its capacity is all it may use). It reports whether
// any was dropped or changed. Endpoints beyond MaxEndpointsPerSlice go back
// to g.
func keepDesired(es *SliceDigest, g *sliceGroup, ps *plannedSlice, buf []desiredEndpoint) (dirty bool) {
	*ps = plannedSlice{existing: es, group: g, endpoints: buf}
	for _, key := range es.AddressKeys {
		addr, _ := g.addressOf(key)
		want, ok := g.endpoints[addr]
		if !ok { // gone, listed twice, or no address at all
			dirty = true
			continue
		}
		ps.endpoints = append(ps.endpoints, desiredEndpoint{addr, want})
		delete(g.endpoints, addr)
	}
	if len(ps.endpoints) > MaxEndpointsPerSlice {
		slices.SortFunc(ps.endpoints, compareEndpoints)
		for _, d := range ps.endpoints[MaxEndpointsPerSlice:] {
			g.endpoints[d.addr] = d.ep
		}
		ps.endpoints = ps.endpoints[:MaxEndpointsPerSlice:MaxEndpointsPerSlice]
		return true
	}
	// With every endpoint still desired, in the slice's order, the slice is
	// unchanged if their desired versions hash to its content.
	return dirty || hashEndpoints(g.key, ps.endpoints, g.hints) != es.Hash
}

// appendPlanned appends ps to list, which it makes with room for n the
// first time.
func appendPlanned(list []*plannedSlice, ps *plannedSlice, n int) []*plannedSlice {
	if list == nil {
		list = make([]*plannedSlice, 0, n)
	}
	return append(list, ps)
}

// placeholderGroup returns the group of src's placeholder slice, added to
// groups, when src has no endpoints; else nil.
func placeholderGroup(src Source, groups map[string]*sliceGroup) *sliceGroup {
	for _, g := range groups {
		if len(g.endpoints) > 0 {
			return nil
		}
	}
	clear(groups)
	g := &sliceGroup{addressType: placeholderAddressType(src.Service), endpoints: map[netip.Addr]*MemberEndpoint{}}
	g.key = groupKey(g.addressType, nil)
	g.hash = groupHash(g.key)
	groups[g.key] = g
	return g
}

// remainingEndpoints returns the endpoints of g not yet placed, sorted.
func remainingEndpoints(g *sliceGroup) []desiredEndpoint {
	rest := make([]desiredEndpoint, 0, len(g.endpoints))
	for addr, ep := range g.endpoints {
		rest = append(rest, desiredEndpoint{addr, ep})
	}
	slices.SortFunc(rest, compareEndpoints)
	return rest
}

// takeSliceToFill removes from unchanged[g] and returns the fullest slice with
// room for n more endpoints, or nil.
func takeSliceToFill(unchanged map[*sliceGroup][]*plannedSlice, g *sliceGroup, n int) *plannedSlice {
	best := -1
	for i, ps := range unchanged[g] {
		if len(ps.endpoints)+n > MaxEndpointsPerSlice {
			continue
		}
		if best < 0 || fullestFirst(ps, unchanged[g][best]) < 0 {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	ps := unchanged[g][best]
	unchanged[g] = slices.Delete(unchanged[g], best, best+1)
	return ps
}

// fullestFirst orders slices by decreasing size, then by name.
func fullestFirst(a, b *plannedSlice) int {
	return cmp.Or(
		cmp.Compare(len(b.endpoints), len(a.endpoints)),
		strings.Compare(a.existing.Name, b.existing.Name),
	)
}

// compareEndpoints orders endpoints by address in text form, as they have
// always been written (so a slice written before reads the same), without
// making the text.
func compareEndpoints(a, b desiredEndpoint) int {
	return compareAddrText(a.addr, b.addr)
}

// compareAddrText compares a and b as strings.Compare compares their text.
// Two IPv4 addresses compare octet by octet, each octet by the place of its
// decimal text among those of 0-255: a dotted quad's text orders that way,
// since a '.' or the end sorts before any digit.
func compareAddrText(a, b netip.Addr) int {
	if a.Is4() && b.Is4() {
		x, y := a.As4(), b.As4()
		for i := range x {
			if c := cmp.Compare(octetTextRank[x[i]], octetTextRank[y[i]]); c != 0 {
				return c
			}
		}
		return 0
	}
	var bufA, bufB [maxAddrText]byte
	return bytes.Compare(a.AppendTo(bufA[:0]), b.AppendTo(bufB[:0]))
}

// octetTextRank is the place of each octet's decimal text among those of
// 0-255 in string order.
var octetTextRank = func() (rank [256]uint8) {
	texts := make([]string, 256)
	for i := range texts {
		texts[i] = strconv.Itoa(i)
	}
	slices.Sort(texts)
	for place, text := range texts {
		n, _ := strconv.Atoi(text)
		rank[n] = uint8(place)
	}
	return rank
}()

// object returns the planned slice as a new object. New slices get name;
// existing ones keep their metadata with our labels applied.
func (s *plannedSlice) object(name, namespace string, labels, annotations map[string]string) *discoveryv1.EndpointSlice {
	out := &discoveryv1.EndpointSlice{
		AddressType: s.group.addressType,
		Ports:       sortedPorts(s.group.ports),
		Endpoints:   make([]discoveryv1.Endpoint, len(s.endpoints)),
	}
	slices.SortFunc(s.endpoints, compareEndpoints)
	for i, d := range s.endpoints {
		hubEndpointInto(d.addr, d.ep, s.group.hints, &out.Endpoints[i])
	}
	if s.existing == nil {
		out.Name, out.Namespace = name, namespace
		out.Labels, out.Annotations = maps.Clone(labels), maps.Clone(annotations)
	} else {
		out.TypeMeta = s.existing.TypeMeta
		s.existing.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
		out.Labels = mergeOwned(labels, out.Labels, sliceLabelKeys)
		out.Annotations = mergeOwned(annotations, out.Annotations, sliceAnnotationKeys)
		resetOwnersOfUnknown(&out.ObjectMeta, s.existing.Hash)
	}
	setSliceContent(out)
	return out
}

// sliceNamer hands out SliceName names with the lowest indices not used by
// any existing slice.
type sliceNamer struct {
	prefix string
	used   map[int]bool
	index  int
}

func newSliceNamer(existing []*SliceDigest, namespace, service, cluster string) *sliceNamer {
	n := &sliceNamer{prefix: slicePrefix(namespace, service, cluster), used: make(map[int]bool)}
	for _, es := range existing {
		if es == nil {
			continue
		}
		if i, ok := sliceIndex(es.Name, n.prefix); ok {
			n.used[i] = true
		}
	}
	return n
}

func (n *sliceNamer) next() string {
	for n.used[n.index] {
		n.index++
	}
	n.used[n.index] = true
	return n.prefix + strconv.Itoa(n.index)
}

func sortByName(list []*discoveryv1.EndpointSlice) {
	slices.SortFunc(list, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
}

// ownsSlice reports whether slice is one of our hub slices for service in
// cluster.
func ownsSlice(slice *SliceDigest, namespace, service, cluster string) bool {
	return slice.Labels[discoveryv1.LabelManagedBy] == SliceManagedByValue &&
		slice.Namespace == namespace &&
		slice.Labels[mcsv1beta1.LabelServiceName] == service &&
		slice.Labels[mcsv1beta1.LabelSourceCluster] == cluster
}
