package endpoints

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/addresses"
)

// referenceHubEndpoint is what the hub carries of a member endpoint, as
// the daemon wrote it before the caches held projections: Sanitize kept
// the first address, and the hub carried every field but TargetRef,
// DeprecatedTopology and, as the hub's hints are ours, Hints.
func referenceHubEndpoint(ep discoveryv1.Endpoint) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses: ep.Addresses[:1],
		Conditions: discoveryv1.EndpointConditions{
			Ready: ep.Conditions.Ready, Serving: ep.Conditions.Serving, Terminating: ep.Conditions.Terminating,
		},
		Hostname: ep.Hostname,
		NodeName: ep.NodeName,
		Zone:     ep.Zone,
	}
}

// richEndpoints returns valid member endpoints that differ in every field
// the hub carries: each combination of unset, true and false conditions,
// several addresses, names set, unset and empty where valid; and hints nil,
// empty and full, which the hub never carries.
func richEndpoints(addr func(i int) string) []discoveryv1.Endpoint {
	conds := []*bool{nil, ptr.To(true), ptr.To(false)}
	hints := []*discoveryv1.EndpointHints{
		nil,
		{},
		{ForZones: []discoveryv1.ForZone{}, ForNodes: []discoveryv1.ForNode{}},
		{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}, {Name: ""}}},
		{ForNodes: []discoveryv1.ForNode{{Name: "node-a"}, {Name: "node-b.example"}}},
		{ForZones: []discoveryv1.ForZone{{Name: "zone-b"}}, ForNodes: []discoveryv1.ForNode{{Name: "node-c"}}},
	}
	var out []discoveryv1.Endpoint
	i := 0
	for _, r := range conds {
		for _, s := range conds {
			for _, t := range conds {
				ep := discoveryv1.Endpoint{
					Addresses:  []string{addr(i)},
					Conditions: discoveryv1.EndpointConditions{Ready: r, Serving: s, Terminating: t},
					TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: fmt.Sprintf("pod-%d", i)},
				}
				if i%2 == 0 {
					ep.Addresses = append(ep.Addresses, addr(100+i)) // dual addresses: the first one counts
				}
				switch i % 3 {
				case 0:
					ep.Hostname = ptr.To(fmt.Sprintf("web-%d", i))
				case 1:
					ep.NodeName, ep.Zone = ptr.To("node-a"), ptr.To("")
				default:
					ep.NodeName, ep.Zone = ptr.To(fmt.Sprintf("node-%d", i%4)), ptr.To("zone-a")
					ep.DeprecatedTopology = map[string]string{"kubernetes.io/hostname": "node"}
				}
				ep.Hints = hints[i%len(hints)]
				out = append(out, ep)
				i++
			}
		}
	}
	return out
}

// wireEqual compares the bytes the hub's API server would get, in JSON and
// in protobuf.
func wireEqual(t *testing.T, got, want *discoveryv1.EndpointSlice) {
	t.Helper()
	gj, err1 := json.Marshal(got)
	wj, err2 := json.Marshal(want)
	gp, err3 := got.Marshal()
	wp, err4 := want.Marshal()
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(gj, wj) {
		t.Errorf("JSON differs:\n got %s\nwant %s", gj, wj)
	}
	if !bytes.Equal(gp, wp) {
		t.Error("protobuf differs")
	}
}

