package sync

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/record"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

var cartC1 = Key{Cluster: "c1", Namespace: "shop", Name: "cart"}

func sliceName(i int) string { return endpoints.SliceName("shop", "cart", "c1", i) }

func TestSyncMemberServiceWritesPerClusterObjectsAndSlices(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil)
	m := f.member("c1")
	_ = m.services.Add(service("shop", "cart"))
	m.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-abc", 0, 3, true)}

	f.sync(cartC1)
	want := []string{
		"create endpoints shop/cart-c1",
		"create endpointslices shop/" + sliceName(0),
		"create services shop/cart-c1",
	}
	if got := f.writes(); !reflect.DeepEqual(got, want) {
		t.Fatalf("writes:\n got %q\nwant %q", got, want)
	}

	// Level-triggered: the same sync against an up-to-date hub writes nothing.
	f.resetActions()
	f.sync(cartC1)
	if got := f.writes(); len(got) != 0 {
		t.Fatalf("in-sync hub got writes %q", got)
	}

	slice, err := f.hub.DiscoveryV1().EndpointSlices("shop").Get(f.ctx, sliceName(0), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := slice.Labels[discoveryv1.LabelManagedBy]; got != endpoints.SliceManagedByValue {
		t.Errorf("slice managed-by = %q", got)
	}
	if len(slice.Endpoints) != 3 {
		t.Errorf("slice has %d endpoints, want 3", len(slice.Endpoints))
	}
}

func TestSyncMemberServiceUpdatesOnlyWhatChanged(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil)
	m := f.member("c1")
	_ = m.services.Add(service("shop", "cart"))
	m.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-abc", 0, 3, true)}
	f.sync(cartC1)

	// Readiness flips: the slice and the Endpoints change, the Service does not.
	f.resetActions()
	m.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-abc", 0, 3, false)}
	f.sync(cartC1)
	want := []string{
		"update endpoints shop/cart-c1",
		"update endpointslices shop/" + sliceName(0),
	}
	if got := f.writes(); !reflect.DeepEqual(got, want) {
		t.Fatalf("writes:\n got %q\nwant %q", got, want)
	}
	eps, _ := f.hub.CoreV1().Endpoints("shop").Get(f.ctx, "cart-c1", metav1.GetOptions{})
	if n := len(eps.Subsets[0].NotReadyAddresses); n != 3 || len(eps.Subsets[0].Addresses) != 0 {
		t.Errorf("Endpoints: %d ready, %d not ready; want 0 and 3", len(eps.Subsets[0].Addresses), n)
	}
}

func TestSyncMemberServiceNeverMutatesCaches(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil)
	m := f.member("c1")
	svc := service("shop", "cart")
	_ = m.services.Add(svc)
	m.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-abc", 0, 150, true)}
	f.sync(cartC1)

	// Change the member so the next sync updates hub objects from the cache.
	m.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-abc", 10, 120, true)}
	memberBefore := []runtime.Object{svc.DeepCopy(), m.slices[0].DeepCopy()}
	hubBefore := snapshot(f)
	f.sync(cartC1)
	if !reflect.DeepEqual(memberBefore, []runtime.Object{svc, m.slices[0]}) {
		t.Error("sync mutated a member cache object")
	}
	for k, before := range hubBefore {
		if !reflect.DeepEqual(before, k.obj) {
			t.Errorf("sync mutated hub cache object %s", k.name)
		}
	}
}

type cached struct {
	name string
	obj  interface{}
}

// snapshot deep-copies every hub cache object, keyed by the cached pointer.
func snapshot(f *fixture) map[cached]interface{} {
	out := map[cached]interface{}{}
	for _, store := range []interface{ List() []interface{} }{f.ctrl.caches.serviceInf.GetStore(), f.ctrl.caches.endpointInf.GetStore(), f.ctrl.caches.sliceInf.GetStore(), f.ctrl.caches.importInf.GetStore()} {
		for _, o := range store.List() {
			m, _ := metaOf(o)
			out[cached{name: m.GetName(), obj: o}] = o.(runtime.Object).DeepCopyObject()
		}
	}
	return out
}

