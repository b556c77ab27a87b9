package endpoints

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

func planSource() Source {
	return testSource(memberSlice("web-1", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{slicePort("http", 8080)}, readyEndpoints(0, 3)...))
}

// viewAfter is the hub view a member plan leaves when every write succeeds.
func viewAfter(t testing.TB, view MemberView, plan MemberPlan) MemberView {
	t.Helper()
	if len(view.Slices) > 0 {
		t.Fatal("viewAfter: start from a view without slices")
	}
	out := view
	out.Slices = digests(apply(t, nil, plan.Slices))
	switch {
	case plan.Service.Create != nil:
		out.Service = plan.Service.Create
	case plan.Service.Update != nil:
		out.Service = plan.Service.Update
	case plan.Service.Delete != nil:
		out.Service = nil
	}
	switch {
	case plan.Endpoints.Create != nil:
		out.Endpoints = DigestEndpoints(plan.Endpoints.Create)
	case plan.Endpoints.Update != nil:
		out.Endpoints = DigestEndpoints(plan.Endpoints.Update)
	case plan.Endpoints.Delete != nil:
		out.Endpoints = nil
	}
	return out
}

func TestPlanMemberWritesEverythingOnceThenNothing(t *testing.T) {
	src := planSource()
	plan := PlanMember(testNamespace, testService, testCluster, &src, PerClusterMirror, MemberView{})
	if len(plan.Slices.Create) != 1 || plan.Service.Create == nil || plan.Endpoints.Create == nil {
		t.Fatalf("a new source plans %+v", plan)
	}
	view := viewAfter(t, MemberView{}, plan)
	if again := PlanMember(testNamespace, testService, testCluster, &src, PerClusterMirror, view); !again.Empty() {
		t.Fatalf("the view a plan leaves plans again: %+v", again)
	}
}

func TestPlanMemberWithdrawsEndpointsBeforeService(t *testing.T) {
	src := planSource()
	view := viewAfter(t, MemberView{}, PlanMember(testNamespace, testService, testCluster, &src, PerClusterMirror, MemberView{}))
	plan := PlanMember(testNamespace, testService, testCluster, nil, PerClusterMirror, view)
	if len(plan.Slices.Delete) != 1 || plan.Service.Delete == nil || plan.Endpoints.Delete == nil ||
		plan.Service.Create != nil || plan.Endpoints.Create != nil {
		t.Fatalf("withdrawing plans %+v", plan)
	}
}

// A Service of someone else holding the per-cluster name: no Service is
// written, and Endpoints of ours under that name are withdrawn, since they
// would feed that Service.
func TestPlanMemberLeavesATakenNameAndWithdrawsOurEndpoints(t *testing.T) {
	src := planSource()
	view := viewAfter(t, MemberView{}, PlanMember(testNamespace, testService, testCluster, &src, PerClusterMirror, MemberView{}))
	view.Service, view.ServiceTaken = nil, true
	plan := PlanMember(testNamespace, testService, testCluster, &src, PerClusterMirror, view)
	if plan.Service != (ServiceChange{}) || plan.Endpoints.Delete == nil || plan.Endpoints.Create != nil || !plan.Slices.Empty() {
		t.Fatalf("a taken name plans %+v", plan)
	}
}

func TestPlanMemberRecreatesAServiceThatTurnsHeadless(t *testing.T) {
	src := planSource()
	view := viewAfter(t, MemberView{}, PlanMember(testNamespace, testService, testCluster, &src, PerClusterMirror, MemberView{}))
	headless := *src.Service.DeepCopy()
	headless.Spec.ClusterIP = corev1.ClusterIPNone
	src.Service = &headless
	plan := PlanMember(testNamespace, testService, testCluster, &src, PerClusterMirror, view)
	if plan.Service.Delete == nil || plan.Service.Create == nil || plan.Service.Create.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Fatalf("turning headless plans %+v", plan.Service)
	}
}