// TestProjectionRoundTripWritesWhatTheObjectsDid checks that a member slice
// taken through its projection, Sanitize and PlanSlices gives the hub the
// bytes the daemon wrote when it planned from the objects themselves.
func TestProjectionRoundTripWritesWhatTheObjectsDid(t *testing.T) {
	v4 := richEndpoints(func(i int) string { return fmt.Sprintf("10.0.0.%d", i+1) })
	v6 := richEndpoints(func(i int) string { return fmt.Sprintf("fd00::%x", i+1) })
	ports := []discoveryv1.EndpointPort{
		{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP), AppProtocol: ptr.To("http")},
		{Name: ptr.To("dns"), Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolUDP)},
	}
	members := []*discoveryv1.EndpointSlice{
		memberSlice("web-v4", discoveryv1.AddressTypeIPv4, ports, v4...),
		memberSlice("web-v6", discoveryv1.AddressTypeIPv6, ports, v6...),
	}
	src, refused := Sanitize(testSource(members...), nil)
	if refused.Total() != 0 {
		t.Fatalf("refused %s", refused)
	}
	plan := PlanSlices(src, Locality{}, nil)
	if len(plan.Create) != 2 {
		t.Fatalf("want two slices, got %s", describe(plan))
	}
	for i, member := range members {
		want := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: SliceName(testNamespace, testService, testCluster, i), Namespace: testNamespace, Labels: SliceLabels(testNamespace, testService, testCluster)},
			AddressType: member.AddressType,
			Ports:       sortedPorts(member.Ports),
		}
		for _, ep := range member.Endpoints {
			want.Endpoints = append(want.Endpoints, referenceHubEndpoint(ep))
		}
		slices.SortFunc(want.Endpoints, func(a, b discoveryv1.Endpoint) int { return strings.Compare(a.Addresses[0], b.Addresses[0]) })
		setSliceContent(want)
		wireEqual(t, plan.Create[i], want)
		// The hub cache's digest of what was written matches the hash of
		// the desired endpoints: in sync, nothing to write.
		if again := PlanSlices(src, Locality{}, digests(plan.Create)); !again.Empty() {
			t.Errorf("not in sync with its own writes: %s", describe(again))
		}
	}

	// The per-cluster Endpoints carry the first address, hostname, node
	// name and readiness of each endpoint.
	eps := PerClusterEndpoints(src)
	var got, want []string
	for _, ss := range eps.Subsets {
		for _, list := range []struct {
			ready bool
			as    []corev1.EndpointAddress
		}{{true, ss.Addresses}, {false, ss.NotReadyAddresses}} {
			for _, a := range list.as {
				got = append(got, fmt.Sprintf("%s %q %v %v", a.IP, a.Hostname, ptr.Deref(a.NodeName, "<nil>"), list.ready))
			}
		}
	}
	for _, m := range members {
		for _, ep := range m.Endpoints {
			ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
			want = append(want, fmt.Sprintf("%s %q %v %v", ep.Addresses[0], ptr.Deref(ep.Hostname, ""), ptr.Deref(ep.NodeName, "<nil>"), ready))
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("per-cluster addresses\n got %q\nwant %q", got, want)
	}
}

// The hash of a desired endpoint, computed from the projection, is the
// hash of the endpoint written for it, hinted or not, and of the member's
// own endpoint without its hints.
func TestHashOfProjectionAgreesWithWrittenEndpoint(t *testing.T) {
	variants := append(endpointVariants(), richEndpoints(func(i int) string { return fmt.Sprintf("10.1.0.%d", i+1) })...)
	for i, ep := range variants {
		if checkEndpoint(discoveryv1.AddressTypeIPv4, &ep) != "" {
			continue
		}
		m := projectEndpoint(&ep)
		addr := m.Addr()
		var written discoveryv1.Endpoint
		hubEndpointInto(addr, &m, Hints{OwnZone: true}, &written)
		if got, want := written.Hints != nil, ptr.Deref(ep.Zone, "") != ""; got != want {
			t.Errorf("variant %d: hinted %v, want %v for zone %v", i, got, want, ep.Zone)
		}
		if h := hashEndpoints("g", []desiredEndpoint{{addr, &m}}, Hints{OwnZone: true}); h != hashAPIEndpoints("g", &written) {
			t.Errorf("variant %d: hinted projection hash differs from the written endpoint's %+v", i, written)
		}
		hubEndpointInto(addr, &m, Hints{}, &written)
		h := hashEndpoints("g", []desiredEndpoint{{addr, &m}}, Hints{})
		if h != hashAPIEndpoints("g", &written) {
			t.Errorf("variant %d: projection hash differs from the written endpoint's %+v", i, written)
		}
		ref := referenceHubEndpoint(ep)
		if h != hashAPIEndpoints("g", &ref) {
			t.Errorf("variant %d: projection hash differs from the member endpoint's %+v", i, ep)
		}
	}
}

