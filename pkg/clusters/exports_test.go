package clusters

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

// servedVersions is a member's discovery of the multicluster group: the
// ServiceExport versions it serves, which a test may change.
type servedVersions struct {
	mu       sync.Mutex
	versions []string
	// terminating: the CRD is being deleted, its resource listed without
	// create, as the API server then lists it.
	terminating bool
}

func (d *servedVersions) setTerminating() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.terminating = true
}

func (d *servedVersions) set(v ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.versions, d.terminating = v, false
}

func (d *servedVersions) ServerResourcesForGroupVersionWithContext(_ context.Context, gv string) (*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, v := range d.versions {
		if gv == mcsv1beta1.GroupName+"/"+v {
			r := metav1.APIResource{Name: "serviceexports", Namespaced: true, Kind: "ServiceExport"}
			if d.terminating {
				r.Verbs = metav1.Verbs{"delete", "deletecollection", "get", "list", "watch"}
			}
			return &metav1.APIResourceList{GroupVersion: gv, APIResources: []metav1.APIResource{r}}, nil
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{}, "")
}

// startExportMember starts a member whose discovery is d and whose
// ServiceExports are mcs, and waits for it to sync.
func startExportMember(t *testing.T, mcs *mcsfake.Clientset, d Discovery) *Cluster {
	t.Helper()
	c, err := newCluster("east", "h", "", Clients{Kube: kubefake.NewClientset(), MCS: mcs, Discovery: d}, EventHandlers{}, ReadBounds{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.shutdown)
	if !c.start(10*time.Second, func() {}, func() {}) {
		t.Fatal("member did not sync")
	}
	return c
}

// exportActions are the versions of mcs's ServiceExport actions of verb.
func exportActions(mcs *mcsfake.Clientset, verb string) []string {
	var out []string
	for _, a := range mcs.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == "serviceexports" {
			out = append(out, a.GetResource().Version)
		}
	}
	return out
}

// TestMemberServingServiceExportsAsV1alpha1OnlyIsReadAndWrittenInV1alpha1:
// the ServiceExports of a member whose CRD serves v1alpha1 only are read in
// v1alpha1, held as v1beta1, and their conditions patched in v1alpha1.
func TestMemberServingServiceExportsAsV1alpha1OnlyIsReadAndWrittenInV1alpha1(t *testing.T) {
	mcs := mcsfake.NewSimpleClientset(&mcsv1alpha1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", ResourceVersion: "7"},
		Spec: mcsv1alpha1.ServiceExportSpec{ExportedLabels: map[string]string{"tier": "front"}}})
	d := &servedVersions{}
	d.set("v1alpha1")
	c := startExportMember(t, mcs, d)

	if v := c.ExportVersion(); v != ExportV1alpha1 {
		t.Fatalf("ExportVersion = %q, want v1alpha1", v)
	}
	se := c.ServiceExport("shop", "web")
	if se == nil || se.Spec.ExportedLabels["tier"] != "front" {
		t.Fatalf("cached export = %+v, want shop/web with its exportedLabels", se)
	}
	lists := exportActions(mcs, "list")
	if len(lists) == 0 {
		t.Fatal("no ServiceExport list")
	}
	for _, v := range lists {
		if v != "v1alpha1" {
			t.Fatalf("ServiceExports listed in versions %v, want v1alpha1 only", lists)
		}
	}
	mcs.ClearActions()
	cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Exported", LastTransitionTime: metav1.Now()}
	if err := c.PatchServiceExportConditions(context.Background(), se, []metav1.Condition{cond}); err != nil {
		t.Fatal(err)
	}
	if got := exportActions(mcs, "patch"); len(got) != 1 || got[0] != "v1alpha1" {
		t.Fatalf("status patches in versions %v, want one in v1alpha1", got)
	}
	live, err := mcs.MulticlusterV1alpha1().ServiceExports("shop").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(live.Status.Conditions) != 1 || live.Status.Conditions[0].Reason != "Exported" {
		t.Fatalf("v1alpha1 conditions = %+v, want the patched Ready", live.Status.Conditions)
	}
}

// TestMemberServingNoServiceExportSyncsWithNothingExported: a member
// without the ServiceExport CRD syncs, with no exports and no failure, and
// is never asked for ServiceExports.
func TestMemberServingNoServiceExportSyncsWithNothingExported(t *testing.T) {
	mcs := mcsfake.NewSimpleClientset()
	mcs.PrependReactor("*", "serviceexports", func(clienttesting.Action) (bool, runtime.Object, error) {
		t.Error("a member serving no ServiceExport was asked for them")
		return false, nil, nil
	})
	c := startExportMember(t, mcs, &servedVersions{})

	if v := c.ExportVersion(); v != ExportNotServed {
		t.Fatalf("ExportVersion = %q, want %q", v, ExportNotServed)
	}
	if list, err := c.ServiceExports(); err != nil || len(list) != 0 {
		t.Fatalf("ServiceExports = %v, %v; want none", list, err)
	}
	if f := c.Failure(); f != nil {
		t.Fatalf("member fails: %+v", f)
	}
	if st := (&member{active: c}).state(); st.Phase != lifecycle.Synced || st.ExportVersion != lifecycle.ExportNotServed || st.Cause != "" {
		t.Fatalf("state = %+v, want synced, serving none, no cause", st)
	}
}

