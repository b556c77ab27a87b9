package endpoints

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unique"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

var httpPorts = []discoveryv1.EndpointPort{slicePort("http", 8080)}

func TestPlanSlicesSizing(t *testing.T) {
	tests := []struct {
		endpoints int
		sizes     []int
	}{
		{endpoints: 0, sizes: []int{0}}, // the placeholder
		{endpoints: 1, sizes: []int{1}},
		{endpoints: 100, sizes: []int{100}},
		{endpoints: 101, sizes: []int{100, 1}},
		{endpoints: 250, sizes: []int{100, 100, 50}},
	}
	for _, tt := range tests {
		src := testSource(memberSlice("web-abc", discoveryv1.AddressTypeIPv4, httpPorts, readyEndpoints(0, tt.endpoints)...))
		plan := PlanSlices(src, Locality{}, nil)
		if len(plan.Update) != 0 || len(plan.Delete) != 0 {
			t.Errorf("%d endpoints: want only creates, got %s", tt.endpoints, describe(plan))
		}
		if got := sizes(plan.Create); !slices.Equal(got, tt.sizes) {
			t.Errorf("%d endpoints: slice sizes %v, want %v", tt.endpoints, got, tt.sizes)
		}
		if got, want := names(plan.Create), sliceNames(0, 1, 2)[:len(tt.sizes)]; !slices.Equal(got, want) {
			t.Errorf("%d endpoints: names %v, want %v", tt.endpoints, got, want)
		}
		if got := firstAddresses(plan.Create); len(got) != tt.endpoints || len(slices.Compact(got)) != tt.endpoints {
			t.Errorf("%d endpoints: got %d distinct addresses", tt.endpoints, len(got))
		}
		for _, s := range plan.Create {
			if !reflect.DeepEqual(s.Labels, SliceLabels(testNamespace, testService, testCluster)) {
				t.Errorf("labels %v", s.Labels)
			}
			if s.Namespace != testNamespace || s.AddressType != discoveryv1.AddressTypeIPv4 {
				t.Errorf("slice %s: namespace %q addressType %q", s.Name, s.Namespace, s.AddressType)
			}
			if !slices.IsSortedFunc(s.Endpoints, func(a, b discoveryv1.Endpoint) int { return strings.Compare(a.Addresses[0], b.Addresses[0]) }) {
				t.Errorf("slice %s: endpoints not sorted", s.Name)
			}
		}
	}
}

func TestSliceLabels(t *testing.T) {
	want := map[string]string{
		"kubernetes.io/service-name":                DerivedServiceName(testNamespace, testService),
		"endpointslice.kubernetes.io/managed-by":    "endpoint-aggregator.io",
		"multicluster.kubernetes.io/service-name":   "web",
		"multicluster.kubernetes.io/source-cluster": "east",
		"app.kubernetes.io/managed-by":              "endpoint-aggregator",
	}
	if got := SliceLabels(testNamespace, testService, testCluster); !reflect.DeepEqual(got, want) {
		t.Errorf("SliceLabels() = %v, want %v", got, want)
	}
}

