package endpoints

import (
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
)

func addr(ip string) corev1.EndpointAddress {
	return corev1.EndpointAddress{IP: ip, NodeName: ptr.To("node-1")}
}

func TestPerClusterEndpoints(t *testing.T) {
	http := corev1.EndpointPort{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}
	grpc := corev1.EndpointPort{Name: "grpc", Port: 9090, Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("grpc")}
	grpcSlicePort := discoveryv1.EndpointPort{Name: ptr.To("grpc"), Port: ptr.To[int32](9090), AppProtocol: ptr.To("grpc")}
	hostname := endpoint("10.0.0.9", true)
	hostname.Hostname = ptr.To("web-0")
	unknown := endpoint("10.0.0.8", true)
	unknown.Conditions.Ready = nil

	tests := []struct {
		name   string
		slices []*discoveryv1.EndpointSlice
		want   []corev1.EndpointSubset
	}{
		{name: "no slices"},
		{name: "slice without endpoints", slices: []*discoveryv1.EndpointSlice{
			memberSlice("a", discoveryv1.AddressTypeIPv4, httpPorts),
		}},
		{name: "ready and not ready", slices: []*discoveryv1.EndpointSlice{
			memberSlice("a", discoveryv1.AddressTypeIPv4, httpPorts,
				endpoint("10.0.0.2", true), endpoint("10.0.0.1", false), unknown, hostname),
		}, want: []corev1.EndpointSubset{{
			Addresses:         []corev1.EndpointAddress{addr("10.0.0.2"), addr("10.0.0.8"), {IP: "10.0.0.9", Hostname: "web-0", NodeName: ptr.To("node-1")}},
			NotReadyAddresses: []corev1.EndpointAddress{addr("10.0.0.1")},
			Ports:             []corev1.EndpointPort{http},
		}}},
		{name: "port sets", slices: []*discoveryv1.EndpointSlice{
			memberSlice("a", discoveryv1.AddressTypeIPv4, httpPorts, endpoint("10.0.0.1", true)),
			memberSlice("b", discoveryv1.AddressTypeIPv6, httpPorts, endpoint("fd00::1", true)),
			memberSlice("c", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{grpcSlicePort, httpPorts[0]}, endpoint("10.0.0.1", true)),
			memberSlice("d", discoveryv1.AddressTypeFQDN, httpPorts, endpoint("db.example.com", true)),
		}, want: []corev1.EndpointSubset{
			{Addresses: []corev1.EndpointAddress{addr("10.0.0.1")}, Ports: []corev1.EndpointPort{grpc, http}},
			{Addresses: []corev1.EndpointAddress{addr("10.0.0.1"), addr("fd00::1")}, Ports: []corev1.EndpointPort{http}},
		}},
		{name: "duplicates: ready wins", slices: []*discoveryv1.EndpointSlice{
			memberSlice("a", discoveryv1.AddressTypeIPv4, httpPorts, endpoint("10.0.0.1", false), endpoint("10.0.0.2", false)),
			memberSlice("b", discoveryv1.AddressTypeIPv4, httpPorts, endpoint("10.0.0.1", true), endpoint("10.0.0.2", false)),
		}, want: []corev1.EndpointSubset{{
			Addresses:         []corev1.EndpointAddress{addr("10.0.0.1")},
			NotReadyAddresses: []corev1.EndpointAddress{addr("10.0.0.2")},
			Ports:             []corev1.EndpointPort{http},
		}}},
		{name: "ports without number skipped", slices: []*discoveryv1.EndpointSlice{
			memberSlice("a", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{{Name: ptr.To("all")}}, endpoint("10.0.0.1", true)),
		}, want: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{addr("10.0.0.1")}}}},
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := testSource(tt.slices...)
			got := PerClusterEndpoints(src)
			if got.Name != "web-east" || got.Namespace != testNamespace || got.Labels[LabelSourceCluster] != testCluster || len(got.Annotations) != 1 {
				t.Errorf("metadata = %+v", got.ObjectMeta)
			}
			if !apiequality.Semantic.DeepEqual(got.Subsets, tt.want) {
				t.Errorf("subsets =\n%+v\nwant\n%+v", got.Subsets, tt.want)
			}
			if d, ok := EndpointsDigestFromMeta(got.ObjectMeta); !ok || d.Hash != hashSubsets(tt.want) || len(d.Annotations) != 0 {
				t.Errorf("content annotation %q does not describe the subsets", got.Annotations[AnnotationContent])
			}
			for range 10 {
				if again := PerClusterEndpoints(shuffledSource(r, src)); !apiequality.Semantic.DeepEqual(again, got) {
					t.Fatalf("depends on input order:\n%+v\n%+v", again.Subsets, got.Subsets)
				}
			}
		})
	}
}

