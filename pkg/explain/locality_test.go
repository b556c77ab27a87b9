package explain

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// zonedMember is a healthy member whose hub slice holds one ready endpoint
// per zone, hinted for it when hinted.
func zonedMember(name string, hinted bool, zones ...string) Member {
	m := healthy(name, 80, time.Hour)
	sl := m.HubSlices[0]
	sl.Endpoints = nil
	for i, z := range zones {
		ep := discoveryv1.Endpoint{Addresses: []string{name + string(rune('a'+i))}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
		if z != "" {
			ep.Zone = ptr.To(z)
			if hinted {
				ep.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: z}}}
			}
		}
		sl.Endpoints = append(sl.Endpoints, ep)
	}
	return m
}

// explain reads the hints as kube-proxy does: what a node in each zone
// uses, and why nothing is hinted where the import asks.
func TestLocalitySaysWhatANodeInEachZoneUses(t *testing.T) {
	for _, tt := range []struct {
		name    string
		td      string
		members []Member
		nodes   []string
		why     string
	}{
		{"no preference", "", []Member{zonedMember("east", false, "z1"), zonedMember("west", false, "z2")},
			[]string{"every node: all 2 ready endpoint(s)"}, ""},
		{"zones", corev1.ServiceTrafficDistributionPreferSameZone,
			[]Member{zonedMember("east", true, "z1", "z2"), zonedMember("west", true, "z1")},
			[]string{"a node in z1: east 1, west 1", "a node in z2: east 1", "a node in another zone or without a zone label: all 3 ready endpoint(s)"}, ""},
		{"one without a zone", corev1.ServiceTrafficDistributionPreferClose,
			[]Member{zonedMember("east", false, "z1"), zonedMember("west", false, "")},
			[]string{"every node: all 2 ready endpoint(s)"}, "cluster west has 1 ready endpoint(s) without a zone, so no endpoint is hinted"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Namespace: "shop", Name: "cart", Now: now, HubNamespace: true, Import: imported("east", "west"), Members: tt.members}
			if tt.td != "" {
				in.Import.Spec.TrafficDistribution = ptr.To(tt.td)
			}
			loc := Build(in).Locality
			if loc == nil {
				t.Fatal("no locality for an import")
			}
			if !slices.Equal(loc.Nodes, tt.nodes) || loc.Why != tt.why {
				t.Errorf("locality %+v, want nodes %q, why %q", *loc, tt.nodes, tt.why)
			}
		})
	}
}

// "This cluster first": explain names the mode and shows that a node in a
// hub zone uses the hub's endpoints, any other node every cluster's.
func TestLocalitySaysThisClusterFirst(t *testing.T) {
	hinted := func(m Member, zones ...string) Member {
		for i := range m.HubSlices[0].Endpoints {
			m.HubSlices[0].Endpoints[i].Hints = &discoveryv1.EndpointHints{}
			for _, z := range zones {
				m.HubSlices[0].Endpoints[i].Hints.ForZones = append(m.HubSlices[0].Endpoints[i].Hints.ForZones, discoveryv1.ForZone{Name: z})
			}
		}
		return m
	}
	in := Input{Namespace: "shop", Name: "cart", Now: now, HubNamespace: true, Import: imported("east", "hub"),
		Policy: Policy{PreferLocal: true, HubCluster: "hub"}, HubZones: []string{"z1", "z2"},
		Members: []Member{hinted(zonedMember("east", false, "z1"), endpoints.RemoteZone), hinted(zonedMember("hub", false, "z1", "z2"), "z1", "z2")}}
	loc := Build(in).Locality
	if !strings.HasPrefix(loc.Mode, "this cluster first") {
		t.Errorf("mode %q", loc.Mode)
	}
	want := []string{"a node in " + endpoints.RemoteZone + ": east 1", "a node in z1: hub 2", "a node in z2: hub 2",
		"a node in another zone or without a zone label: all 3 ready endpoint(s)"}
	if !slices.Equal(loc.Nodes, want) {
		t.Errorf("nodes %q, want %q", loc.Nodes, want)
	}
	in.HubNodesWithoutZone = []string{"n3"}
	if loc := Build(in).Locality; !strings.HasPrefix(loc.Nodes[len(loc.Nodes)-1], "1 hub Node(s) without a zone label") {
		t.Errorf("a hub Node without a zone is not said: %q", loc.Nodes)
	}
	in.HubZones = nil
	if loc := Build(in).Locality; !strings.Contains(loc.Mode, "no Node of the hub has a zone label") {
		t.Errorf("without zoned hub Nodes: mode %q", loc.Mode)
	}
	in.Policy.HubCluster = ""
	if loc := Build(in).Locality; !strings.Contains(loc.Mode, "the hub is not a member") {
		t.Errorf("without the hub as a member: mode %q", loc.Mode)
	}
}