func TestPlanSlicesAddressTypes(t *testing.T) {
	src := testSource(
		memberSlice("web-v4", discoveryv1.AddressTypeIPv4, httpPorts, endpoint("10.0.0.1", true)),
		memberSlice("web-v6", discoveryv1.AddressTypeIPv6, httpPorts, endpoint("fd00::1", true), endpoint("fd00::2", false)),
		memberSlice("web-fqdn", discoveryv1.AddressTypeFQDN, httpPorts, endpoint("db.example.com", true)),
	)
	plan := PlanSlices(src, Locality{}, nil)
	if len(plan.Create) != 2 {
		t.Fatalf("want 2 creates, got %s", describe(plan))
	}
	got := map[discoveryv1.AddressType][]string{}
	for _, s := range plan.Create {
		got[s.AddressType] = append(got[s.AddressType], firstAddresses([]*discoveryv1.EndpointSlice{s})...)
	}
	want := map[discoveryv1.AddressType][]string{
		discoveryv1.AddressTypeIPv4: {"10.0.0.1"},
		discoveryv1.AddressTypeIPv6: {"fd00::1", "fd00::2"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("addresses by type = %v, want %v", got, want)
	}
}

func TestPlanSlicesEndpointFields(t *testing.T) {
	member := discoveryv1.Endpoint{
		Addresses: []string{"10.0.0.1"},
		Conditions: discoveryv1.EndpointConditions{
			Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true),
		},
		Hostname:           ptr.To("web-0"),
		NodeName:           ptr.To("node-a"),
		Zone:               ptr.To("zone-a"),
		Hints:              &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}, ForNodes: []discoveryv1.ForNode{{Name: "node-a"}}},
		TargetRef:          &corev1.ObjectReference{Kind: "Pod", Name: "web-0"},
		DeprecatedTopology: map[string]string{"kubernetes.io/hostname": "node-a"},
	}
	plan := PlanSlices(testSource(memberSlice("web-abc", discoveryv1.AddressTypeIPv4, httpPorts, member)), Locality{}, nil)
	if len(plan.Create) != 1 || len(plan.Create[0].Endpoints) != 1 {
		t.Fatalf("want one slice with one endpoint, got %s", describe(plan))
	}
	want := *member.DeepCopy()
	want.TargetRef, want.DeprecatedTopology, want.Hints = nil, nil, nil // the hub's hints are ours
	if got := plan.Create[0].Endpoints[0]; !apiequality.Semantic.DeepEqual(got, want) {
		t.Errorf("endpoint = %+v, want %+v", got, want)
	}
}

func TestPlanSlicesPorts(t *testing.T) {
	unnamed := []discoveryv1.EndpointPort{{Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}}
	emptyName := []discoveryv1.EndpointPort{{Name: ptr.To(""), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}}
	named := []discoveryv1.EndpointPort{
		{Name: ptr.To("metrics"), Port: ptr.To[int32](9090), Protocol: ptr.To(corev1.ProtocolTCP)},
		{Name: ptr.To("dns-udp"), Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolUDP), AppProtocol: ptr.To("dns")},
	}
	tests := []struct {
		name  string
		ports []discoveryv1.EndpointPort
	}{
		{"unnamed", unnamed},
		{"empty name", emptyName},
		{"named", named},
		{"no ports", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := PlanSlices(testSource(memberSlice("web-abc", discoveryv1.AddressTypeIPv4, tt.ports, endpoint("10.0.0.1", true))), Locality{}, nil)
			if len(plan.Create) != 1 {
				t.Fatalf("want 1 create, got %s", describe(plan))
			}
			want := slices.Clone(tt.ports)
			slices.SortFunc(want, comparePorts)
			if got := plan.Create[0].Ports; !apiequality.Semantic.DeepEqual(got, want) {
				t.Errorf("ports = %v, want %v", got, want)
			}
		})
	}

	// Different port sets never share a slice.
	src := testSource(
		memberSlice("web-a", discoveryv1.AddressTypeIPv4, named, endpoint("10.0.0.1", true)),
		memberSlice("web-b", discoveryv1.AddressTypeIPv4, unnamed, endpoint("10.0.0.2", true)),
	)
	if plan := PlanSlices(src, Locality{}, nil); !slices.Equal(sizes(plan.Create), []int{1, 1}) {
		t.Errorf("two port sets: got %s", describe(plan))
	}
}