func TestPerClusterEndpointsTruncation(t *testing.T) {
	endpoints := func(from, n int, ready bool) []discoveryv1.Endpoint {
		eps := make([]discoveryv1.Endpoint, n)
		for i := range eps {
			eps[i] = endpoint(ipv4(from+i), ready)
		}
		return eps
	}
	otherPorts := []discoveryv1.EndpointPort{slicePort("grpc", 9090)}
	tests := []struct {
		name      string
		slices    []*discoveryv1.EndpointSlice
		truncated bool
		ready     []int // per subset
		notReady  []int
	}{
		{
			name:   "1000 ready",
			slices: []*discoveryv1.EndpointSlice{memberSlice("a", discoveryv1.AddressTypeIPv4, httpPorts, endpoints(0, 1000, true)...)},
			ready:  []int{1000}, notReady: []int{0},
		},
		{
			name:   "600 ready, 400 not ready",
			slices: []*discoveryv1.EndpointSlice{memberSlice("a", discoveryv1.AddressTypeIPv4, httpPorts, append(endpoints(0, 600, true), endpoints(600, 400, false)...)...)},
			ready:  []int{600}, notReady: []int{400},
		},
		{
			name:      "1200 ready",
			slices:    []*discoveryv1.EndpointSlice{memberSlice("a", discoveryv1.AddressTypeIPv4, httpPorts, endpoints(0, 1200, true)...)},
			truncated: true, ready: []int{1000}, notReady: []int{0},
		},
		{
			name:      "800 ready, 400 not ready",
			slices:    []*discoveryv1.EndpointSlice{memberSlice("a", discoveryv1.AddressTypeIPv4, httpPorts, append(endpoints(0, 800, true), endpoints(800, 400, false)...)...)},
			truncated: true, ready: []int{800}, notReady: []int{200},
		},
		{
			name: "1100 ready, 100 not ready over two subsets",
			slices: []*discoveryv1.EndpointSlice{
				memberSlice("a", discoveryv1.AddressTypeIPv4, otherPorts, append(endpoints(0, 825, true), endpoints(2000, 50, false)...)...),
				memberSlice("b", discoveryv1.AddressTypeIPv4, httpPorts, append(endpoints(1000, 275, true), endpoints(3000, 50, false)...)...),
			},
			// grpc sorts first: ceil(825/1100*1000) = 750, then the remaining 250.
			truncated: true, ready: []int{750, 250}, notReady: []int{0, 0},
		},
		{
			name: "900 ready, 300 not ready over two subsets",
			slices: []*discoveryv1.EndpointSlice{
				memberSlice("a", discoveryv1.AddressTypeIPv4, otherPorts, append(endpoints(0, 450, true), endpoints(2000, 200, false)...)...),
				memberSlice("b", discoveryv1.AddressTypeIPv4, httpPorts, append(endpoints(1000, 450, true), endpoints(3000, 100, false)...)...),
			},
			// 100 not ready fit: ceil(200/300*100) = 67, then 33.
			truncated: true, ready: []int{450, 450}, notReady: []int{67, 33},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PerClusterEndpoints(testSource(tt.slices...))
			if v, ok := got.Annotations[AnnotationOverCapacity]; ok != tt.truncated || (ok && v != OverCapacityTruncated) {
				t.Errorf("annotations = %v, truncated = %v", got.Annotations, tt.truncated)
			}
			var ready, notReady []int
			total := 0
			for _, s := range got.Subsets {
				ready = append(ready, len(s.Addresses))
				notReady = append(notReady, len(s.NotReadyAddresses))
				total += len(s.Addresses) + len(s.NotReadyAddresses)
			}
			if !slices.Equal(ready, tt.ready) || !slices.Equal(notReady, tt.notReady) {
				t.Errorf("ready %v not ready %v, want %v and %v", ready, notReady, tt.ready, tt.notReady)
			}
			if total > MaxEndpointsAddresses {
				t.Errorf("%d addresses, more than %d", total, MaxEndpointsAddresses)
			}
		})
	}
}

