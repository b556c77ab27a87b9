package sync

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// An import that prefers the same zone hints every cluster's endpoints for
// their zones while all ready endpoints have one. When one cluster's
// endpoint loses its zone, that cluster's slices change, and the change
// queues the other clusters, whose syncs drop their hints too; and back.
func TestZoneHintsFollowEveryClustersZones(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil)
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