func TestPlanMemberOffWritesOnlySlices(t *testing.T) {
	src := planSource()
	plan := PlanMember(testNamespace, testService, testCluster, &src, PerClusterOff, MemberView{})
	if len(plan.Slices.Create) != 1 || plan.Service != (ServiceChange{}) || plan.Endpoints != (EndpointsChange{}) {
		t.Fatalf("per-cluster off plans %+v", plan)
	}
}

// simulateImportWrites plays an API server for PlanImport: it applies a
// round's writes to the view, filling in what a server does (UIDs, cluster
// IPs, generation), and names the writes.
func simulateImportWrites(view ImportView, plan ImportPlan) (ImportView, []string) {
	var writes []string
	if p := plan.CreateImport; p != nil {
		writes = append(writes, "create import")
		imp := p.DeepCopy()
		imp.UID, imp.Generation = types.UID("import-uid"), 1
		view.Import = imp
	}
	if p := plan.Derived.Delete; p != nil {
		writes = append(writes, "delete derived")
		view.Derived = nil
	}
	if p := plan.Derived.Create; p != nil {
		writes = append(writes, "create derived")
		svc := p.DeepCopy()
		if svc.Spec.ClusterIP == "" {
			svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "10.96.7.7", []string{"10.96.7.7"}
		}
		view.Derived = svc
	}
	if p := plan.Derived.Update; p != nil {
		writes = append(writes, "update derived")
		view.Derived = p.DeepCopy()
	}
	if p := plan.Alias.Delete; p != nil {
		writes = append(writes, "delete alias")
		view.Alias = nil
	}
	if p := plan.Alias.Create; p != nil {
		writes = append(writes, "create alias")
		view.Alias = p.DeepCopy()
	}
	if p := plan.Alias.Update; p != nil {
		writes = append(writes, "update alias")
		view.Alias = p.DeepCopy()
	}
	if plan.DeleteImport != nil {
		writes = append(writes, "delete import")
		view.Import = nil
	}
	if p := plan.UpdateImport; p != nil {
		writes = append(writes, "update import")
		imp := p.DeepCopy()
		imp.Status = view.Import.Status
		view.Import = imp
	}
	if p := plan.UpdateImportStatus; p != nil {
		writes = append(writes, "update import status")
		imp := view.Import.DeepCopy()
		imp.Status = p.Status
		view.Import = imp
	}
	return view, writes
}

func TestPlanImportSettlesInRounds(t *testing.T) {
	res := MergeImport(testNamespace, testService, []Export{{Cluster: testCluster, Service: testSvc(svcPort("http", 80)), Created: metav1.Unix(1, 0)}})
	var view ImportView
	var got [][]string
	for range 8 {
		plan := PlanImport(&res, view, ImportOptions{})
		if plan.Empty() {
			break
		}
		var writes []string
		view, writes = simulateImportWrites(view, plan)
		got = append(got, writes)
	}
	want := [][]string{{"create import"}, {"create derived"}, {"update import"}, {"update import status"}}
	if len(got) != len(want) {
		t.Fatalf("rounds %q, want %q", got, want)
	}
	for i := range want {
		if len(got[i]) != 1 || got[i][0] != want[i][0] {
			t.Fatalf("rounds %q, want %q", got, want)
		}
	}
	if ips := view.Import.Spec.IPs; len(ips) != 1 || ips[0] != "10.96.7.7" {
		t.Fatalf("the import's IPs are %v, want the derived Service's", ips)
	}
	if o := view.Derived.OwnerReferences; len(o) != 1 || o[0].UID != "import-uid" {
		t.Fatalf("the derived Service's owners are %v", o)
	}

	// Nothing exports it any more: the derived Service goes, then the import.
	plan := PlanImport(nil, view, ImportOptions{})
	if _, writes := simulateImportWrites(view, plan); len(writes) != 2 || writes[0] != "delete derived" || writes[1] != "delete import" {
		t.Fatalf("withdrawing writes %q", writes)
	}

	// Someone else's import holds the name: only our derived Service goes.
	view.Import, view.ImportTaken = nil, true
	if _, writes := simulateImportWrites(view, PlanImport(&res, view, ImportOptions{})); len(writes) != 1 || writes[0] != "delete derived" {
		t.Fatalf("a taken import name writes %q", writes)
	}
}