func TestSyncMemberServiceWithdrawsUnexportedService(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil)
	m := f.member("c1")
	_ = m.services.Add(service("shop", "cart"))
	m.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-abc", 0, 101, true)}
	f.sync(cartC1)

	f.resetActions()
	_ = m.services.Delete(service("shop", "cart"))
	f.sync(cartC1)
	want := []string{
		"delete endpoints shop/cart-c1",
		"delete endpointslices shop/" + sliceName(0),
		"delete endpointslices shop/" + sliceName(1),
		"delete services shop/cart-c1",
	}
	if got := f.writes(); !reflect.DeepEqual(got, want) {
		t.Fatalf("writes:\n got %q\nwant %q", got, want)
	}
}

func TestSyncLeavesForeignHubServiceAndReportsConflict(t *testing.T) {
	foreign := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart-c1", Labels: map[string]string{"team": "payments"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}},
	}
	rec := record.NewFakeRecorder(10)
	f := newFixture(t, Options{Recorder: rec}, []runtime.Object{foreign}, nil)
	m := f.member("c1")
	_ = m.services.Add(service("shop", "cart"))

	err := f.ctrl.sync(f.ctx, cartC1)
	var conflict *conflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("sync error = %v, want a conflict", err)
	}
	got, _ := f.hub.CoreV1().Services("shop").Get(f.ctx, "cart-c1", metav1.GetOptions{})
	if !reflect.DeepEqual(got, foreign) {
		t.Errorf("foreign Service changed:\n%v", got)
	}
	for _, w := range f.writes() {
		if strings.Contains(w, "cart-c1") && !strings.HasPrefix(w, "create") {
			t.Errorf("wrote to the foreign object: %s", w)
		}
	}
	if n := testutil.ToFloat64(f.ctrl.metrics.Conflicts.WithLabelValues(resourceService)); n != 1 {
		t.Errorf("conflict metric = %v, want 1", n)
	}
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, ReasonNameConflict) {
			t.Errorf("event %q lacks reason %s", e, ReasonNameConflict)
		}
	default:
		t.Error("no Event recorded for the conflict")
	}
	// Reading finds the conflict again, and reports nothing: only the
	// sync's settling does.
	f.settle()
	if _, _, err := f.ctrl.read.readMember(f.ctx, cartC1); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(f.ctrl.metrics.Conflicts.WithLabelValues(resourceService)); n != 1 {
		t.Errorf("conflict metric = %v after a read, want still 1", n)
	}
	select {
	case e := <-rec.Events:
		t.Errorf("a read recorded an Event: %q", e)
	default:
	}
}

func TestSyncGarbageCollectsUnregisteredClusterOnlyAfterSecretsSync(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil)
	m := f.member("c1")
	_ = m.services.Add(service("shop", "cart"))
	m.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-abc", 0, 3, true)}
	f.sync(cartC1)

	delete(f.members.members, "c1")
	f.members.synced = false
	f.resetActions()
	f.sync(cartC1)
	if got := f.writes(); len(got) != 0 {
		t.Fatalf("deleted objects before the Secret cache synced: %q", got)
	}

	f.members.synced = true
	f.sync(cartC1)
	if got := f.writes(); len(got) != 3 {
		t.Fatalf("want the 3 objects of c1 deleted, got %q", got)
	}
}

func TestSyncSkipsUnsyncedMember(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil)
	m := f.member("c1")
	m.synced = false
	_ = m.services.Add(service("shop", "cart"))
	f.sync(cartC1)
	f.sync(cartC1.ClusterSet())
	if got := f.writes(); len(got) != 0 {
		t.Fatalf("wrote for an unsynced member: %q", got)
	}
}

