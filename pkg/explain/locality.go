package explain

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// Locality says how the hub's kube-proxy picks among the import's ready
// endpoints, read from the hints on the hub's MCS slices as kube-proxy
// reads them: when every ready endpoint is hinted for some zone, a node
// uses those hinted for its own zone, if any; otherwise every ready one.
type Locality struct {
	// Mode is the import's trafficDistribution and what it asks for.
	Mode string `json:"mode"`
	// Hinted lists, per cluster, its ready endpoints by the zones they are
	// hinted for ("east: z1 2, z2 1", "west: 3 not hinted").
	Hinted []string `json:"hinted,omitempty"`
	// Nodes says what a node in each hinted zone uses, then any other node.
	Nodes []string `json:"nodes"`
	// Why says why the endpoints carry no hints where the import asks for
	// them.
	Why string `json:"why,omitempty"`
	// Preferring: the import prefers the hub cluster's endpoints, and the
	// hub is a member.
	Preferring bool `json:"preferring,omitempty"`
}

// locality reads the hints of every member's hub slices of imp under the
// daemon's policy p.
func locality(p Policy, hubZones []string, imp *mcsv1beta1.ServiceImport, members []Member) *Locality {
	td := ptr.Deref(imp.Spec.TrafficDistribution, "")
	loc := &Locality{Mode: "spread over every cluster (no trafficDistribution asks for zones)"}
	switch {
	case endpoints.ZoneHinted(td):
		loc.Mode = td + ": each endpoint hinted for its own zone"
	case td != "":
		loc.Mode = fmt.Sprintf("spread over every cluster (%s asks for no zone hints)", td)
	}
	if endpoints.LocalityOf(imp).PrefersLocal(p.PreferLocal) {
		if why := endpoints.PreferLocalBlocked(p.HubCluster, hubZones); why != "" {
			loc.Mode += "; it prefers the hub's own endpoints, but " + why
		} else {
			loc.Preferring = true
			loc.Mode = fmt.Sprintf("this cluster first: the endpoints of %s, the hub, for every zone of its Nodes; the others' for a zone no Node has (%s)", p.HubCluster, endpoints.RemoteZone)
		}
	}
	total, allHinted := 0, true
	byZone := map[string]map[string]int{} // zone, cluster: ready endpoints hinted for it
	for _, m := range members {
		perZone, unhinted, unzoned := map[string]int{}, 0, 0
		for _, s := range m.HubSlices {
			for _, ep := range s.Endpoints {
				if !ptr.Deref(ep.Conditions.Ready, true) {
					continue
				}
				total++
				zones := hintedZones(ep)
				if len(zones) == 0 {
					unhinted++
					if ptr.Deref(ep.Zone, "") == "" {
						unzoned++
					}
				}
				for _, z := range zones {
					perZone[z]++
					if byZone[z] == nil {
						byZone[z] = map[string]int{}
					}
					byZone[z][m.Name]++
				}
			}
		}
		if len(perZone) == 0 && unhinted == 0 {
			continue
		}
		allHinted = allHinted && unhinted == 0
		var parts []string
		for _, z := range slices.Sorted(maps.Keys(perZone)) {
			parts = append(parts, fmt.Sprintf("%s %d", z, perZone[z]))
		}
		if unhinted > 0 {
			parts = append(parts, fmt.Sprintf("%d not hinted", unhinted))
		}
		loc.Hinted = append(loc.Hinted, m.Name+": "+strings.Join(parts, ", "))
		if unzoned > 0 && loc.Why == "" && endpoints.ZoneHinted(td) {
			loc.Why = fmt.Sprintf("cluster %s has %d ready endpoint(s) without a zone, so no endpoint is hinted", m.Name, unzoned)
		}
	}
	if !allHinted || len(byZone) == 0 {
		loc.Nodes = []string{fmt.Sprintf("every node: all %d ready endpoint(s)", total)}
		return loc
	}
	for _, z := range slices.Sorted(maps.Keys(byZone)) {
		var parts []string
		for _, c := range slices.Sorted(maps.Keys(byZone[z])) {
			parts = append(parts, fmt.Sprintf("%s %d", c, byZone[z][c]))
		}
		loc.Nodes = append(loc.Nodes, fmt.Sprintf("a node in %s: %s", z, strings.Join(parts, ", ")))
	}
	loc.Nodes = append(loc.Nodes, fmt.Sprintf("a node in another zone or without a zone label: all %d ready endpoint(s)", total))
	return loc
}

// hintedZones lists the zones an endpoint is hinted for.
func hintedZones(ep discoveryv1.Endpoint) []string {
	if ep.Hints == nil {
		return nil
	}
	out := make([]string, 0, len(ep.Hints.ForZones))
	for _, z := range ep.Hints.ForZones {
		out = append(out, z.Name)
	}
	return out
}