func TestPlanImportHeadlessHasNoIPs(t *testing.T) {
	svc := testSvc(svcPort("tcp", 5432))
	svc.Spec.ClusterIP = corev1.ClusterIPNone
	res := MergeImport(testNamespace, testService, []Export{{Cluster: testCluster, Service: svc, Created: metav1.Unix(1, 0)}})
	if res.Import.Spec.Type != mcsv1beta1.Headless {
		t.Fatalf("type %s", res.Import.Spec.Type)
	}
	var view ImportView
	for range 8 {
		plan := PlanImport(&res, view, ImportOptions{})
		if plan.Empty() {
			break
		}
		view, _ = simulateImportWrites(view, plan)
	}
	if len(view.Import.Spec.IPs) != 0 || view.Derived.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Fatalf("headless import IPs %v, derived cluster IP %q", view.Import.Spec.IPs, view.Derived.Spec.ClusterIP)
	}
}

// With an alias domain, an import gets "<service>-clusterset", an
// ExternalName Service naming its derived Service and owned by the import,
// once the import exists; it follows the import out, is left alone when
// someone else holds its name, and goes when the daemon stops asking.
func TestPlanImportAlias(t *testing.T) {
	res := MergeImport(testNamespace, testService, []Export{{Cluster: testCluster, Service: testSvc(svcPort("http", 80)), Created: metav1.Unix(1, 0)}})
	opts := ImportOptions{AliasDomain: "cluster.example"}
	var view ImportView
	var all []string
	for range 8 {
		plan := PlanImport(&res, view, opts)
		if plan.Empty() {
			break
		}
		var writes []string
		view, writes = simulateImportWrites(view, plan)
		all = append(all, writes...)
	}
	if !slices.Contains(all, "create alias") {
		t.Fatalf("writes %q create no alias", all)
	}
	a := view.Alias
	if a.Name != "web-clusterset" || a.Spec.Type != corev1.ServiceTypeExternalName ||
		a.Spec.ExternalName != DerivedServiceName(testNamespace, testService)+".shop.svc.cluster.example" {
		t.Errorf("alias %s: %s %q", a.Name, a.Spec.Type, a.Spec.ExternalName)
	}
	if o := a.OwnerReferences; len(o) != 1 || o[0].UID != "import-uid" {
		t.Errorf("the alias's owners are %v", o)
	}
	// Someone changes it: it is put back.
	changed := view
	changed.Alias = a.DeepCopy()
	changed.Alias.Spec.ExternalName = "elsewhere.example"
	if _, writes := simulateImportWrites(changed, PlanImport(&res, changed, opts)); !slices.Equal(writes, []string{"update alias"}) {
		t.Errorf("a changed alias writes %q", writes)
	}
	// The daemon stops asking for aliases: it goes.
	if _, writes := simulateImportWrites(view, PlanImport(&res, view, ImportOptions{})); !slices.Equal(writes, []string{"delete alias"}) {
		t.Errorf("no alias domain writes %q", writes)
	}
	// Nothing exports it: the alias goes with the rest.
	if _, writes := simulateImportWrites(view, PlanImport(nil, view, opts)); !slices.Contains(writes, "delete alias") {
		t.Errorf("withdrawing writes %q", writes)
	}
	// Its name is someone else's: nothing is written for it.
	taken := view
	taken.Alias, taken.AliasTaken = nil, true
	if plan := PlanImport(&res, taken, opts); !plan.Empty() {
		t.Errorf("a taken alias name plans %+v", plan)
	}
}