func TestSyncClusterSetWritesImportAndDerivedService(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil)
	for _, c := range []string{"c1", "c2"} {
		_ = f.member(c).services.Add(service("shop", "cart"))
		f.sync(Key{Cluster: c, Namespace: "shop", Name: "cart"}) // records the export
	}
	f.resetActions()
	key := cartC1.ClusterSet()
	f.sync(key)
	derived := endpoints.DerivedServiceName("shop", "cart")
	want := []string{
		"create serviceimports shop/cart",
		"create services shop/" + derived,
		"update serviceimports/status shop/cart",
	}
	if got := f.writes(); !reflect.DeepEqual(got, want) {
		t.Fatalf("writes:\n got %q\nwant %q", got, want)
	}
	svc, err := f.hub.CoreV1().Services("shop").Get(f.ctx, derived, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(svc.OwnerReferences) != 1 || svc.OwnerReferences[0].Kind != "ServiceImport" {
		t.Errorf("derived Service owner references = %v", svc.OwnerReferences)
	}
	imp, _ := f.hubMCS.MulticlusterV1beta1().ServiceImports("shop").Get(f.ctx, "cart", metav1.GetOptions{})
	if len(imp.Status.Clusters) != 2 {
		t.Errorf("import status clusters = %v", imp.Status.Clusters)
	}

	f.resetActions()
	f.sync(key)
	if got := f.writes(); len(got) != 0 {
		t.Fatalf("in-sync clusterset got writes %q", got)
	}

	// The last export goes: import and derived Service go with it.
	for _, c := range []string{"c1", "c2"} {
		_ = f.members.members[c].services.Delete(service("shop", "cart"))
		f.sync(Key{Cluster: c, Namespace: "shop", Name: "cart"}) // withdraws the record
	}
	f.resetActions()
	f.sync(key)
	want = []string{"delete serviceimports shop/cart", "delete services shop/" + derived}
	if got := f.writes(); !reflect.DeepEqual(got, want) {
		t.Fatalf("writes:\n got %q\nwant %q", got, want)
	}
}

func TestSyncSkipsMissingNamespaceUnlessCreating(t *testing.T) {
	for _, create := range []bool{false, true} {
		f := newFixture(t, Options{CreateNamespaces: create}, nil, nil)
		_ = f.member("c1").services.Add(service("billing", "pay"))
		key := Key{Cluster: "c1", Namespace: "billing", Name: "pay"}
		if err := f.ctrl.sync(f.ctx, key); err != nil {
			t.Fatal(err)
		}
		got := f.writes()
		if !create {
			if len(got) != 0 {
				t.Errorf("wrote into a missing namespace: %q", got)
			}
			if n := testutil.ToFloat64(f.ctrl.metrics.SkippedNamespace); n != 1 {
				t.Errorf("namespace_missing metric = %v", n)
			}
			continue
		}
		if !slices.Contains(got, "create namespaces /billing") || !slices.Contains(got, "create services billing/pay-c1") {
			t.Errorf("with --create-namespaces writes = %q", got)
		}
	}
}

func TestExportPolicy(t *testing.T) {
	annotated := service("shop", "cart")
	annotated.Annotations = map[string]string{AnnotationExport: "true"}
	ours := service("shop", "cart-c1")
	ours.Labels = map[string]string{endpoints.LabelManagedBy: endpoints.ManagedByValue}
	external := service("shop", "ext")
	external.Spec.Type = corev1.ServiceTypeExternalName
	system := service("kube-system", "dns")

	m := newFakeMember()
	exclude := sets.New(DefaultExcludedNamespaces...)
	cases := []struct {
		name string
		mode ExportMode
		svc  *corev1.Service
		want bool
	}{
		{"all exports a plain service", ExportAll, service("shop", "cart"), true},
		{"annotation mode needs the annotation", ExportAnnotation, service("shop", "cart"), false},
		{"annotation mode with annotation", ExportAnnotation, annotated, true},
		{"our own output is never exported", ExportAll, ours, false},
		{"ExternalName is never exported", ExportAll, external, false},
		{"excluded namespace", ExportAll, system, false},
		{"serviceexport mode without a ServiceExport", ExportServiceExport, annotated, false},
		{"nil service", ExportAll, nil, false},
		{"the API server's Service is never exported", ExportAll, service("default", "kubernetes"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := ExportPolicy{Mode: tc.mode, Exclude: exclude}
			if _, got := p.export("c1", m, tc.svc, time.Time{}); got != tc.want {
				t.Errorf("exported = %v, want %v", got, tc.want)
			}
		})
	}
	// Not even when an operator includes its namespace and excludes none,
	// or exports it explicitly.
	for _, mode := range []ExportMode{ExportAll, ExportAnnotation, ExportServiceExport} {
		api := service("default", "kubernetes")
		api.Annotations = map[string]string{AnnotationExport: "true"}
		m := newFakeMember()
		m.exports["default/kubernetes"] = &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"}}
		p := ExportPolicy{Mode: mode, Include: sets.New("default")}
		if _, got := p.export("c1", m, api, time.Time{}); got {
			t.Errorf("mode %s exports default/kubernetes", mode)
		}
	}
}