// TestMemberExportInformerFollowsTheServedVersion: when the member's CRD
// changes what it serves, the informer lists again in the new version,
// with no restart: none → v1alpha1 → v1beta1.
func TestMemberExportInformerFollowsTheServedVersion(t *testing.T) {
	old := exportRediscover
	exportRediscover = 20 * time.Millisecond
	defer func() { exportRediscover = old }()

	mcs := mcsfake.NewSimpleClientset(&mcsv1alpha1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}})
	d := &servedVersions{}
	c := startExportMember(t, mcs, d)
	if c.ExportVersion() != ExportNotServed || c.ServiceExport("shop", "web") != nil {
		t.Fatalf("before the CRD: version %q, export %v", c.ExportVersion(), c.ServiceExport("shop", "web"))
	}

	d.set("v1alpha1")
	waitUntil(t, func() bool { return c.ExportVersion() == ExportV1alpha1 && c.ServiceExport("shop", "web") != nil })

	// The fake's tracker keeps versions apart: v1beta1 has its own copy,
	// as a migrated CRD's storage would serve it.
	if _, err := mcs.MulticlusterV1beta1().ServiceExports("shop").Create(context.Background(),
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Labels: map[string]string{"read": "v1beta1"}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d.set("v1beta1", "v1alpha1")
	waitUntil(t, func() bool {
		se := c.ServiceExport("shop", "web")
		return c.ExportVersion() == ExportV1beta1 && se != nil && se.Labels["read"] == "v1beta1"
	})
	if f := c.Failure(); f != nil {
		t.Fatalf("member fails after the version changes: %+v", f)
	}
}

// TestMemberThatStopsServingServiceExportsKeepsItsExports: a member whose
// CRD goes away (replaced, or removed) keeps its last-known exports, its
// lists failing meanwhile; they are withdrawn only by a complete list of
// the version served next, once their hold (exporthold.go) has ended.
func TestMemberThatStopsServingServiceExportsKeepsItsExports(t *testing.T) {
	fastExportHold(t)
	exportHold = time.Second

	mcs := mcsfake.NewSimpleClientset(&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}})
	d := &servedVersions{}
	d.set("v1beta1")
	c := startExportMember(t, mcs, d)
	if c.ServiceExport("shop", "web") == nil {
		t.Fatal("export not read")
	}

	d.set()
	waitUntil(t, func() bool {
		f := c.Failure()
		return f != nil && strings.Contains(f.Message, "no longer serves ServiceExport")
	})
	if c.ServiceExport("shop", "web") == nil || c.ExportVersion() != ExportV1beta1 || !c.HasSynced() {
		t.Fatalf("while nothing is served: export %v, version %q, synced %v; want the last-known export, v1beta1, synced",
			c.ServiceExport("shop", "web"), c.ExportVersion(), c.HasSynced())
	}
	// A fresh informer set (the member answered again) lists none either.
	c.askReconnect()
	time.Sleep(300 * time.Millisecond)
	if c.ServiceExport("shop", "web") == nil {
		t.Fatal("a fresh informer set dropped the last-known export")
	}

	// The v1alpha1 copy of the fake holds no export: a complete list of
	// the version now served says it is gone, when the hold ends.
	d.set("v1alpha1")
	waitUntil(t, func() bool {
		return c.ExportVersion() == ExportV1alpha1 && !c.informers.Load().exportSrc.heldUntil().IsZero()
	})
	if c.ServiceExport("shop", "web") == nil {
		t.Fatal("the held export was withdrawn before its hold ended")
	}
	waitUntil(t, func() bool { return c.ServiceExport("shop", "web") == nil })
}

// TestAFailedListDuringAVersionChangeKeepsTheExports: while a member's CRD
// changes, a list in the newly served version that fails (a storage
// migration in flight) withdraws nothing; only a complete list does.
func TestAFailedListDuringAVersionChangeKeepsTheExports(t *testing.T) {
	old := exportRediscover
	exportRediscover = 20 * time.Millisecond
	defer func() { exportRediscover = old }()

	mcs := mcsfake.NewSimpleClientset(
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}},
		&mcsv1alpha1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}},
	)
	var failing atomic.Bool
	failing.Store(true)
	mcs.PrependReactor("list", "serviceexports", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetResource().Version == "v1alpha1" && failing.Load() {
			return true, nil, apierrors.NewServiceUnavailable("storage migration in flight")
		}
		return false, nil, nil
	})
	d := &servedVersions{}
	d.set("v1beta1")
	c := startExportMember(t, mcs, d)
	if c.ServiceExport("shop", "web") == nil {
		t.Fatal("export not read")
	}

	d.set("v1alpha1")
	waitUntil(t, func() bool { return slices.Contains(exportActions(mcs, "list"), "v1alpha1") })
	time.Sleep(200 * time.Millisecond) // what a list returns reaches the cache
	if c.ServiceExport("shop", "web") == nil {
		t.Fatal("a failed list of the newly served version withdrew the export")
	}
	waitUntil(t, func() bool {
		f := c.Failure()
		return f != nil && strings.Contains(f.Message, "storage migration in flight")
	})
	failing.Store(false)
	waitUntil(t, func() bool { return c.ExportVersion() == ExportV1alpha1 })
	if c.ServiceExport("shop", "web") == nil {
		t.Fatal("the complete v1alpha1 list, which holds the export, withdrew it")
	}
}