func TestPlanSlicesDuplicates(t *testing.T) {
	// A member mid-rollout: the same address in two slices of the same ports.
	src := testSource(
		memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, endpoint("10.0.0.1", false), endpoint("10.0.0.2", true)),
		memberSlice("web-b", discoveryv1.AddressTypeIPv4, httpPorts, endpoint("10.0.0.1", true)),
	)
	plan := PlanSlices(src, Locality{}, nil)
	if len(plan.Create) != 1 || len(plan.Create[0].Endpoints) != 2 {
		t.Fatalf("want one slice of 2 endpoints, got %s", describe(plan))
	}
	if ep := plan.Create[0].Endpoints[0]; ep.Addresses[0] != "10.0.0.1" || !*ep.Conditions.Ready {
		t.Errorf("duplicate address resolved to %+v, want the ready endpoint", ep)
	}
}

func TestPlanSlicesInSync(t *testing.T) {
	src := testSource(
		memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, readyEndpoints(0, 150)...),
		memberSlice("web-b", discoveryv1.AddressTypeIPv4, httpPorts, readyEndpoints(150, 100)...),
		memberSlice("web-c", discoveryv1.AddressTypeIPv6, httpPorts, endpoint("fd00::1", true)),
	)
	state := syncState(t, src, nil)
	if plan := PlanSlices(src, Locality{}, digests(state)); !plan.Empty() {
		t.Errorf("in-sync set: got %s", describe(plan))
	}

	// What the API server returns: defaulted protocols, another endpoint
	// order, server-set metadata and labels of others.
	for _, s := range state {
		for i := range s.Ports {
			s.Ports[i].Protocol = nil
		}
		slices.Reverse(s.Endpoints)
		s.UID, s.Generation = types.UID("uid-"+s.Name), 3
		s.Labels["team"] = "payments"
	}
	// Read in full: the content no longer is what the annotation describes.
	var readBack []*SliceDigest
	for _, s := range state {
		readBack = append(readBack, DigestSlice(s))
	}
	if plan := PlanSlices(src, Locality{}, readBack); !plan.Empty() {
		t.Errorf("in-sync set as read back: got %s", describe(plan))
	}
}

func TestPlanSlicesOneEndpointChanged(t *testing.T) {
	eps := readyEndpoints(0, 250)
	src := testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, eps...))
	state := syncState(t, src, nil)

	eps = slices.Clone(eps)
	eps[120] = endpoint(eps[120].Addresses[0], false)
	src = testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, eps...))
	plan := PlanSlices(src, Locality{}, digests(state))
	if len(plan.Create) != 0 || len(plan.Delete) != 0 || len(plan.Update) != 1 {
		t.Fatalf("want exactly one update, got %s", describe(plan))
	}
	u := plan.Update[0]
	var old *discoveryv1.EndpointSlice
	for _, s := range state {
		if s.Name == u.Name {
			old = s
		}
	}
	if u.ResourceVersion != old.ResourceVersion || len(u.Endpoints) != len(old.Endpoints) {
		t.Errorf("update %s: resourceVersion %q (want %q), %d endpoints (want %d)", u.Name, u.ResourceVersion, old.ResourceVersion, len(u.Endpoints), len(old.Endpoints))
	}
	for _, ep := range u.Endpoints {
		if ep.Addresses[0] == ipv4(120) && *ep.Conditions.Ready {
			t.Errorf("update does not carry the change")
		}
	}
	if state = apply(t, state, plan); !PlanSlices(src, Locality{}, digests(state)).Empty() {
		t.Errorf("not in sync after applying the plan")
	}
}