// The daemon's own namespace is not exported unless an operator lists it.
func TestExportPolicyLeavesTheDaemonsNamespaceAlone(t *testing.T) {
	m := newFakeMember()
	svc := service("endpoint-aggregator", "metrics")
	for _, tc := range []struct {
		name    string
		include []string
		want    bool
	}{
		{"by default", nil, false},
		{"included by name", []string{"endpoint-aggregator", "shop"}, true},
		{"other namespaces included", []string{"shop"}, false},
	} {
		p := ExportPolicy{Mode: ExportAll, Include: sets.New(tc.include...), Own: "endpoint-aggregator"}
		if _, got := p.export("c1", m, svc, time.Time{}); got != tc.want {
			t.Errorf("%s: exported = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A member controls its own clock: an export claiming to be older than
// the member's registration on the hub counts from the registration.
func TestExportTimeIsNeverBeforeTheRegistration(t *testing.T) {
	registered := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		claimed time.Time
		want    time.Time
	}{
		{"claims 1970", time.Unix(0, 0), registered},
		{"claims a second before", registered.Add(-time.Second), registered},
		{"exported later", registered.Add(time.Hour), registered.Add(time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeMember()
			m.exports["shop/cart"] = &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart", CreationTimestamp: metav1.NewTime(tc.claimed)}}
			p := ExportPolicy{Mode: ExportServiceExport}
			e, ok := p.export("c1", m, service("shop", "cart"), registered)
			if !ok || !e.Created.Time.Equal(tc.want) {
				t.Errorf("export = %v at %v, want exported at %v", ok, e.Created.Time, tc.want)
			}
		})
	}
	// A member the daemon registers itself (zero time) keeps its claim.
	m := newFakeMember()
	svc := service("shop", "cart")
	svc.CreationTimestamp = metav1.NewTime(time.Unix(0, 0))
	if e, _ := (ExportPolicy{Mode: ExportAll}).export("hub", m, svc, time.Time{}); !e.Created.Time.Equal(time.Unix(0, 0)) {
		t.Errorf("a static member's export time = %v, want its claim", e.Created.Time)
	}
}

// A member key writes its ServiceExport's conditions from its Service and
// the hub's ServiceImport: Pending until the import lists it, then the
// import's Conflict condition on every export; nothing once in line.
func TestSyncWritesExportConditionsOnlyWhenTheyChange(t *testing.T) {
	f := newFixture(t, Options{Export: ExportPolicy{Mode: ExportServiceExport}, WriteExportStatus: true}, nil, nil)
	export := func(m *fakeMember, created int64) {
		m.exports["shop/cart"] = &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{
			Namespace: "shop", Name: "cart", Generation: 1, CreationTimestamp: metav1.NewTime(time.Unix(created, 0))}}
	}
	east, west := f.member("east"), f.member("west")
	_ = east.services.Add(service("shop", "cart", corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}))
	_ = west.services.Add(service("shop", "cart", corev1.ServicePort{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}))
	export(east, 100) // oldest: its port wins
	export(west, 200)
	members := map[string]*fakeMember{"east": east, "west": west}
	eastKey, westKey := Key{Cluster: "east", Namespace: "shop", Name: "cart"}, Key{Cluster: "west", Namespace: "shop", Name: "cart"}
	key := eastKey.ClusterSet()

	f.sync(eastKey)
	f.sync(westKey)
	for name, m := range members {
		ready := meta.FindStatusCondition(m.exports["shop/cart"].Status.Conditions, "Ready")
		if len(m.statusWrites) != 1 || ready == nil || ready.Reason != "Pending" {
			t.Fatalf("%s before the import: %d status writes, Ready %+v", name, len(m.statusWrites), ready)
		}
	}
	queued := f.ctrl.queue.wq.Len()
	f.sync(key)
	if n := f.ctrl.queue.wq.Len() - queued; n != 2 {
		t.Errorf("the import's first status queued %d keys, want the 2 member keys", n)
	}
	f.sync(eastKey)
	f.sync(westKey)
	imp, _ := f.hubMCS.MulticlusterV1beta1().ServiceImports("shop").Get(f.ctx, "cart", metav1.GetOptions{})
	ic := meta.FindStatusCondition(imp.Status.Conditions, endpoints.ConditionConflict)
	if ic == nil || ic.Status != metav1.ConditionTrue {
		t.Errorf("ServiceImport Conflict condition = %+v", ic)
	}
	for name, m := range members {
		if len(m.statusWrites) != 2 {
			t.Fatalf("%s: %d status writes, want 2", name, len(m.statusWrites))
		}
		c := meta.FindStatusCondition(m.exports["shop/cart"].Status.Conditions, endpoints.ConditionConflict)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != string(endpoints.PortConflict) ||
			!strings.Contains(c.Message, "west") || !strings.Contains(c.Message, "east") || (ic != nil && c.Message != ic.Message) {
			t.Errorf("%s Conflict condition = %+v", name, c)
		}
	}
	if len(imp.Spec.Ports) != 1 || imp.Spec.Ports[0].Port != 80 {
		t.Errorf("import ports = %+v, want east's port 80", imp.Spec.Ports)
	}

	// Nothing changed: no member or hub writes.
	f.resetActions()
	for _, k := range []Key{eastKey, westKey, key} {
		f.sync(k)
	}
	if got := f.writes(); len(got) != 0 || len(east.statusWrites) != 2 || len(west.statusWrites) != 2 {
		t.Fatalf("in-sync syncs wrote: hub %q, east %d, west %d status writes", got, len(east.statusWrites), len(west.statusWrites))
	}

	// west turns into an ExternalName Service: invalid, never imported.
	ext := service("shop", "cart")
	ext.Spec.Type = corev1.ServiceTypeExternalName
	_ = west.services.Update(ext)
	for _, k := range []Key{westKey, key, eastKey} {
		f.sync(k)
	}
	valid := meta.FindStatusCondition(west.exports["shop/cart"].Status.Conditions, "Valid")
	if valid == nil || valid.Status != metav1.ConditionFalse || valid.Reason != "InvalidServiceType" {
		t.Errorf("west Valid = %+v", valid)
	}
	imp, _ = f.hubMCS.MulticlusterV1beta1().ServiceImports("shop").Get(f.ctx, "cart", metav1.GetOptions{})
	if len(imp.Status.Clusters) != 1 || imp.Status.Clusters[0].Cluster != "east" {
		t.Errorf("import clusters = %v, want only east", imp.Status.Clusters)
	}
	if c := meta.FindStatusCondition(east.exports["shop/cart"].Status.Conditions, endpoints.ConditionConflict); c.Status != metav1.ConditionFalse {
		t.Errorf("east still in conflict: %+v", c)
	}
}

func TestUnreachablePolicyMarksNotReadyThenWithdraws(t *testing.T) {
	f := newFixture(t, Options{UnreachableGrace: time.Minute, UnreachableWithdraw: time.Hour}, nil, nil)
	m := f.member("c1")
	_ = m.services.Add(service("shop", "cart"))
	m.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-abc", 0, 3, true)}
	f.sync(cartC1)

	readyInHub := func() (ready, total int) {
		s, err := f.hub.DiscoveryV1().EndpointSlices("shop").Get(f.ctx, sliceName(0), metav1.GetOptions{})
		if err != nil {
			return 0, 0
		}
		for _, ep := range s.Endpoints {
			total++
			if *ep.Conditions.Ready {
				ready++
			}
		}
		return ready, total
	}

	// Unreachable, but within the grace period: last-known state is kept.
	m.downSince = time.Now().Add(-30 * time.Second)
	f.resetActions()
	f.sync(cartC1)
	if got := f.writes(); len(got) != 0 {
		t.Fatalf("within grace: writes %q", got)
	}
	// Past the grace period: not ready, serving kept.
	m.downSince = time.Now().Add(-2 * time.Minute)
	f.sync(cartC1)
	if r, n := readyInHub(); r != 0 || n != 3 {
		t.Fatalf("past grace: %d of %d ready, want 0 of 3", r, n)
	}
	s, _ := f.hub.DiscoveryV1().EndpointSlices("shop").Get(f.ctx, sliceName(0), metav1.GetOptions{})
	if !*s.Endpoints[0].Conditions.Serving {
		t.Error("serving was not kept as last seen")
	}
	if m.slices[0].Endpoints[0].Conditions.Ready == nil || !*m.slices[0].Endpoints[0].Conditions.Ready {
		t.Error("the member cache was mutated")
	}
	// Past the withdraw period: gone.
	m.downSince = time.Now().Add(-2 * time.Hour)
	f.sync(cartC1)
	if _, n := readyInHub(); n != 0 {
		t.Fatalf("past withdraw: %d endpoints remain", n)
	}
	// Recovery restores them.
	m.downSince = time.Time{}
	f.sync(cartC1)
	if r, n := readyInHub(); r != 3 || n != 3 {
		t.Fatalf("after recovery: %d of %d ready, want 3 of 3", r, n)
	}
}

// The merge reads the exports the hub records on each member's slices, not
// member caches: a member that has not synced since the daemon started
// counts as last recorded, its record taking part in the merge like any
// other, and it leaves the import once its own sync withdraws the record.
func TestSyncClusterSetMergesTheRecordsInTheHub(t *testing.T) {
	for _, mode := range []endpoints.PerClusterMode{endpoints.PerClusterMirror, endpoints.PerClusterOff} {
		t.Run(string(mode), func(t *testing.T) {
			f := newFixture(t, Options{PerClusterServices: mode}, nil, nil)
			http := corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}
			metrics := corev1.ServicePort{Name: "metrics", Port: 9090, Protocol: corev1.ProtocolTCP}
			_ = f.member("c1").services.Add(service("shop", "cart", http))
			c2 := f.member("c2")
			_ = c2.services.Add(service("shop", "cart", http, metrics))
			c2Key := Key{Cluster: "c2", Namespace: "shop", Name: "cart"}
			for _, k := range []Key{cartC1, c2Key, cartC1.ClusterSet()} {
				f.sync(k)
			}

			// The daemon restarts; c2 does not sync and c1's Service changes.
			c2.synced = false
			_ = c2.services.Delete(service("shop", "cart")) // unseen: c2 has not synced
			changed := service("shop", "cart", http)
			changed.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			_ = f.members.members["c1"].services.Update(changed)
			f.resetActions()
			f.quiesce()
			f.sync(cartC1)
			if queued := f.queuedWhenQuiet(); len(queued) != 1 || queued[0] != cartC1.ClusterSet() {
				t.Errorf("a changed record queued %v, want the clusterset key alone", queued)
			}
			f.sync(cartC1.ClusterSet())

			imp, err := f.hubMCS.MulticlusterV1beta1().ServiceImports("shop").Get(f.ctx, "cart", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var clusters, ports []string
			for _, c := range imp.Status.Clusters {
				clusters = append(clusters, c.Cluster)
			}
			for _, p := range imp.Spec.Ports {
				ports = append(ports, p.Name)
			}
			if want := []string{"c1", "c2"}; !reflect.DeepEqual(clusters, want) {
				t.Errorf("status.clusters = %q, want %q", clusters, want)
			}
			if want := []string{"http", "metrics"}; !reflect.DeepEqual(ports, want) {
				t.Errorf("ports = %q, want %q", ports, want)
			}
			if imp.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
				t.Errorf("sessionAffinity = %q, want c1's (oldest export, then cluster name)", imp.Spec.SessionAffinity)
			}
			if c := meta.FindStatusCondition(imp.Status.Conditions, endpoints.ConditionConflict); c == nil ||
				c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "c2") {
				t.Errorf("Conflict = %+v, want c2's recorded affinity in conflict", c)
			}
			// Once c2 syncs without its export, the import follows it.
			c2.synced = true
			f.sync(c2Key)
			f.sync(cartC1.ClusterSet())
			imp, _ = f.hubMCS.MulticlusterV1beta1().ServiceImports("shop").Get(f.ctx, "cart", metav1.GetOptions{})
			if len(imp.Status.Clusters) != 1 || len(imp.Spec.Ports) != 1 {
				t.Errorf("after c2 synced without its export: clusters %v, ports %v", imp.Status.Clusters, imp.Spec.Ports)
			}
		})
	}
}

