package endpoints

import (
	"fmt"
	"github.com/cespare/xxhash/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// endpointEqual is the reference for hashEndpoint: the fields
// hubEndpointInto carries, nil hints equal to empty ones.
func endpointEqual(a, b *discoveryv1.Endpoint) bool {
	var ah, bh discoveryv1.EndpointHints
	if a.Hints != nil {
		ah = *a.Hints
	}
	if b.Hints != nil {
		bh = *b.Hints
	}
	return slices.Equal(a.Addresses, b.Addresses) &&
		ptr.Equal(a.Conditions.Ready, b.Conditions.Ready) &&
		ptr.Equal(a.Conditions.Serving, b.Conditions.Serving) &&
		ptr.Equal(a.Conditions.Terminating, b.Conditions.Terminating) &&
		ptr.Equal(a.Hostname, b.Hostname) &&
		ptr.Equal(a.NodeName, b.NodeName) &&
		ptr.Equal(a.Zone, b.Zone) &&
		slices.Equal(ah.ForZones, bh.ForZones) && slices.Equal(ah.ForNodes, bh.ForNodes)
}

// hashAPIEndpoints is the Hash of a slice of group holding eps, in this
// order.
func hashAPIEndpoints(group string, eps ...*discoveryv1.Endpoint) uint64 {
	var h xxhash.Digest
	h.Reset()
	writeString(&h, group)
	writeInt(&h, len(eps))
	for _, ep := range eps {
		hashEndpoint(&h, ep)
	}
	return sum(&h)
}

// endpointVariants differ from each other in one field the hub carries,
// except where noted.
func endpointVariants() []discoveryv1.Endpoint {
	base := func() discoveryv1.Endpoint { return endpoint("10.0.0.1", true) }
	var out []discoveryv1.Endpoint
	add := func(f func(*discoveryv1.Endpoint)) {
		ep := base()
		f(&ep)
		out = append(out, ep)
	}
	add(func(*discoveryv1.Endpoint) {})
	add(func(ep *discoveryv1.Endpoint) { ep.Addresses = []string{"10.0.0.2"} })
	add(func(ep *discoveryv1.Endpoint) { ep.Addresses = []string{"10.0.0.1", "10.0.0.2"} })
	add(func(ep *discoveryv1.Endpoint) { ep.Addresses = []string{"10.0.0.11"} })
	add(func(ep *discoveryv1.Endpoint) { ep.Addresses = nil })
	add(func(ep *discoveryv1.Endpoint) { ep.Conditions.Ready = nil })
	add(func(ep *discoveryv1.Endpoint) { ep.Conditions.Ready = ptr.To(false) })
	add(func(ep *discoveryv1.Endpoint) { ep.Conditions.Serving = ptr.To(true) })
	add(func(ep *discoveryv1.Endpoint) { ep.Conditions.Terminating = ptr.To(false) })
	add(func(ep *discoveryv1.Endpoint) { ep.Hostname = ptr.To("") })
	add(func(ep *discoveryv1.Endpoint) { ep.Hostname = ptr.To("a") })
	add(func(ep *discoveryv1.Endpoint) { ep.NodeName = ptr.To("a") })
	add(func(ep *discoveryv1.Endpoint) { ep.Zone = ptr.To("a") })
	add(func(ep *discoveryv1.Endpoint) { ep.Hostname, ep.Zone = ptr.To("a"), ptr.To("") })
	add(func(ep *discoveryv1.Endpoint) { ep.Hostname, ep.Zone = ptr.To(""), ptr.To("a") })
	add(func(ep *discoveryv1.Endpoint) {
		ep.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "a"}}}
	})
	add(func(ep *discoveryv1.Endpoint) {
		ep.Hints = &discoveryv1.EndpointHints{ForNodes: []discoveryv1.ForNode{{Name: "a"}}}
	})
	// Equal to the base: fields the hub does not carry, and empty hints.
	add(func(ep *discoveryv1.Endpoint) { ep.Hints = &discoveryv1.EndpointHints{} })
	add(func(ep *discoveryv1.Endpoint) { ep.TargetRef = &corev1.ObjectReference{Name: "p"} })
	add(func(ep *discoveryv1.Endpoint) { ep.DeprecatedTopology = map[string]string{"a": "b"} })
	return out
}

