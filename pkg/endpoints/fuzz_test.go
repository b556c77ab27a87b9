package endpoints

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/addresses"
)

// fuzzPolicy is the address policy the fuzzed member is held to.
var fuzzPolicy = &addresses.Policy{
	HubServiceRanges: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:10:96::/112")},
	Denied:           []netip.Prefix{netip.MustParsePrefix("10.0.0.128/25")},
}

// FuzzDesiredHubObjects feeds member objects built from arbitrary input
// through Sanitize and every desired-state function, and checks that nothing
// panics and everything produced would pass the API server's validation of
// names, labels, addresses and sizes.
func FuzzDesiredHubObjects(f *testing.F) {
	f.Add("cart", "east", "10.0.0.1", "web-0", "http", int32(8080), uint8(3), true, false)
	f.Add(strings.Repeat("s", 63), strings.Repeat("c", 63), "fd00::1", "", "", int32(1), uint8(150), false, true)
	f.Add("db", "west", "not-an-ip", "Bad_Host", "BAD", int32(0), uint8(1), true, true)
	f.Add("a", "b", "010.0.0.1", "h", "grpc", int32(70000), uint8(250), true, false)
	f.Add("x", "y", "::ffff:10.0.0.1", "h", "p", int32(53), uint8(2), false, false)
	f.Add("k", "east", "10.96.0.1", "", "https", int32(443), uint8(1), true, false)
	f.Add("m", "east", "169.254.169.25", "", "http", int32(80), uint8(9), true, false)
	f.Add("b", "east", "255.255.255.25", "", "http", int32(80), uint8(9), true, false)
	f.Add("l", "east", "fe80::", "", "http", int32(80), uint8(20), true, true)
	f.Fuzz(func(t *testing.T, svcName, cluster, addr, hostname, portName string, port int32, n uint8, ready, ipv6 bool) {
		if len(validation.IsDNS1123Label(svcName)) > 0 || len(validation.IsDNS1123Label(cluster)) > 0 {
			return // the API server never gives us such names
		}
		at := discoveryv1.AddressTypeIPv4
		if ipv6 {
			at = discoveryv1.AddressTypeIPv6
		}
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: svcName + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: svcName}},
			AddressType: at,
			Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port, Protocol: ptr.To(corev1.ProtocolTCP)}},
		}
		for i := 0; i < int(n); i++ {
			a := addr
			if i > 0 {
				a = fmt.Sprintf("%s%d", addr, i)
			}
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{a},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready},
				Hostname:   &hostname,
			})
		}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: svcName},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "p", Port: 80}}}}
		src, _ := Sanitize(Source{Cluster: cluster, Service: svc, Slices: project(sl)}, fuzzPolicy)

		plan := PlanSlices(src, Locality{}, nil)
		for _, s := range append(plan.Create, plan.Update...) {
			checkSlice(t, s)
		}
		for _, mode := range []PerClusterMode{PerClusterMirror, PerClusterHeadless} {
			if s := PerClusterService(src, mode); len(validation.IsDNS1123Label(s.Name)) > 0 {
				t.Fatalf("per-cluster Service name %q invalid", s.Name)
			}
		}
		eps := PerClusterEndpoints(src)
		total := 0
		for _, ss := range eps.Subsets {
			for _, a := range append(ss.Addresses, ss.NotReadyAddresses...) {
				total++
				ip, err := netip.ParseAddr(a.IP)
				if err != nil {
					t.Fatalf("Endpoints address %q invalid", a.IP)
				}
				if v := fuzzPolicy.Check(ip); v.Reason != addresses.Accepted {
					t.Fatalf("address %s reached the per-cluster Endpoints: %s", ip, v)
				}
				if a.Hostname != "" && len(validation.IsDNS1123Label(a.Hostname)) > 0 {
					t.Fatalf("Endpoints hostname %q invalid", a.Hostname)
				}
			}
		}
		if total > MaxEndpointsAddresses {
			t.Fatalf("Endpoints has %d addresses", total)
		}
		checkLabels(t, eps.Labels)
	})
}

