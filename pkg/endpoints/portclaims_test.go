package endpoints

import (
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// claimingImport is a merged import of ports, in conflict or not.
func claimingImport(conflict bool, ports ...mcsv1beta1.ServicePort) *mcsv1beta1.ServiceImport {
	var conflicts []Conflict
	if conflict {
		conflicts = []Conflict{{Reason: PortConflict, Message: "port"}}
	}
	return &mcsv1beta1.ServiceImport{
		Spec:   mcsv1beta1.ServiceImportSpec{Ports: ports},
		Status: mcsv1beta1.ServiceImportStatus{Conditions: ImportConditions(conflicts, 1)},
	}
}

func importPort(name string, port int32) mcsv1beta1.ServicePort {
	return mcsv1beta1.ServicePort{Name: name, Port: port, Protocol: corev1.ProtocolTCP}
}

func TestPortClaimsLoseOnlyANameTakenByAnotherPort(t *testing.T) {
	svc := testSvc(svcPort("tcp", 4242), svcPort("admin", 9000), svcPort("mine", 7000))
	cases := []struct {
		name string
		imp  *mcsv1beta1.ServiceImport
		want []string
	}{
		{"no import", nil, nil},
		{"an import without a conflict claims nothing", claimingImport(false, importPort("tcp", 42)), nil},
		{"another number under the name is lost", claimingImport(true, importPort("tcp", 42), importPort("admin", 9000)), []string{"tcp"}},
		{"another protocol under the name is lost", claimingImport(true, mcsv1beta1.ServicePort{Name: "admin", Port: 9000, Protocol: corev1.ProtocolUDP}), []string{"admin"}},
		{"another appProtocol under the name is lost", claimingImport(true, mcsv1beta1.ServicePort{Name: "admin", Port: 9000, Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("h2c")}), []string{"admin"}},
		{"a name the import lacks is kept", claimingImport(true, importPort("tcp", 4242)), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lost := ImportPortClaims(tc.imp).Lost(svc)
			got := slices.Sorted(maps.Keys(lost))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("lost %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPortClaimsEqual(t *testing.T) {
	a := ImportPortClaims(claimingImport(true, importPort("tcp", 42)))
	if !a.Equal(ImportPortClaims(claimingImport(true, importPort("tcp", 42)))) {
		t.Error("equal claims differ")
	}
	for _, other := range []PortClaims{
		nil,
		ImportPortClaims(claimingImport(false, importPort("tcp", 42))),
		ImportPortClaims(claimingImport(true, importPort("tcp", 4242))),
		ImportPortClaims(claimingImport(true, importPort("tcp2", 42))),
		ImportPortClaims(claimingImport(true, importPort("tcp", 42), importPort("udp", 53))),
	} {
		if a.Equal(other) {
			t.Errorf("%v equals %v", a, other)
		}
	}
}

// A member that lost a port name to another export's port leaves it out of
// its MCS slices, and only there: its per-cluster Service and Endpoints
// keep every port. The member's cached slices are not touched.
func TestPlanMemberLeavesLostPortsOutOfMCSSlices(t *testing.T) {
	src := testSource(memberSlice("web-1", discoveryv1.AddressTypeIPv4,
		[]discoveryv1.EndpointPort{slicePort("tcp", 42), slicePort("admin", 9000)}, readyEndpoints(0, 3)...))
	src.Service = testSvc(svcPort("tcp", 4242), svcPort("admin", 9000))
	cached := src.Slices[0]
	cachedPorts := slices.Clone(cached.Ports)
	view := MemberView{PortClaims: ImportPortClaims(claimingImport(true, importPort("admin", 9000), importPort("tcp", 42)))}

	plan := PlanMember(testNamespace, testService, testCluster, &src, PerClusterMirror, view)
	if len(plan.Slices.Create) != 1 {
		t.Fatalf("plan %s", describe(plan.Slices))
	}
	var got []string
	for _, p := range plan.Slices.Create[0].Ports {
		got = append(got, *p.Name)
	}
	if !slices.Equal(got, []string{"admin"}) {
		t.Errorf("MCS slice ports %v, want [admin]", got)
	}
	if n := len(plan.Service.Create.Spec.Ports); n != 2 {
		t.Errorf("per-cluster Service has %d ports, want both", n)
	}
	if n := len(plan.Endpoints.Create.Subsets[0].Ports); n != 2 {
		t.Errorf("per-cluster Endpoints have %d ports, want both", n)
	}
	if src.Slices[0] != cached || !slices.EqualFunc(cached.Ports, cachedPorts, func(a, b discoveryv1.EndpointPort) bool { return *a.Name == *b.Name }) {
		t.Error("planning changed the member's cached slice")
	}

	// Once the claim is gone (the winner unexported), the port comes back.
	after := viewAfter(t, view, plan)
	after.PortClaims = nil
	again := PlanMember(testNamespace, testService, testCluster, &src, PerClusterMirror, after)
	if len(again.Slices.Update)+len(again.Slices.Create) == 0 {
		t.Fatalf("the port does not come back: %s", describe(again.Slices))
	}
}