// An address that is no IP of the slice's type is kept in the projection
// as an Invalid endpoint and refused by Sanitize, counted and sampled in
// the member's order among the addresses the policy refuses.
func TestUnparsableAddressIsRefusedAndCounted(t *testing.T) {
	sl := addressSlice("svc-bad", discoveryv1.AddressTypeIPv4,
		"127.0.0.1", "not-an-ip", "10.0.0.1", "", "10.0.0.300", "fd00::1", "010.0.0.2", "10.0.0.2")
	sl.Endpoints[3].Addresses = nil
	m := ProjectSlice(sl)
	if len(m.Endpoints) != 3 || len(m.Invalid) != 5 {
		t.Fatalf("projection holds %d endpoints and %d invalid ones, want 3 and 5: %+v", len(m.Endpoints), len(m.Invalid), m.Invalid)
	}
	if m.Invalid[0] != (InvalidEndpoint{Index: 1, Address: "not-an-ip", Detail: "not an IP address in canonical form"}) {
		t.Errorf("first invalid endpoint %+v", m.Invalid[0])
	}
	out, refused := Sanitize(Source{Slices: []*MemberSlice{m}}, nil)
	if refused.Counts[addresses.Invalid] != 5 || refused.Counts[addresses.Special] != 1 || refused.Total() != 6 {
		t.Errorf("refused %v, want 5 invalid and 1 special", refused.Counts)
	}
	var samples []string
	for _, s := range refused.Samples {
		samples = append(samples, s.Address+" ("+s.Verdict.Detail+")")
	}
	want := []string{
		"127.0.0.1 (loopback)", "not-an-ip (not an IP address in canonical form)", " (no address)",
		"10.0.0.300 (not an IP address in canonical form)", "fd00::1 (not an address of the slice's type IPv4)",
	}
	if !slices.Equal(samples, want) {
		t.Errorf("samples\n got %q\nwant %q", samples, want)
	}
	if got := memberAddresses(out.Slices); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Errorf("kept %v", got)
	}
	if s := refused.String(); !strings.Contains(s, "5 invalid") || !strings.Contains(s, "1 more") {
		t.Errorf("summary %q", s)
	}

	// A slice with an invalid port is refused whole, its invalid endpoints
	// counted too, with its first endpoint as the sample.
	sl.Ports[0].Port = ptr.To[int32](0)
	_, refused = Sanitize(Source{Slices: project(sl)}, nil)
	if refused.Total() != 8 || refused.Samples[0].Address != "127.0.0.1" {
		t.Errorf("invalid port: refused %v, samples %+v", refused.Counts, refused.Samples)
	}
	sl.Endpoints[0].Addresses = []string{"bad"}
	if _, refused = Sanitize(Source{Slices: project(sl)}, nil); refused.Samples[0].Address != "bad" {
		t.Errorf("invalid port: samples %+v, want the first endpoint's address as sent", refused.Samples)
	}
}

