package endpoints

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// The hub's EndpointSlice hints are the daemon's own: a member's hints
// describe that member's nodes and never reach the hub. Stock kube-proxy
// reads only hints: when every ready endpoint of a service is hinted for
// some zone and one is hinted for its node's zone, it uses only those;
// otherwise it uses every ready endpoint. So a set of slices where one ready
// endpoint has no hint is the same to it as one without hints, and the
// daemon writes hints only where they can all agree.

// Locality is what a member sync reads of the rest of the ClusterSet to
// hint its source's hub slices.
type Locality struct {
	// TrafficDistribution is the service's merged import's: PreferSameZone
	// and PreferClose ask for zone hints.
	TrafficDistribution string
	// PeersUnzoned names another cluster whose hub slices of the service
	// hold a ready endpoint without a zone; empty when none does.
	PeersUnzoned string
}

// ImportLocality returns what a member sync reads of imp, one of ours or
// nil: its trafficDistribution.
func ImportLocality(imp *mcsv1beta1.ServiceImport) string {
	if imp == nil {
		return ""
	}
	return ptr.Deref(imp.Spec.TrafficDistribution, "")
}

// ZoneHinted reports whether an import with traffic distribution td has its
// endpoints hinted for their zones.
func ZoneHinted(td string) bool {
	return td == corev1.ServiceTrafficDistributionPreferSameZone || td == corev1.ServiceTrafficDistributionPreferClose
}

// Hints is the rule that hints the endpoints of one source's hub slices.
// The zero value hints none.
type Hints struct {
	// OwnZone hints each endpoint that has a zone for that zone.
	OwnZone bool
}

// HintsFor returns the hints of src's hub slices under loc, and why there
// are none when the import asks for some: a ready endpoint without a zone,
// in src or in a peer.
func HintsFor(src Source, loc Locality) (Hints, string) {
	return groupHints(src.Cluster, desiredGroups(src), loc)
}

// groupHints is HintsFor for the desired groups of cluster's source: what
// its hub slices will hold, duplicates resolved.
func groupHints(cluster string, groups map[string]*sliceGroup, loc Locality) (Hints, string) {
	if !ZoneHinted(loc.TrafficDistribution) {
		return Hints{}, ""
	}
	if loc.PeersUnzoned != "" {
		return Hints{}, "cluster " + loc.PeersUnzoned + " has a ready endpoint without a zone"
	}
	for _, g := range groups {
		for _, ep := range g.endpoints {
			if ep.IsReady() && zoneOf(ep) == "" {
				return Hints{}, "cluster " + cluster + " has a ready endpoint without a zone"
			}
		}
	}
	return Hints{OwnZone: true}, ""
}

// zoneOf returns ep's zone, "" for none: an empty zone is none, as a node
// without a zone label reads as the zone "". The projection refuses an
// endpoint whose zone is no label value, which a hint must be.
func zoneOf(ep *MemberEndpoint) string {
	t := ep.attrs.Value()
	if t.set&zoneSet == 0 {
		return ""
	}
	return t.zone
}

// zoneFor returns the zone h hints ep for, "" for none.
func (h Hints) zoneFor(ep *MemberEndpoint) string {
	if !h.OwnZone {
		return ""
	}
	return zoneOf(ep)
}

// endpointHints returns the hints h gives ep, nil for none.
func (h Hints) endpointHints(ep *MemberEndpoint) *discoveryv1.EndpointHints {
	zone := h.zoneFor(ep)
	if zone == "" {
		return nil
	}
	return &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: zone}}}
}

// unzonedReady reports whether a hub endpoint is ready, as kube-proxy reads
// it, and has no zone (see zoneOf).
func unzonedReady(ep *discoveryv1.Endpoint) bool {
	return ptr.Deref(ep.Conditions.Ready, true) && ptr.Deref(ep.Zone, "") == ""
}
