package sync

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// An import that prefers the same zone hints every cluster's endpoints for
// their zones while all ready endpoints have one. When one cluster's
// endpoint loses its zone, that cluster's slices change, and the change
// queues the other clusters, whose syncs drop their hints too; and back.
func TestZoneHintsFollowEveryClustersZones(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFixture(t, Options{Metrics: NewMetrics(reg)}, nil, nil)
	reg.MustRegister(f.ctrl)
	c2Key := Key{Cluster: "c2", Namespace: "shop", Name: "cart"}
	for i, k := range []Key{cartC1, c2Key} {
		m := f.member(k.Cluster)
		svc := service("shop", "cart")
		svc.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferSameZone)
		_ = m.services.Add(svc)
		m.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-abc", 100*i, 2, true)}
	}
	for _, k := range []Key{cartC1, c2Key, cartC1.ClusterSet(), cartC1, c2Key} {
		f.sync(k)
	}
	hinted := func(cluster string) []bool {
		t.Helper()
		list, err := f.hub.DiscoveryV1().EndpointSlices("shop").List(f.ctx, metav1.ListOptions{LabelSelector: mcsv1beta1.LabelSourceCluster + "=" + cluster})
		if err != nil {
			t.Fatal(err)
		}
		var out []bool
		for _, s := range list.Items {
			for _, ep := range s.Endpoints {
				out = append(out, ep.Hints != nil && len(ep.Hints.ForZones) == 1 && ep.Hints.ForZones[0].Name == ptr.Deref(ep.Zone, ""))
			}
		}
		return out
	}
	all := func(v bool) []bool { return []bool{v, v} }
	if c1, c2 := hinted("c1"), hinted("c2"); !slices.Equal(c1, all(true)) || !slices.Equal(c2, all(true)) {
		t.Fatalf("hinted for their zones: c1 %v, c2 %v; want all", c1, c2)
	}
	for mode, want := range map[string]float64{"same-zone": 1, "spread": 0} {
		if got := gathered(t, reg, "endpoint_aggregator_imports_by_locality", "mode", mode); got != want {
			t.Errorf("imports_by_locality{mode=%q} = %v, want %v", mode, got, want)
		}
	}

	for _, zone := range []*string{nil, ptr.To("zone-b")} {
		f.quiesce()
		s := memberSlice("shop", "cart", "cart-abc", 0, 2, true)
		s.Endpoints[1].Zone = zone
		f.members.members["c1"].slices = []*discoveryv1.EndpointSlice{s}
		f.sync(cartC1)
		if queued := f.queuedWhenQuiet(); !slices.Contains(queued, c2Key) {
			t.Fatalf("c1's zone %v queued %v, not c2", zone, queued)
		}
		f.sync(c2Key)
		want := zone != nil
		if c1, c2 := hinted("c1"), hinted("c2"); !slices.Equal(c1, all(want)) || !slices.Equal(c2, all(want)) {
			t.Errorf("c1's endpoint in zone %v: hinted c1 %v, c2 %v; want all %v", ptr.Deref(zone, "<none>"), c1, c2, want)
		}
	}
}

// Where the hub is a member and prefers its own endpoints, its endpoints
// are hinted for every zone of its Nodes and the others' for a zone no Node
// has. A Node in a new zone rewrites the hub cluster's hints; Nodes without
// a zone are counted.
func TestPreferLocalFollowsTheHubsNodeZones(t *testing.T) {
	node := func(name, zone string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if zone != "" {
			n.Labels = map[string]string{corev1.LabelTopologyZone: zone}
		}
		return n
	}
	reg := prometheus.NewRegistry()
	f := newFixture(t, Options{HubCluster: "hub", PreferLocal: true, Metrics: NewMetrics(reg)},
		[]runtime.Object{node("n1", "z1"), node("n2", "z2"), node("n3", "")}, nil)
	reg.MustRegister(f.ctrl)
	hubKey, eastKey := Key{Cluster: "hub", Namespace: "shop", Name: "cart"}, Key{Cluster: "east", Namespace: "shop", Name: "cart"}
	for i, k := range []Key{hubKey, eastKey} {
		m := f.member(k.Cluster)
		_ = m.services.Add(service("shop", "cart"))
		m.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-abc", 100*i, 2, true)}
	}
	for _, k := range []Key{hubKey, eastKey, hubKey.ClusterSet(), hubKey, eastKey} {
		f.sync(k)
	}
	zonesOf := func(cluster string) []string {
		t.Helper()
		list, err := f.hub.DiscoveryV1().EndpointSlices("shop").List(f.ctx, metav1.ListOptions{LabelSelector: mcsv1beta1.LabelSourceCluster + "=" + cluster})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range list.Items {
			for _, ep := range s.Endpoints {
				h := "-"
				if ep.Hints != nil {
					var zones []string
					for _, z := range ep.Hints.ForZones {
						zones = append(zones, z.Name)
					}
					h = strings.Join(zones, ",")
				}
				out = append(out, h)
			}
		}
		return out
	}
	if got, want := zonesOf("hub"), []string{"z1,z2", "z1,z2"}; !slices.Equal(got, want) {
		t.Errorf("hub's endpoints hinted for %q, want %q", got, want)
	}
	if got, want := zonesOf("east"), []string{endpoints.RemoteZone, endpoints.RemoteZone}; !slices.Equal(got, want) {
		t.Errorf("east's endpoints hinted for %q, want %q", got, want)
	}
	if got := gathered(t, reg, "endpoint_aggregator_hub_nodes_without_zone"); got != 1 {
		t.Errorf("hub_nodes_without_zone = %v, want 1", got)
	}
	if got := gathered(t, reg, "endpoint_aggregator_imports_by_locality", "mode", "prefer-local"); got != 1 {
		t.Errorf("imports_by_locality{mode=prefer-local} = %v, want 1", got)
	}

	f.quiesce()
	if _, err := f.hub.CoreV1().Nodes().Create(f.ctx, node("n4", "z3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if queued := f.queuedWhenQuiet(); !slices.Contains(queued, hubKey) {
		t.Fatalf("a Node in a new zone queued %v, not the hub cluster's key", queued)
	}
	f.sync(hubKey)
	if got, want := zonesOf("hub"), []string{"z1,z2,z3", "z1,z2,z3"}; !slices.Equal(got, want) {
		t.Errorf("after a Node in z3: hub's endpoints hinted for %q, want %q", got, want)
	}
}
