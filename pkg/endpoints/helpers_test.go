package endpoints

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const (
	testNamespace = "shop"
	testService   = "web"
	testCluster   = "east"
)

func testSvc(ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testService},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: "10.96.0.10",
			Ports:     ports,
		},
	}
}

func svcPort(name string, port int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, Protocol: corev1.ProtocolTCP}
}

func slicePort(name string, port int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr.To(name), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}
}

// memberSlice returns a member EndpointSlice.
func memberSlice(name string, at discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNamespace,
			Name:      name,
			Labels:    map[string]string{discoveryv1.LabelServiceName: testService},
		},
		AddressType: at,
		Ports:       ports,
		Endpoints:   eps,
	}
}

func endpoint(addr string, ready bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{addr},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)},
		NodeName:   ptr.To("node-1"),
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: testNamespace, Name: "pod-" + addr},
	}
}

// ipv4 returns the i-th test IPv4 address.
func ipv4(i int) string { return fmt.Sprintf("10.0.%d.%d", i/250, i%250+1) }

// readyEndpoints returns n ready endpoints with addresses ipv4(from...).
func readyEndpoints(from, n int) []discoveryv1.Endpoint {
	eps := make([]discoveryv1.Endpoint, n)
	for i := range eps {
		eps[i] = endpoint(ipv4(from+i), true)
	}
	return eps
}

func testSource(sl ...*discoveryv1.EndpointSlice) Source {
	return Source{Cluster: testCluster, Service: testSvc(svcPort("http", 80)), Slices: project(sl...)}
}

// project returns the projections of list, as the member caches hold them.
func project(list ...*discoveryv1.EndpointSlice) []*MemberSlice {
	out := make([]*MemberSlice, len(list))
	for i, s := range list {
		out[i] = ProjectSlice(s)
	}
	return out
}

// memberAddresses returns the addresses of all endpoints of projections,
// sorted.
func memberAddresses(list []*MemberSlice) []string {
	var out []string
	for _, s := range list {
		for _, ep := range s.Endpoints {
			out = append(out, ep.Addr().String())
		}
	}
	slices.Sort(out)
	return out
}

// copyMember returns a deep copy of projections, to check they were not
// modified (see reflect.DeepEqual).
func copyMember(list []*MemberSlice) []*MemberSlice {
	out := make([]*MemberSlice, len(list))
	for i, s := range list {
		out[i] = s.DeepCopyObject().(*MemberSlice)
	}
	return out
}

// apply simulates the API server applying plan to the slices in state, and
// returns the new state sorted by name.
func apply(t testing.TB, state []*discoveryv1.EndpointSlice, plan SlicePlan) []*discoveryv1.EndpointSlice {
	t.Helper()
	byName := make(map[string]*discoveryv1.EndpointSlice)
	for _, s := range state {
		byName[s.Name] = s
	}
	for _, s := range plan.Create {
		if byName[s.Name] != nil {
			t.Fatalf("create of existing slice %s", s.Name)
		}
		c := s.DeepCopy()
		c.ResourceVersion = "1"
		byName[s.Name] = c
	}
	for _, s := range plan.Update {
		if byName[s.Name] == nil {
			t.Fatalf("update of missing slice %s", s.Name)
		}
		if byName[s.Name].AddressType != s.AddressType {
			t.Fatalf("update of slice %s changes immutable addressType", s.Name)
		}
		byName[s.Name] = s.DeepCopy()
	}
	for _, s := range plan.Delete {
		if byName[s.Name] == nil {
			t.Fatalf("delete of missing slice %s", s.Name)
		}
		delete(byName, s.Name)
	}
	out := make([]*discoveryv1.EndpointSlice, 0, len(byName))
	for _, s := range byName {
		out = append(out, s)
	}
	sortByName(out)
	return out
}

// syncState plans src against state, applies the plan and returns the new state.
func syncState(t testing.TB, src Source, state []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	t.Helper()
	return apply(t, state, PlanSlices(src, Locality{}, digests(state)))
}

func names(list []*discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range list {
		out = append(out, s.Name)
	}
	return out
}

func sizes(list []*discoveryv1.EndpointSlice) []int {
	var out []int
	for _, s := range list {
		out = append(out, len(s.Endpoints))
	}
	return out
}

// firstAddresses returns the first addresses of all endpoints in list, sorted.
func firstAddresses(list []*discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range list {
		for _, ep := range s.Endpoints {
			out = append(out, ep.Addresses[0])
		}
	}
	slices.Sort(out)
	return out
}

func sliceNames(indices ...int) []string {
	var out []string
	for _, i := range indices {
		out = append(out, SliceName(testNamespace, testService, testCluster, i))
	}
	return out
}

func describe(p SlicePlan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "create %v %v, update %v %v, delete %v", names(p.Create), sizes(p.Create), names(p.Update), sizes(p.Update), names(p.Delete))
	return b.String()
}

// digests returns the digests of list, as the hub cache holds them.
func digests(list []*discoveryv1.EndpointSlice) []*SliceDigest {
	out := make([]*SliceDigest, len(list))
	for i, s := range list {
		out[i] = metaDigest(s)
	}
	return out
}

// metaDigest is the digest the hub cache takes of s: from its metadata
// (SliceDigestFromMeta) when s has its content annotated, which must agree
// with the digest of its content; else from its content, as the cache does
// after reading it in full.
func metaDigest(s *discoveryv1.EndpointSlice) *SliceDigest {
	fromContent := DigestSlice(s.DeepCopy())
	if _, ok := s.Annotations[AnnotationContent]; !ok {
		return fromContent
	}
	d, ok := SliceDigestFromMeta(*s.ObjectMeta.DeepCopy())
	if !ok {
		panic(fmt.Sprintf("slice %s: unreadable digest in its metadata: %q", s.Name, s.Annotations[AnnotationContent]))
	}
	d.TypeMeta = fromContent.TypeMeta
	if !reflect.DeepEqual(d, fromContent) {
		panic(fmt.Sprintf("slice %s: digest from metadata\n%+v\nfrom content\n%+v", s.Name, d, fromContent))
	}
	return d
}