func TestHashEndpointsAgreesWithEquality(t *testing.T) {
	vs := endpointVariants()
	for i := range vs {
		for j := range vs {
			a, b := &vs[i], &vs[j]
			sameHash := hashAPIEndpoints("g", a) == hashAPIEndpoints("g", b)
			if want := endpointEqual(a, b); sameHash != want {
				t.Errorf("variants %d and %d: equal hashes %v, equal endpoints %v\n%v\n%v", i, j, sameHash, want, a, b)
			}
		}
	}
	// The digest of a slice hashes like its endpoints, in order.
	s := memberSlice("s", discoveryv1.AddressTypeIPv4, httpPorts, vs[:3]...)
	d := DigestSlice(s)
	key := groupKey(s.AddressType, s.Ports)
	if want := hashAPIEndpoints(key, &vs[0], &vs[1], &vs[2]); d.Hash != want || d.Group != groupHash(key) {
		t.Errorf("DigestSlice hash %x, group %x, want %x and %x", d.Hash, d.Group, want, groupHash(key))
	}
	if swapped := hashAPIEndpoints(key, &vs[1], &vs[0], &vs[2]); d.Hash == swapped {
		t.Error("hash does not depend on endpoint order")
	}
	if other := hashAPIEndpoints(key+"x", &vs[0], &vs[1], &vs[2]); d.Hash == other {
		t.Error("hash does not depend on the slice's ports")
	}
	one, two := AddressKey("10.0.0.1"), AddressKey("10.0.0.2")
	if one == two || !slices.Equal(d.AddressKeys, []uint64{one, two, one}) {
		t.Errorf("digest address keys %v, want %v", d.AddressKeys, []uint64{one, two, one})
	}
}

// TestEndpointFieldsKnown fails when client-go adds an Endpoint field: decide
// whether the hub carries it (hubEndpointInto, hashEndpoint, endpointEqual).
func TestEndpointFieldsKnown(t *testing.T) {
	for _, tc := range []struct {
		typ  reflect.Type
		want []string
	}{
		{reflect.TypeFor[discoveryv1.Endpoint](), []string{"Addresses", "Conditions", "Hostname", "TargetRef", "DeprecatedTopology", "NodeName", "Zone", "Hints"}},
		{reflect.TypeFor[discoveryv1.EndpointConditions](), []string{"Ready", "Serving", "Terminating"}},
		{reflect.TypeFor[discoveryv1.EndpointHints](), []string{"ForZones", "ForNodes"}},
		{reflect.TypeFor[corev1.EndpointAddress](), []string{"IP", "Hostname", "NodeName", "TargetRef"}},
		{reflect.TypeFor[corev1.EndpointPort](), []string{"Name", "Port", "Protocol", "AppProtocol"}},
		{reflect.TypeFor[corev1.EndpointSubset](), []string{"Addresses", "NotReadyAddresses", "Ports"}},
	} {
		var got []string
		for i := range tc.typ.NumField() {
			got = append(got, tc.typ.Field(i).Name)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s fields %v, want %v", tc.typ, got, tc.want)
		}
	}
}

// subsetEqual is the reference for hashSubsets.
func subsetEqual(a, b corev1.EndpointSubset) bool {
	return slices.EqualFunc(a.Addresses, b.Addresses, addressEqual) &&
		slices.EqualFunc(a.NotReadyAddresses, b.NotReadyAddresses, addressEqual) &&
		slices.EqualFunc(a.Ports, b.Ports, func(x, y corev1.EndpointPort) bool {
			return x.Name == y.Name && x.Port == y.Port &&
				protocolOrTCP(x.Protocol) == protocolOrTCP(y.Protocol) &&
				ptr.Equal(x.AppProtocol, y.AppProtocol)
		})
}

