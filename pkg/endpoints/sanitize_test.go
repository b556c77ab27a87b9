package endpoints

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/addresses"
)

func addressSlice(name string, at discoveryv1.AddressType, addrs ...string) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "svc"}},
		AddressType: at,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, a := range addrs {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return sl
}

// The daemon, not the member's API server, refuses what must never become
// routing in the hub; the other endpoints of the same slices arrive, in
// either family of a dual-stack Service.
func TestSanitizeRefusesAddressesByPolicy(t *testing.T) {
	p := &addresses.Policy{
		HubServiceRanges: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:10:96::/112")},
		Denied:           []netip.Prefix{netip.MustParsePrefix("10.250.0.0/16")},
		Allowed:          []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")},
	}
	v4 := addressSlice("svc-v4", discoveryv1.AddressTypeIPv4,
		"10.1.0.1", "127.0.0.1", "169.254.169.254", "0.0.0.0", "224.0.0.1", "255.255.255.255",
		"10.96.0.1", "10.250.0.9", "192.168.0.1", "10.1.0.2")
	v6 := addressSlice("svc-v6", discoveryv1.AddressTypeIPv6,
		"fd00:1::1", "::1", "fe80::1", "::", "ff02::1", "::ffff:10.1.0.3", "fd00:10:96::1", "2001:db8::1", "fd00:1::2")
	src := Source{Cluster: "east", Slices: project(v4, v6)}
	before := copyMember(src.Slices)

	out, refused := Sanitize(src, p)

	if got, want := memberAddresses(out.Slices), []string{"10.1.0.1", "10.1.0.2", "fd00:1::1", "fd00:1::2"}; !slices.Equal(got, want) {
		t.Errorf("kept %v, want %v", got, want)
	}
	want := [addresses.NumReasons]int{}
	want[addresses.Special] = 5 + 5
	want[addresses.HubServiceRange] = 2
	want[addresses.DeniedRange] = 1
	want[addresses.NotAllowedRange] = 2 // 192.168.0.1, 2001:db8::1
	if refused.Counts != want {
		t.Errorf("refused %v, want %v", refused.Counts, want)
	}
	if refused.Total() != 15 {
		t.Errorf("Total = %d, want 15", refused.Total())
	}
	if len(refused.Samples) != maxRefusalSamples || refused.Samples[0].Address != "127.0.0.1" || refused.Samples[0].Verdict.Detail != "loopback" {
		t.Errorf("samples %+v, want the first %d refused, loopback first", refused.Samples, maxRefusalSamples)
	}
	if !reflect.DeepEqual(before, src.Slices) {
		t.Error("input mutated")
	}
	// The hub's objects built from what is left hold none of it.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc"},
		Spec: corev1.ServiceSpec{IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	out.Service = svc
	plan := PlanSlices(out, Locality{}, nil)
	for _, s := range plan.Create {
		for _, ep := range s.Endpoints {
			if v := p.Check(netip.MustParseAddr(ep.Addresses[0])); v.Reason != addresses.Accepted {
				t.Errorf("hub slice %s holds %s: %s", s.Name, ep.Addresses[0], v)
			}
		}
	}
	// Without a policy, only what the hub's API server would refuse goes,
	// and the special addresses too: they are never a host.
	_, refused = Sanitize(src, nil)
	if refused.Counts[addresses.HubServiceRange]+refused.Counts[addresses.DeniedRange]+refused.Counts[addresses.NotAllowedRange] != 0 || refused.Counts[addresses.Special] != 10 {
		t.Errorf("nil policy refused %v, want the 10 special addresses only", refused.Counts)
	}
}

// A member cannot speak for another cluster, or for the daemon: labels on
// its slices naming another source cluster, or the daemon's managed-by
// value, are data like any other and never change where its endpoints are
// attributed.
func TestMemberLabelsNeverAttributeEndpoints(t *testing.T) {
	sl := addressSlice("svc-forged", discoveryv1.AddressTypeIPv4, "10.1.0.1", "10.1.0.2")
	sl.Labels[LabelSourceCluster] = "west"
	sl.Labels["multicluster.kubernetes.io/source-cluster"] = "west"
	sl.Labels[discoveryv1.LabelManagedBy] = SliceManagedByValue
	sl.Labels[LabelManagedBy] = ManagedByValue
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc",
		Labels: map[string]string{"multicluster.kubernetes.io/source-cluster": "west"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	src, _ := Sanitize(Source{Cluster: "east", Service: svc, Slices: project(sl)}, nil)

	plan := PlanSlices(src, Locality{}, nil)
	if len(plan.Create) == 0 {
		t.Fatal("no hub slice planned")
	}
	for _, s := range plan.Create {
		if got := s.Labels["multicluster.kubernetes.io/source-cluster"]; got != "east" {
			t.Errorf("hub slice %s attributed to %q, want east", s.Name, got)
		}
	}
	// West's own slices of the service are not east's to replace: planned
	// against a hub that holds them, east's plan leaves them alone.
	west := PlanSlices(Source{Cluster: "west", Service: svc, Slices: project(addressSlice("svc-w", discoveryv1.AddressTypeIPv4, "10.2.0.1"))}, Locality{}, nil)
	var hub []*SliceDigest
	for _, s := range west.Create {
		if s.Name == "" {
			s.Name = s.GenerateName + "w"
		}
		hub = append(hub, DigestSlice(s))
	}
	again := PlanSlices(src, Locality{}, hub)
	for _, s := range again.Update {
		if s.Labels["multicluster.kubernetes.io/source-cluster"] == "west" {
			t.Errorf("east's plan updates west's slice %s", s.Name)
		}
	}
	for _, s := range again.Delete {
		if s.Labels["multicluster.kubernetes.io/source-cluster"] == "west" {
			t.Errorf("east's plan deletes west's slice %s", s.Name)
		}
	}
	eps := PerClusterEndpoints(src)
	if eps.Labels[LabelSourceCluster] != "east" {
		t.Errorf("per-cluster Endpoints attributed to %q, want east", eps.Labels[LabelSourceCluster])
	}
}