// Invalid names go to Invalid too, so that the caches never intern them.
func TestProjectionRefusesInvalidNames(t *testing.T) {
	bad := []struct {
		detail string
		change func(*discoveryv1.Endpoint)
	}{
		{"invalid hostname", func(ep *discoveryv1.Endpoint) { ep.Hostname = ptr.To("") }},
		{"invalid node name", func(ep *discoveryv1.Endpoint) { ep.NodeName = ptr.To("Node_A") }},
		{"invalid zone", func(ep *discoveryv1.Endpoint) { ep.Zone = ptr.To("zone a") }},
	}
	for _, tc := range bad {
		ep := endpoint("10.0.0.1", true)
		tc.change(&ep)
		m := ProjectSlice(memberSlice("s", discoveryv1.AddressTypeIPv4, httpPorts, ep))
		if len(m.Endpoints) != 0 || len(m.Invalid) != 1 || m.Invalid[0].Detail != tc.detail {
			t.Errorf("%s: projection %+v", tc.detail, m)
		}
	}
}

// A member's hints describe its own nodes: they never reach the hub, and
// hints the API would refuse (invalid names, more than 8, one named twice)
// refuse nothing.
func TestMemberHintsNeverReachTheHub(t *testing.T) {
	names := func(n int) []discoveryv1.ForZone {
		var out []discoveryv1.ForZone
		for i := range n {
			out = append(out, discoveryv1.ForZone{Name: fmt.Sprintf("z%d", i)})
		}
		return out
	}
	for _, hints := range []*discoveryv1.EndpointHints{
		{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}},
		{ForNodes: []discoveryv1.ForNode{{Name: "node-a"}}},
		{ForZones: names(9)},
		{ForZones: []discoveryv1.ForZone{{Name: "a"}, {Name: "a"}}},
		{ForZones: []discoveryv1.ForZone{{Name: "a,b"}}, ForNodes: []discoveryv1.ForNode{{Name: "a;b"}}},
	} {
		hinted := endpoint("10.0.0.1", true)
		hinted.Zone, hinted.Hints = ptr.To("zone-a"), hints
		src, refused := Sanitize(testSource(memberSlice("s", discoveryv1.AddressTypeIPv4, httpPorts, hinted, endpoint("10.0.0.2", true))), nil)
		if refused.Total() != 0 {
			t.Errorf("hints %+v: refused %s; want both endpoints kept", hints, refused)
		}
		plan := PlanSlices(src, Locality{}, nil)
		n := 0
		for _, es := range plan.Create {
			for _, ep := range es.Endpoints {
				n++
				if ep.Hints != nil {
					t.Errorf("hints %+v: hub endpoint %v carries hints %+v", hints, ep.Addresses, ep.Hints)
				}
				if ep.Addresses[0] == "10.0.0.1" && ptr.Deref(ep.Zone, "") != "zone-a" {
					t.Errorf("hints %+v: hub endpoint %v lost its zone", hints, ep.Addresses)
				}
			}
		}
		if n != 2 {
			t.Errorf("hints %+v: %d hub endpoints, want 2", hints, n)
		}
	}
}

// The projection keeps what the sync reads of a slice and shares nothing
// with it.
func TestProjectSliceKeepsWhatTheSyncReads(t *testing.T) {
	changed := time.Date(2026, 7, 1, 12, 0, 0, 123456789, time.UTC)
	sl := memberSlice("web-a", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{slicePort("http", 80)}, endpoint("10.0.0.1", false))
	sl.ResourceVersion, sl.UID = "42", "uid"
	sl.Labels["team"] = "x"
	sl.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: changed.Format(time.RFC3339Nano), "other": "y"}
	m := ProjectSlice(sl)
	want := metav1.ObjectMeta{Name: "web-a", Namespace: testNamespace, ResourceVersion: "42",
		Labels: map[string]string{discoveryv1.LabelServiceName: testService}}
	if !reflect.DeepEqual(m.ObjectMeta, want) || !m.LastChange.Equal(changed) || m.AddressType != discoveryv1.AddressTypeIPv4 {
		t.Errorf("projection %+v %v", m.ObjectMeta, m.LastChange)
	}
	before := m.DeepCopyObject()
	if !reflect.DeepEqual(before, m) {
		t.Error("DeepCopyObject is not exact")
	}
	// Scribble over the object: the projection does not change.
	sl.Labels[discoveryv1.LabelServiceName] = "scribble"
	*sl.Ports[0].Name = "scribble"
	*sl.Endpoints[0].NodeName = "scribble"
	sl.Endpoints[0].Addresses[0] = "10.9.9.9"
	*sl.Endpoints[0].Conditions.Ready = true
	if !reflect.DeepEqual(before, m) {
		t.Error("the projection shares memory with the object")
	}

	// An FQDN slice keeps its metadata and change time, no endpoints.
	fq := memberSlice("web-f", discoveryv1.AddressTypeFQDN, httpPorts, discoveryv1.Endpoint{Addresses: []string{"example.com"}})
	fq.Annotations = sl.Annotations
	if m := ProjectSlice(fq); m.Endpoints != nil || m.Invalid != nil || m.Ports != nil || !m.LastChange.Equal(changed) || m.Name != "web-f" {
		t.Errorf("FQDN projection %+v", m)
	}
	// A change time that does not parse reads as none.
	sl.Annotations[corev1.EndpointsLastChangeTriggerTime] = "yesterday"
	if m := ProjectSlice(sl); !m.LastChange.IsZero() {
		t.Errorf("LastChange %v, want zero", m.LastChange)
	}
}