// A name someone else's Service holds keeps its key parked on the conflict
// for as long as it is held, without writing; once it is free, the next
// sync takes it.
func TestSyncKeepsAForeignNameParkedUntilItIsFree(t *testing.T) {
	foreign := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart-c1"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}}}
	f := newFixture(t, Options{}, []runtime.Object{foreign}, nil)
	m := f.member("c1")
	_ = m.services.Add(service("shop", "cart"))
	var conflict *conflictError
	for i := range 2 {
		f.resetActions()
		if err := f.ctrl.sync(f.ctx, cartC1); !errors.As(err, &conflict) {
			t.Fatalf("sync %d: error = %v, want a conflict", i, err)
		}
		f.settle()
	}
	for _, w := range f.writes() {
		if strings.Contains(w, "cart-c1") {
			t.Errorf("a sync of a name known to be taken wrote %s", w)
		}
	}
	if err := f.hub.CoreV1().Services("shop").Delete(f.ctx, "cart-c1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.resetActions()
	if err := f.ctrl.sync(f.ctx, cartC1); err != nil {
		t.Fatalf("sync after the name was freed: %v", err)
	}
	if got := f.writes(); !slices.Contains(got, "create services shop/cart-c1") || !slices.Contains(got, "create endpoints shop/cart-c1") {
		t.Fatalf("after the name was freed the sync wrote %q", got)
	}
}

// A hub that cannot import a service (here its namespace is missing) leaves
// the exports' Ready condition alone: where every cluster is a hub, another
// daemon's Ready must not be fought with a Pending.
func TestSyncLeavesReadyAloneWhereTheHubCannotImport(t *testing.T) {
	f := newFixture(t, Options{Export: ExportPolicy{Mode: ExportServiceExport}, WriteExportStatus: true}, nil, nil)
	m := f.member("east")
	_ = m.services.Add(service("billing", "pay"))
	m.exports["billing/pay"] = &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "billing", Name: "pay", Generation: 1}}
	f.sync(Key{Cluster: "east", Namespace: "billing", Name: "pay"})
	conds := m.exports["billing/pay"].Status.Conditions
	if len(m.statusWrites) != 1 || meta.FindStatusCondition(conds, "Valid") == nil || meta.FindStatusCondition(conds, "Ready") != nil {
		t.Errorf("%d status writes, conditions %+v; want Valid alone", len(m.statusWrites), conds)
	}
}