func checkSlice(t *testing.T, s *discoveryv1.EndpointSlice) {
	t.Helper()
	if errs := validation.IsDNS1123Subdomain(s.Name); len(errs) > 0 {
		t.Fatalf("slice name %q: %v", s.Name, errs)
	}
	if len(s.Endpoints) > MaxEndpointsPerSlice {
		t.Fatalf("slice %s has %d endpoints", s.Name, len(s.Endpoints))
	}
	checkLabels(t, s.Labels)
	for _, ep := range s.Endpoints {
		if len(ep.Addresses) != 1 {
			t.Fatalf("endpoint has %d addresses", len(ep.Addresses))
		}
		a, err := netip.ParseAddr(ep.Addresses[0])
		if err != nil || a.Is4() != (s.AddressType == discoveryv1.AddressTypeIPv4) {
			t.Fatalf("address %q invalid for %s", ep.Addresses[0], s.AddressType)
		}
		if v := fuzzPolicy.Check(a); v.Reason != addresses.Accepted {
			t.Fatalf("address %s reached a hub slice: %s", a, v)
		}
		if ep.Hostname != nil && len(validation.IsDNS1123Label(*ep.Hostname)) > 0 {
			t.Fatalf("hostname %q invalid", *ep.Hostname)
		}
	}
	for _, p := range s.Ports {
		if !validPort(p) {
			t.Fatalf("invalid port %+v", p)
		}
	}
}

func checkLabels(t *testing.T, labels map[string]string) {
	t.Helper()
	for k, v := range labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			t.Fatalf("label key %q: %v", k, errs)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Fatalf("label %s value %q: %v", k, v, errs)
		}
	}
}

func TestSanitizeDropsWhatTheHubWouldReject(t *testing.T) {
	good := discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}}
	cases := []struct {
		name    string
		at      discoveryv1.AddressType
		ep      discoveryv1.Endpoint
		port    discoveryv1.EndpointPort
		dropped int
	}{
		{"valid", discoveryv1.AddressTypeIPv4, good, discoveryv1.EndpointPort{Name: ptr.To("http")}, 0},
		{"not an IP", discoveryv1.AddressTypeIPv4, discoveryv1.Endpoint{Addresses: []string{"nope"}}, discoveryv1.EndpointPort{}, 1},
		{"IPv6 in an IPv4 slice", discoveryv1.AddressTypeIPv4, discoveryv1.Endpoint{Addresses: []string{"fd00::1"}}, discoveryv1.EndpointPort{}, 1},
		{"leading zeros", discoveryv1.AddressTypeIPv4, discoveryv1.Endpoint{Addresses: []string{"010.0.0.1"}}, discoveryv1.EndpointPort{}, 1},
		{"bad hostname", discoveryv1.AddressTypeIPv4, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, Hostname: ptr.To("Not_A_Label")}, discoveryv1.EndpointPort{}, 1},
		{"bad port name drops the slice", discoveryv1.AddressTypeIPv4, good, discoveryv1.EndpointPort{Name: ptr.To("BAD NAME")}, 1},
		{"port out of range drops the slice", discoveryv1.AddressTypeIPv4, good, discoveryv1.EndpointPort{Port: ptr.To[int32](70000)}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sl := ProjectSlice(&discoveryv1.EndpointSlice{AddressType: tc.at, Endpoints: []discoveryv1.Endpoint{tc.ep}, Ports: []discoveryv1.EndpointPort{tc.port}})
			before := sl.DeepCopyObject()
			out, refused := Sanitize(Source{Slices: []*MemberSlice{sl}}, nil)
			if dropped := refused.Total(); dropped != tc.dropped || refused.Counts[addresses.Invalid] != dropped {
				t.Fatalf("dropped %d, want %d", dropped, tc.dropped)
			}
			if tc.dropped == 0 && out.Slices[0] != sl {
				t.Error("a clean slice was copied")
			}
			if !reflect.DeepEqual(before, sl) {
				t.Error("input mutated")
			}
		})
	}
	// A lying member's oversized slice is cut at the API server's limit.
	big := &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4}
	for i := 0; i < 1500; i++ {
		big.Endpoints = append(big.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.%d.%d.1", i/256, i%256)}})
	}
	out, refused := Sanitize(Source{Slices: project(big)}, nil)
	if dropped := refused.Total(); dropped != 500 || len(out.Slices[0].Endpoints) != maxMemberSliceEndpoints {
		t.Fatalf("oversized slice: dropped %d, kept %d", dropped, len(out.Slices[0].Endpoints))
	}
	// So is one with more ports than the API allows: its endpoints are
	// refused with it.
	ports := &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{good, {Addresses: []string{"10.0.0.2"}}}}
	for i := range maxSlicePorts + 1 {
		ports.Ports = append(ports.Ports, discoveryv1.EndpointPort{Name: ptr.To(fmt.Sprintf("p%d", i)), Port: ptr.To[int32](int32(i%65535 + 1))})
	}
	out, refused = Sanitize(Source{Slices: project(ports)}, nil)
	if refused.Total() != 2 || len(out.Slices) != 0 {
		t.Fatalf("a slice of %d ports: %d endpoints refused, %d slices kept; want both refused and none kept", len(ports.Ports), refused.Total(), len(out.Slices))
	}
}