// addressEqual compares every field of an address.
func addressEqual(a, b corev1.EndpointAddress) bool {
	return a.IP == b.IP && a.Hostname == b.Hostname &&
		ptr.Equal(a.NodeName, b.NodeName) && ptr.Equal(a.TargetRef, b.TargetRef)
}

func TestHashSubsetsAgreesWithEquality(t *testing.T) {
	base := func() []corev1.EndpointSubset {
		return []corev1.EndpointSubset{{
			Addresses:         []corev1.EndpointAddress{{IP: "10.0.0.1", NodeName: ptr.To("n")}},
			NotReadyAddresses: []corev1.EndpointAddress{{IP: "10.0.0.2"}},
			Ports:             []corev1.EndpointPort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		}}
	}
	var vs [][]corev1.EndpointSubset
	add := func(f func([]corev1.EndpointSubset) []corev1.EndpointSubset) { vs = append(vs, f(base())) }
	add(func(s []corev1.EndpointSubset) []corev1.EndpointSubset { return s })
	add(func([]corev1.EndpointSubset) []corev1.EndpointSubset { return nil })
	add(func(s []corev1.EndpointSubset) []corev1.EndpointSubset { return append(s, corev1.EndpointSubset{}) })
	add(func(s []corev1.EndpointSubset) []corev1.EndpointSubset { s[0].Addresses[0].IP = "10.0.0.3"; return s })
	add(func(s []corev1.EndpointSubset) []corev1.EndpointSubset {
		s[0].Addresses, s[0].NotReadyAddresses = s[0].NotReadyAddresses, s[0].Addresses
		return s
	})
	add(func(s []corev1.EndpointSubset) []corev1.EndpointSubset { s[0].Addresses[0].Hostname = "h"; return s })
	add(func(s []corev1.EndpointSubset) []corev1.EndpointSubset { s[0].Addresses[0].NodeName = nil; return s })
	add(func(s []corev1.EndpointSubset) []corev1.EndpointSubset {
		s[0].Addresses[0].NodeName = ptr.To("")
		return s
	})
	add(func(s []corev1.EndpointSubset) []corev1.EndpointSubset {
		s[0].Addresses[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: "p"}
		return s
	})
	add(func(s []corev1.EndpointSubset) []corev1.EndpointSubset { s[0].Ports[0].Port = 81; return s })
	add(func(s []corev1.EndpointSubset) []corev1.EndpointSubset { s[0].Ports[0].Name = "web"; return s })
	add(func(s []corev1.EndpointSubset) []corev1.EndpointSubset {
		s[0].Ports[0].Protocol = corev1.ProtocolUDP
		return s
	})
	add(func(s []corev1.EndpointSubset) []corev1.EndpointSubset {
		s[0].Ports[0].AppProtocol = ptr.To("h2c")
		return s
	})
	// Equal to the base: an unset protocol is TCP.
	add(func(s []corev1.EndpointSubset) []corev1.EndpointSubset { s[0].Ports[0].Protocol = ""; return s })
	for i := range vs {
		for j := range vs {
			sameHash := hashSubsets(vs[i]) == hashSubsets(vs[j])
			if want := slices.EqualFunc(vs[i], vs[j], subsetEqual); sameHash != want {
				t.Errorf("variants %d and %d: equal hashes %v, equal subsets %v", i, j, sameHash, want)
			}
		}
	}
}

// BenchmarkDigestSlice is the hub informer's cost per slice event.
func BenchmarkDigestSlice(b *testing.B) {
	s := memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, readyEndpoints(0, 100)...)
	b.ReportAllocs()
	for b.Loop() {
		DigestSlice(s)
	}
}