// MarkNotReady sets ready to false and leaves the rest, and the source.
func TestMarkNotReadyOnProjections(t *testing.T) {
	eps := richEndpoints(func(i int) string { return fmt.Sprintf("10.0.0.%d", i+1) })
	src := testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, eps...))
	before := copyMember(src.Slices)
	out := MarkNotReady(src)
	if !reflect.DeepEqual(before, src.Slices) {
		t.Fatal("MarkNotReady modified its source")
	}
	for i, ep := range out.Slices[0].Endpoints {
		orig := &src.Slices[0].Endpoints[i]
		if r := ep.Ready(); r == nil || *r {
			t.Errorf("endpoint %d: ready %v", i, r)
		}
		if !reflect.DeepEqual(ep.Serving(), orig.Serving()) || !reflect.DeepEqual(ep.Terminating(), orig.Terminating()) ||
			ep.addr != orig.addr || ep.attrs.Value().topology != orig.attrs.Value().topology || ep.hostname != orig.hostname {
			t.Errorf("endpoint %d changed beyond ready", i)
		}
	}
}

// TestProjectedAddressIsTheMembers checks that the 16-byte form gives back
// each address as the member wrote it, the family included, and that the
// projection stays at 32 bytes an endpoint.
func TestProjectedAddressIsTheMembers(t *testing.T) {
	for _, c := range []struct {
		at    discoveryv1.AddressType
		addrs []string
	}{
		{discoveryv1.AddressTypeIPv4, []string{"10.0.0.1", "0.0.0.1", "255.255.255.255"}},
		{discoveryv1.AddressTypeIPv6, []string{"fd00::1", "::ffff:10.0.0.1", "::a00:1", "2001:db8::ffff:0:1"}},
	} {
		var eps []discoveryv1.Endpoint
		for _, a := range c.addrs {
			eps = append(eps, discoveryv1.Endpoint{Addresses: []string{a}})
		}
		ms := ProjectSlice(memberSlice("web", c.at, httpPorts, eps...))
		if len(ms.Invalid) != 0 {
			t.Fatalf("%s: refused %+v", c.at, ms.Invalid)
		}
		for i, ep := range ms.Endpoints {
			if got := ep.Addr(); got.String() != c.addrs[i] || got.Is4() != (c.at == discoveryv1.AddressTypeIPv4) {
				t.Errorf("%s: got %v (Is4 %v), want %s", c.at, got, got.Is4(), c.addrs[i])
			}
		}
	}
	if n := unsafe.Sizeof(MemberEndpoint{}); n != 32 {
		t.Errorf("MemberEndpoint is %d bytes, want 32", n)
	}
}