func TestPlanSlicesEndpointsRemoved(t *testing.T) {
	src := testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, readyEndpoints(0, 250)...))
	state := syncState(t, src, nil) // slices of 100, 100, 50

	// Remove every endpoint of the last slice and one of the first.
	gone := map[string]bool{state[0].Endpoints[0].Addresses[0]: true}
	for _, ep := range state[2].Endpoints {
		gone[ep.Addresses[0]] = true
	}
	var kept []discoveryv1.Endpoint
	for _, ep := range readyEndpoints(0, 250) {
		if !gone[ep.Addresses[0]] {
			kept = append(kept, ep)
		}
	}
	src = testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, kept...))
	plan := PlanSlices(src, Locality{}, digests(state))
	if !slices.Equal(names(plan.Delete), names(state[2:])) || !slices.Equal(names(plan.Update), names(state[:1])) || len(plan.Create) != 0 {
		t.Errorf("got %s, want update of %s and delete of %s", describe(plan), state[0].Name, state[2].Name)
	}

	// Everything removed: the first slice becomes the empty placeholder
	// and the others go.
	plan = PlanSlices(testSource(), Locality{}, digests(state))
	if !slices.Equal(names(plan.Delete), names(state[1:])) || !slices.Equal(names(plan.Update), names(state[:1])) ||
		len(plan.Create) != 0 || len(plan.Update[0].Endpoints)+len(plan.Update[0].Ports) != 0 {
		t.Errorf("empty source: got %s, want %s emptied and the others deleted", describe(plan), state[0].Name)
	}
	// The placeholder is in sync once written.
	if again := PlanSlices(testSource(), Locality{}, digests(apply(t, state, plan))); !again.Empty() {
		t.Errorf("placeholder not in sync: %s", describe(again))
	}
}

func TestPlanSlicesFillsBeforeCreating(t *testing.T) {
	src := testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, readyEndpoints(0, 250)...))
	state := syncState(t, src, nil) // 100, 100, 50

	// New endpoints go into the fullest slice with room for all of them.
	src = testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, readyEndpoints(0, 260)...))
	plan := PlanSlices(src, Locality{}, digests(state))
	if len(plan.Create) != 0 || len(plan.Delete) != 0 || !slices.Equal(names(plan.Update), names(state[2:])) || len(plan.Update[0].Endpoints) != 60 {
		t.Errorf("got %s, want one update of %s to 60 endpoints", describe(plan), state[2].Name)
	}

	// Endpoints replacing removed ones go into the slice being updated.
	eps := readyEndpoints(0, 250)
	eps[0] = endpoint("10.9.9.9", true) // was in the first slice
	src = testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, eps...))
	plan = PlanSlices(src, Locality{}, digests(state))
	if len(plan.Create) != 0 || len(plan.Delete) != 0 || !slices.Equal(names(plan.Update), names(state[:1])) {
		t.Errorf("got %s, want only an update of %s", describe(plan), state[0].Name)
	}
}

func TestPlanSlicesCreateDeletePairing(t *testing.T) {
	src := testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, readyEndpoints(0, 10)...))
	state := syncState(t, src, nil)

	// The member's target port changed: a new group replaces the old one.
	newPorts := []discoveryv1.EndpointPort{slicePort("http", 8081)}
	src = testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, newPorts, readyEndpoints(0, 10)...))
	plan := PlanSlices(src, Locality{}, digests(state))
	if len(plan.Create) != 0 || len(plan.Delete) != 0 || !slices.Equal(names(plan.Update), names(state)) {
		t.Fatalf("got %s, want the deleted slice reused", describe(plan))
	}
	if u := plan.Update[0]; *u.Ports[0].Port != 8081 || len(u.Endpoints) != 10 || u.ResourceVersion != state[0].ResourceVersion {
		t.Errorf("reused slice: ports %v, %d endpoints, resourceVersion %q", u.Ports, len(u.Endpoints), u.ResourceVersion)
	}

	// AddressType is immutable: an IPv6 slice is not reused for IPv4.
	v6 := testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv6, httpPorts, endpoint("fd00::1", true)))
	state = syncState(t, v6, nil)
	plan = PlanSlices(src, Locality{}, digests(state))
	if len(plan.Create) != 1 || len(plan.Update) != 0 || len(plan.Delete) != 1 {
		t.Fatalf("got %s, want a create and a delete", describe(plan))
	}
	if plan.Create[0].Name == plan.Delete[0].Name {
		t.Errorf("new slice reuses the name %s of a slice being deleted", plan.Create[0].Name)
	}
}