// TestDigestDeepCopyIsExact matters to client-go's cache mutation detector,
// which compares cached objects with their deep copies.
func TestDigestDeepCopyIsExact(t *testing.T) {
	for _, s := range []*discoveryv1.EndpointSlice{
		memberSlice("full", discoveryv1.AddressTypeIPv4, httpPorts, readyEndpoints(0, 3)...),
		{AddressType: discoveryv1.AddressTypeIPv4},
		{AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{}},
	} {
		d := DigestSlice(s)
		if cp := d.DeepCopyObject(); !reflect.DeepEqual(cp, d) {
			t.Errorf("slice %q: deep copy %+v differs from %+v", s.Name, cp, d)
		}
	}
	e := DigestEndpoints(&corev1.Endpoints{})
	if cp := e.DeepCopyObject(); !reflect.DeepEqual(cp, e) {
		t.Errorf("Endpoints: deep copy %+v differs from %+v", cp, e)
	}
}

// A content annotation that is not one we write reads as no digest, so
// the hub cache reads the object in full.
func TestDigestFromMetaRefusesWhatWeDoNotWrite(t *testing.T) {
	src := testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, endpoint("10.0.0.1", true), endpoint("10.0.0.2", false)))
	plan := PlanSlices(src, Locality{}, nil)
	good := plan.Create[0].Annotations[AnnotationContent]
	if _, ok := SliceDigestFromMeta(plan.Create[0].ObjectMeta); !ok {
		t.Fatalf("our own annotation %q is unreadable", good)
	}
	parts := strings.Split(good, ";")
	with := func(i int, v string) string {
		p := slices.Clone(parts)
		p[i] = v
		return strings.Join(p, ";")
	}
	for _, value := range []string{"", "1", "2" + good[1:], with(1, "0"), with(1, "xyz"), with(2, "q"), with(3, "!!"), with(3, "AAA"),
		with(4, "IPv5"), with(4, "FQDN"), with(5, "0"), with(5, "g"), strings.Join(parts[:5], ";"), good + ";x"} {
		meta := *plan.Create[0].ObjectMeta.DeepCopy()
		meta.Annotations[AnnotationContent] = value
		if d, ok := SliceDigestFromMeta(meta); ok {
			t.Errorf("slice annotation %q read as %+v", value, d)
		}
	}
	for _, value := range []string{"", "1", "1;", "1;0", "1;xyz", "2;12ab"} {
		meta := metav1.ObjectMeta{Annotations: map[string]string{AnnotationContent: value}}
		if d, ok := EndpointsDigestFromMeta(meta); ok {
			t.Errorf("Endpoints annotation %q read as %+v", value, d)
		}
	}
}

// A full slice's content annotation stays well within the room the export
// budget leaves for our own annotations, whatever its ports.
func TestContentAnnotationOfAFullSliceIsSmall(t *testing.T) {
	var ports []discoveryv1.EndpointPort
	for i := range 100 {
		ports = append(ports, discoveryv1.EndpointPort{Name: ptr.To(fmt.Sprintf("port-%d", i)), Port: ptr.To(int32(1000 + i)),
			AppProtocol: ptr.To("example.com/" + strings.Repeat("p", 60))})
	}
	var eps []discoveryv1.Endpoint
	for i := range MaxEndpointsPerSlice {
		eps = append(eps, endpoint(fmt.Sprintf("fd00:1234:5678:9abc:def0:1234:5678:%x", i), i%2 == 0))
	}
	plan := PlanSlices(testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv6, ports, eps...)), Locality{}, nil)
	if len(plan.Create) != 1 {
		t.Fatalf("want one slice, got %s", describe(plan))
	}
	value := plan.Create[0].Annotations[AnnotationContent]
	if n := len(AnnotationContent) + len(value); n > ownAnnotationsRoom/3 {
		t.Errorf("the content annotation of a full slice takes %d bytes, over a third of the %d kept for our own", n, ownAnnotationsRoom)
	}
}