// An unnamed port beside named ones is dropped; the endpoints stay.
func TestSanitizeDropsAnUnnamedPortBesideNamedOnes(t *testing.T) {
	sl := &discoveryv1.EndpointSlice{
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}},
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To(""), Port: ptr.To[int32](8080)},
			{Name: ptr.To("metrics"), Port: ptr.To[int32](9090)},
		},
	}
	m := ProjectSlice(sl)
	before := m.DeepCopyObject()
	out, refused := Sanitize(Source{Slices: []*MemberSlice{m}}, nil)
	if dropped := refused.Total(); dropped != 0 || len(out.Slices) != 1 || len(out.Slices[0].Endpoints) != 1 {
		t.Fatalf("dropped %d, slices %+v", dropped, out.Slices)
	}
	if ps := out.Slices[0].Ports; len(ps) != 1 || *ps[0].Name != "metrics" {
		t.Errorf("ports %+v, want metrics only", ps)
	}
	if !reflect.DeepEqual(before, m) {
		t.Error("input mutated")
	}
	// One unnamed port alone is fine.
	sl.Ports = sl.Ports[:1]
	m = ProjectSlice(sl)
	if out, _ := Sanitize(Source{Slices: []*MemberSlice{m}}, nil); out.Slices[0] != m {
		t.Error("a slice with one unnamed port was changed")
	}
}

// A port name used twice in a slice is refused by the hub: the first port
// of that name stays, and so do the endpoints.
func TestSanitizeDropsARepeatedPortName(t *testing.T) {
	sl := &discoveryv1.EndpointSlice{
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}},
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Port: ptr.To[int32](8080)},
			{Name: ptr.To("metrics"), Port: ptr.To[int32](9090)},
			{Name: ptr.To("http"), Port: ptr.To[int32](8081)},
		},
	}
	m := ProjectSlice(sl)
	before := m.DeepCopyObject()
	out, refused := Sanitize(Source{Slices: []*MemberSlice{m}}, nil)
	if dropped := refused.Total(); dropped != 0 || len(out.Slices) != 1 || len(out.Slices[0].Endpoints) != 1 {
		t.Fatalf("dropped %d, slices %+v", dropped, out.Slices)
	}
	ps := out.Slices[0].Ports
	if len(ps) != 2 || *ps[0].Name != "http" || *ps[0].Port != 8080 || *ps[1].Name != "metrics" {
		t.Errorf("ports %+v, want http/8080 and metrics", ps)
	}
	if !reflect.DeepEqual(before, m) {
		t.Error("input mutated")
	}
}