func TestPlanSlicesLowestFreeIndex(t *testing.T) {
	src := testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, readyEndpoints(0, 300)...))
	state := syncState(t, src, nil) // -0, -1, -2, full
	state = slices.Delete(state, 1, 2)
	foreign := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{
		Namespace: testNamespace, Name: SliceName(testNamespace, testService, testCluster, 3),
		Labels: map[string]string{discoveryv1.LabelManagedBy: "someone-else"},
	}}
	state = append(state, foreign)

	src = testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, readyEndpoints(0, 500)...))
	plan := PlanSlices(src, Locality{}, digests(state))
	if got, want := names(plan.Create), sliceNames(1, 4, 5); !slices.Equal(got, want) {
		t.Errorf("created %v, want %v", got, want)
	}
	if len(plan.Update) != 0 || len(plan.Delete) != 0 {
		t.Errorf("got %s, want only creates", describe(plan))
	}
}

func TestPlanSlicesIgnoresOthersSlices(t *testing.T) {
	src := testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, endpoint("10.0.0.1", true)))
	mine := syncState(t, src, nil)

	other := func(mutate func(*discoveryv1.EndpointSlice)) *discoveryv1.EndpointSlice {
		s := mine[0].DeepCopy()
		s.Name += "-x"
		mutate(s)
		return s
	}
	others := []*discoveryv1.EndpointSlice{
		other(func(s *discoveryv1.EndpointSlice) { delete(s.Labels, discoveryv1.LabelManagedBy) }),
		other(func(s *discoveryv1.EndpointSlice) {
			s.Labels[discoveryv1.LabelManagedBy] = "endpointslice-controller.k8s.io"
		}),
		other(func(s *discoveryv1.EndpointSlice) { s.Labels[mcsv1beta1.LabelSourceCluster] = "west" }),
		other(func(s *discoveryv1.EndpointSlice) { s.Labels[mcsv1beta1.LabelServiceName] = "api" }),
		other(func(s *discoveryv1.EndpointSlice) { s.Namespace = "other" }),
	}
	if plan := PlanSlices(src, Locality{}, digests(append(others, mine...))); !plan.Empty() {
		t.Errorf("got %s, want others' slices ignored", describe(plan))
	}
	if plan := PlanSlicesDelete(testNamespace, testService, testCluster, digests(append(others, mine...))); !slices.Equal(names(plan.Delete), names(mine)) || len(plan.Create)+len(plan.Update) != 0 {
		t.Errorf("PlanSlicesDelete: got %s, want delete of %v", describe(plan), names(mine))
	}
}

func TestPlanSlicesRelabels(t *testing.T) {
	src := testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, endpoint("10.0.0.1", true)))
	state := syncState(t, src, nil)
	state[0].Labels[LabelManagedBy] = "helm"
	state[0].Labels["team"] = "payments"
	plan := PlanSlices(src, Locality{}, digests(state))
	if len(plan.Update) != 1 || len(plan.Create)+len(plan.Delete) != 0 {
		t.Fatalf("got %s, want one update", describe(plan))
	}
	if l := plan.Update[0].Labels; l[LabelManagedBy] != ManagedByValue || l["team"] != "payments" {
		t.Errorf("labels %v: want ours restored and others kept", l)
	}
}

// shuffledSource returns src with its slices and their endpoints shuffled.
func shuffledSource(r *rand.Rand, src Source) Source {
	out := src
	out.Slices = nil
	for _, s := range src.Slices {
		c := s.DeepCopyObject().(*MemberSlice)
		r.Shuffle(len(c.Endpoints), func(i, j int) { c.Endpoints[i], c.Endpoints[j] = c.Endpoints[j], c.Endpoints[i] })
		r.Shuffle(len(c.Ports), func(i, j int) { c.Ports[i], c.Ports[j] = c.Ports[j], c.Ports[i] })
		out.Slices = append(out.Slices, c)
	}
	r.Shuffle(len(out.Slices), func(i, j int) { out.Slices[i], out.Slices[j] = out.Slices[j], out.Slices[i] })
	return out
}

