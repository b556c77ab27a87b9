package endpoints

import (
	"fmt"

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
	// PreferLocal asks for "this cluster first": the import's
	// AnnotationPreferLocal, or the daemon's default where it has none.
	// It takes precedence over zone hints.
	PreferLocal bool
	// HubCluster is the hub's own member name, "" when the hub is not a
	// member; HubZones are the zones of the hub's Nodes, sorted.
	HubCluster string
	HubZones   []string
}

// RemoteZone is the zone the hub's slices hint other clusters' endpoints
// for under PreferLocal: a zone no Node has, so that kube-proxy uses them
// only when no endpoint is hinted for its node's zone, that is, when the
// hub cluster has no ready endpoint. (A node labelled with it would prefer
// the other clusters.)
const RemoteZone = "endpoint-aggregator.io-remote"

// maxZoneHints is how many zones the API takes in one endpoint's hints.
const maxZoneHints = 8

// ImportLocality is what a member sync reads of an import to hint its
// slices; member syncs read it again when it changes.
type ImportLocality struct {
	// ZoneHinted: the import's trafficDistribution asks for zone hints.
	ZoneHinted bool
	// PreferLocal is the import's AnnotationPreferLocal: "true", "false",
	// or "" for the daemon's default.
	PreferLocal string
}

// LocalityOf returns what a member sync reads of imp, one of ours or nil.
func LocalityOf(imp *mcsv1beta1.ServiceImport) ImportLocality {
	if imp == nil {
		return ImportLocality{}
	}
	return ImportLocality{ZoneHinted: ZoneHinted(ptr.Deref(imp.Spec.TrafficDistribution, "")), PreferLocal: imp.Annotations[AnnotationPreferLocal]}
}

// PrefersLocal reports whether an import prefers the hub cluster's
// endpoints, given the daemon's default.
func (l ImportLocality) PrefersLocal(byDefault bool) bool {
	if l.PreferLocal == "" {
		return byDefault
	}
	return l.PreferLocal == "true"
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
	// Zones hints every endpoint for these zones (PreferLocal).
	Zones []string
}

// none reports whether h hints nothing.
func (h Hints) none() bool { return !h.OwnZone && len(h.Zones) == 0 }

// HintsFor returns the hints of src's hub slices under loc, and why there
// are none when the import asks for some. "This cluster first" needs the
// hub to be a member; where it cannot be had, zone preference still can.
func HintsFor(src Source, loc Locality) (Hints, string) {
	return groupHints(src.Cluster, desiredGroups(src), loc)
}

// groupHints is HintsFor for the desired groups of cluster's source: what
// its hub slices will hold, duplicates resolved.
func groupHints(cluster string, groups map[string]*sliceGroup, loc Locality) (Hints, string) {
	why := ""
	if loc.PreferLocal {
		switch why = PreferLocalBlocked(loc.HubCluster, loc.HubZones); {
		case why != "":
		case cluster == loc.HubCluster:
			return Hints{Zones: loc.HubZones}, ""
		default:
			return Hints{Zones: []string{RemoteZone}}, ""
		}
	}
	if !ZoneHinted(loc.TrafficDistribution) {
		return Hints{}, why
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

// PreferLocalBlocked says why "this cluster first" cannot be had with the
// hub's member name hubCluster ("" when the hub is no member) and its
// Nodes' zones; "" when it can.
func PreferLocalBlocked(hubCluster string, hubZones []string) string {
	switch {
	case hubCluster == "":
		return "the hub is not a member (--hub-is-member)"
	case len(hubZones) == 0:
		return "no Node of the hub has a zone label"
	case len(hubZones) > maxZoneHints:
		return fmt.Sprintf("the hub's Nodes are in %d zones, more than the %d a hint can name", len(hubZones), maxZoneHints)
	}
	return ""
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

// zonesFor returns the zones h hints ep for, nil for none.
func (h Hints) zonesFor(ep *MemberEndpoint) []string {
	if len(h.Zones) > 0 {
		return h.Zones
	}
	if !h.OwnZone {
		return nil
	}
	if z := zoneOf(ep); z != "" {
		return []string{z}
	}
	return nil
}

// endpointHints returns the hints h gives ep, nil for none.
func (h Hints) endpointHints(ep *MemberEndpoint) *discoveryv1.EndpointHints {
	zones := h.zonesFor(ep)
	if len(zones) == 0 {
		return nil
	}
	out := &discoveryv1.EndpointHints{ForZones: make([]discoveryv1.ForZone, len(zones))}
	for i, z := range zones {
		out.ForZones[i].Name = z
	}
	return out
}

// unzonedReady reports whether a hub endpoint is ready, as kube-proxy reads
// it, and has no zone (see zoneOf).
func unzonedReady(ep *discoveryv1.Endpoint) bool {
	return ptr.Deref(ep.Conditions.Ready, true) && ptr.Deref(ep.Zone, "") == ""
}