// Slices written by a version that kept no export record (an upgrade) hold
// the merge: the import stays as it is, not withdrawn, until the member's
// sync rewrites its slices with the record and queues the clusterset key.
func TestSyncClusterSetWaitsForRecordsAfterAnUpgrade(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil)
	m := f.member("c1")
	_ = m.services.Add(service("shop", "cart"))
	m.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-abc", 0, 3, true)}
	f.sync(cartC1)
	f.sync(cartC1.ClusterSet())

	// Strip the record, as the previous version wrote the slice.
	s, err := f.hub.DiscoveryV1().EndpointSlices("shop").Get(f.ctx, sliceName(0), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(s.Annotations, endpoints.AnnotationExportRecord)
	if _, err := f.hub.DiscoveryV1().EndpointSlices("shop").Update(f.ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.settle()
	m.synced = false // the daemon restarted; c1 has not synced yet
	f.resetActions()
	f.sync(cartC1.ClusterSet())
	if got := f.writes(); len(got) != 0 {
		t.Fatalf("the merge wrote %q without c1's record", got)
	}

	m.synced = true
	f.sync(cartC1)
	if got := f.writes(); !reflect.DeepEqual(got, []string{"update endpointslices shop/" + sliceName(0)}) {
		t.Errorf("c1's sync wrote %q, want its slice rewritten with the record", got)
	}
	f.resetActions()
	f.sync(cartC1.ClusterSet())
	if got := f.writes(); len(got) != 0 {
		t.Errorf("with the record back the import needed %q", got)
	}
}

// Objects an earlier release wrote carry no digest: they are read in full
// and rewritten once, in place, with it and with no record of the earlier
// release's ownership; then nothing more is written.
func TestSyncAnnotatesObjectsWrittenWithoutTheirDigest(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil)
	m := f.member("c1")
	_ = m.services.Add(service("shop", "cart"))
	m.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-abc", 0, 3, true)}
	f.sync(cartC1)

	s, err := f.hub.DiscoveryV1().EndpointSlices("shop").Get(f.ctx, sliceName(0), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(s.Annotations, endpoints.AnnotationContent)
	asLegacy(s)
	if _, err := f.hub.DiscoveryV1().EndpointSlices("shop").Update(f.ctx, s, metav1.UpdateOptions{FieldManager: legacyFieldManager}); err != nil {
		t.Fatal(err)
	}
	eps, err := f.hub.CoreV1().Endpoints("shop").Get(f.ctx, "cart-c1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(eps.Annotations, endpoints.AnnotationContent)
	asLegacy(eps)
	if _, err := f.hub.CoreV1().Endpoints("shop").Update(f.ctx, eps, metav1.UpdateOptions{FieldManager: legacyFieldManager}); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.hub.DiscoveryV1().EndpointSlices("shop").Get(f.ctx, sliceName(0), metav1.GetOptions{}); !slices.ContainsFunc(got.ManagedFields,
		func(e metav1.ManagedFieldsEntry) bool { return e.Manager == legacyFieldManager }) {
		t.Fatalf("the fake records no managedFields: %v", got.ManagedFields)
	}
	f.settle()
	f.resetActions()
	f.sync(cartC1)
	want := []string{"update endpoints shop/cart-c1", "update endpointslices shop/" + sliceName(0)}
	if got := f.writes(); !reflect.DeepEqual(got, want) {
		t.Fatalf("writes:\n got %q\nwant %q", got, want)
	}
	s, _ = f.hub.DiscoveryV1().EndpointSlices("shop").Get(f.ctx, sliceName(0), metav1.GetOptions{})
	eps, _ = f.hub.CoreV1().Endpoints("shop").Get(f.ctx, "cart-c1", metav1.GetOptions{})
	if _, ok := endpoints.SliceDigestFromMeta(s.ObjectMeta); !ok {
		t.Errorf("the slice was rewritten without its digest: %v", s.Annotations)
	}
	if _, ok := endpoints.EndpointsDigestFromMeta(eps.ObjectMeta); !ok {
		t.Errorf("the Endpoints was rewritten without its digest: %v", eps.Annotations)
	}
	for _, m := range []metav1.Object{s, eps} {
		for _, e := range m.GetManagedFields() {
			if e.Manager != fieldManager {
				t.Errorf("%s still records %s as a manager: %v", m.GetName(), e.Manager, e.FieldsV1.GetRawString())
			}
		}
	}
	for _, r := range []string{resourceEndpoints, resourceEndpointSlice} {
		if n := testutil.ToFloat64(f.ctrl.metrics.HubFullReads.WithLabelValues(r)); n < 1 {
			t.Errorf("hub_full_reads_total{resource=%s} = %v, want the object read in full", r, n)
		}
	}
	f.settle()
	f.resetActions()
	f.sync(cartC1)
	if got := f.writes(); len(got) != 0 {
		t.Errorf("annotated, the objects were written again: %q", got)
	}
}

// asLegacy records an earlier release as the manager of all of o's fields,
// as if it had written o.
func asLegacy(o metav1.Object) {
	managed := o.GetManagedFields()
	for i := range managed {
		managed[i].Manager = legacyFieldManager
	}
	o.SetManagedFields(managed)
}