func TestPlanSlicesOrderIndependent(t *testing.T) {
	twoPorts := []discoveryv1.EndpointPort{slicePort("http", 8080), slicePort("grpc", 9090)}
	dup := endpoint(ipv4(3), true)
	dup.NodeName = ptr.To("node-2")
	src := testSource(
		memberSlice("web-a", discoveryv1.AddressTypeIPv4, twoPorts, readyEndpoints(0, 180)...),
		memberSlice("web-b", discoveryv1.AddressTypeIPv4, twoPorts, append(readyEndpoints(170, 60), dup, endpoint(ipv4(5), false))...),
		memberSlice("web-c", discoveryv1.AddressTypeIPv6, httpPorts, endpoint("fd00::2", true), endpoint("fd00::1", false)),
		memberSlice("web-d", discoveryv1.AddressTypeIPv4, httpPorts, readyEndpoints(0, 30)...),
	)
	// An existing state that is partly stale.
	old := testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, twoPorts, readyEndpoints(100, 250)...))
	existing := syncState(t, old, nil)

	want := PlanSlices(src, Locality{}, digests(existing))
	r := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		ex := slices.Clone(existing)
		r.Shuffle(len(ex), func(i, j int) { ex[i], ex[j] = ex[j], ex[i] })
		if got := PlanSlices(shuffledSource(r, src), Locality{}, digests(ex)); !apiequality.Semantic.DeepEqual(got, want) {
			t.Fatalf("plan depends on input order:\n got %s\nwant %s", describe(got), describe(want))
		}
	}
	if state := apply(t, existing, want); !PlanSlices(src, Locality{}, digests(state)).Empty() {
		t.Errorf("not in sync after applying the plan")
	}
}

func TestPlanSlicesDoesNotMutateInputs(t *testing.T) {
	src := testSource(
		memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, readyEndpoints(0, 230)...),
		memberSlice("web-b", discoveryv1.AddressTypeIPv6, httpPorts, endpoint("fd00::1", true)),
	)
	old := testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, readyEndpoints(200, 250)...))
	existing := syncState(t, old, nil)
	existing[0].Labels[LabelManagedBy] = "stale"

	srcCopy := Source{Cluster: src.Cluster, Service: src.Service.DeepCopy(), Slices: copyMember(src.Slices)}
	ds := digests(existing)
	var dsCopy []*SliceDigest
	for _, d := range ds {
		dsCopy = append(dsCopy, d.DeepCopyObject().(*SliceDigest))
	}

	plan := PlanSlices(src, Locality{}, ds)
	if plan.Empty() {
		t.Fatal("want a non-empty plan")
	}
	// Scribble over the outputs: they must not share memory with the inputs.
	for _, list := range [][]*discoveryv1.EndpointSlice{plan.Create, plan.Update, plan.Delete} {
		for _, s := range list {
			s.Labels["scribble"] = "x"
			for i := range s.Endpoints {
				s.Endpoints[i].Addresses[0] = "scribble"
				*s.Endpoints[i].Conditions.Ready = false
				*s.Endpoints[i].NodeName = "scribble"
			}
			for i := range s.Ports {
				*s.Ports[i].Name = "scribble"
			}
		}
	}
	if !reflect.DeepEqual(src, srcCopy) {
		t.Error("PlanSlices modified its source")
	}
	if !apiequality.Semantic.DeepEqual(ds, dsCopy) {
		t.Error("PlanSlices modified the existing slices")
	}
}