func TestEndpointsUpToDate(t *testing.T) {
	big := make([]discoveryv1.Endpoint, 0, 1001)
	for i := range 1001 {
		big = append(big, endpoint(ipv4(i), true))
	}
	truncated := PerClusterEndpoints(testSource(memberSlice("a", discoveryv1.AddressTypeIPv4, httpPorts, big...)))
	desired := PerClusterEndpoints(testSource(memberSlice("a", discoveryv1.AddressTypeIPv4, httpPorts, readyEndpoints(0, 3)...)))

	tests := []struct {
		name string
		live func() *corev1.Endpoints
		want bool
	}{
		{"same", func() *corev1.Endpoints { return desired.DeepCopy() }, true},
		{"server fields, defaulted protocol, others' labels", func() *corev1.Endpoints {
			l := desired.DeepCopy()
			l.ResourceVersion, l.UID = "5", "uid"
			l.Labels["team"] = "payments"
			l.Subsets[0].Ports[0].Protocol = ""
			return l
		}, true},
		{"stale over-capacity annotation", func() *corev1.Endpoints {
			l := desired.DeepCopy()
			l.Annotations = map[string]string{AnnotationOverCapacity: OverCapacityTruncated, "note": "x"}
			return l
		}, false},
		{"address now not ready", func() *corev1.Endpoints {
			l := desired.DeepCopy()
			l.Subsets[0].NotReadyAddresses = l.Subsets[0].Addresses[:1]
			l.Subsets[0].Addresses = l.Subsets[0].Addresses[1:]
			return l
		}, false},
		{"node name", func() *corev1.Endpoints {
			l := desired.DeepCopy()
			l.Subsets[0].Addresses[0].NodeName = ptr.To("node-2")
			return l
		}, false},
		{"port", func() *corev1.Endpoints {
			l := desired.DeepCopy()
			l.Subsets[0].Ports[0].Port = 1
			return l
		}, false},
		{"no subsets", func() *corev1.Endpoints {
			l := desired.DeepCopy()
			l.Subsets = nil
			return l
		}, false},
		{"truncated", func() *corev1.Endpoints { return truncated.DeepCopy() }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			live := DigestEndpoints(tt.live())
			if got := EndpointsUpToDate(desired, live); got != tt.want {
				t.Errorf("EndpointsUpToDate() = %v, want %v", got, tt.want)
			}
			before := live.DeepCopyObject()
			merged := MergeEndpoints(desired, live)
			if !EndpointsUpToDate(desired, DigestEndpoints(merged)) {
				t.Errorf("MergeEndpoints() result not up to date: %+v", merged)
			}
			if _, ok := merged.Annotations[AnnotationOverCapacity]; ok {
				t.Errorf("MergeEndpoints() kept %s", AnnotationOverCapacity)
			}
			if !apiequality.Semantic.DeepEqual(live, before) {
				t.Error("MergeEndpoints modified live")
			}
			if live.Labels["team"] != merged.Labels["team"] || live.Annotations["note"] != merged.Annotations["note"] {
				t.Errorf("MergeEndpoints() dropped others' metadata: %+v", merged.ObjectMeta)
			}
		})
	}
}

func BenchmarkPerClusterEndpoints(b *testing.B) {
	src := benchSource(1000)
	b.ReportAllocs()
	for b.Loop() {
		PerClusterEndpoints(src)
	}
}