// TestPlanSlicesAgainstLive checks which changes to a hub slice the plan
// undoes, working from the slice's digest as the hub cache holds it.
func TestPlanSlicesAgainstLive(t *testing.T) {
	src := testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, readyEndpoints(0, 5)...))
	desired := PlanSlices(src, Locality{}, nil).Create[0]
	tests := []struct {
		name   string
		mutate func(*discoveryv1.EndpointSlice)
		want   bool
	}{
		{"same", func(*discoveryv1.EndpointSlice) {}, true},
		{"server-set fields", func(s *discoveryv1.EndpointSlice) {
			s.ResourceVersion, s.UID, s.Generation = "7", "uid", 2
			s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x"}}
		}, true},
		{"defaulted protocol", func(s *discoveryv1.EndpointSlice) { s.Ports[0].Protocol = nil }, true},
		{"endpoint order", func(s *discoveryv1.EndpointSlice) { slices.Reverse(s.Endpoints) }, true},
		{"others' labels", func(s *discoveryv1.EndpointSlice) { s.Labels["team"] = "x" }, true},
		{"targetRef added", func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].TargetRef = &corev1.ObjectReference{Name: "p"} }, true},
		{"our label changed", func(s *discoveryv1.EndpointSlice) { s.Labels[mcsv1beta1.LabelSourceCluster] = "west" }, false},
		{"our label removed", func(s *discoveryv1.EndpointSlice) { delete(s.Labels, LabelManagedBy) }, false},
		{"port changed", func(s *discoveryv1.EndpointSlice) { s.Ports[0].Port = ptr.To[int32](1) }, false},
		{"port renamed", func(s *discoveryv1.EndpointSlice) { s.Ports[0].Name = ptr.To("web") }, false},
		{"condition changed", func(s *discoveryv1.EndpointSlice) { s.Endpoints[2].Conditions.Ready = ptr.To(false) }, false},
		{"zone changed", func(s *discoveryv1.EndpointSlice) { s.Endpoints[2].Zone = ptr.To("z") }, false},
		{"hints changed", func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[2].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z"}}}
		}, false},
		{"endpoint removed", func(s *discoveryv1.EndpointSlice) { s.Endpoints = s.Endpoints[1:] }, false},
		{"endpoint duplicated", func(s *discoveryv1.EndpointSlice) { s.Endpoints[1] = s.Endpoints[0] }, false},
		{"address type", func(s *discoveryv1.EndpointSlice) { s.AddressType = discoveryv1.AddressTypeIPv6 }, false},
	}
	for _, tt := range tests {
		live := desired.DeepCopy()
		tt.mutate(live)
		// Read in full, as the hub cache reads a slice whose content
		// another manager wrote.
		if got := PlanSlices(src, Locality{}, []*SliceDigest{DigestSlice(live)}); got.Empty() != tt.want {
			t.Errorf("%s: plan against the changed slice: %s, want empty: %v", tt.name, describe(got), tt.want)
		}
	}
}

// benchSource returns a source of n ready endpoints in member slices of 100.
func benchSource(n int) Source {
	var sl []*discoveryv1.EndpointSlice
	for i := 0; i < n; i += 100 {
		sl = append(sl, memberSlice(fmt.Sprintf("web-%d", i), discoveryv1.AddressTypeIPv4, httpPorts, readyEndpoints(i, min(100, n-i))...))
	}
	return testSource(sl...)
}

func BenchmarkPlanSlices(b *testing.B) {
	const n = 1000
	src := benchSource(n)
	state := syncState(b, src, nil)

	changed := benchSource(n)
	changed.Slices[4].Endpoints[42].markNotReady(map[unique.Handle[attributes]]unique.Handle[attributes]{})

	for _, bc := range []struct {
		name     string
		src      Source
		existing []*SliceDigest
	}{
		{"create", src, nil},
		{"in-sync", src, digests(state)},
		{"one-change", changed, digests(state)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				PlanSlices(bc.src, Locality{}, bc.existing)
			}
		})
	}
}

// BenchmarkPlanSlicesInSync plans services of growing size whose hub
// slices are in sync: allocations per plan should not grow with the
// number of endpoints (TestPlanSlicesInSyncAllocations holds a bound).
func BenchmarkPlanSlicesInSync(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		src := benchSource(n)
		existing := digests(syncState(b, src, nil))
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				PlanSlices(src, Locality{}, existing)
			}
		})
	}
}
