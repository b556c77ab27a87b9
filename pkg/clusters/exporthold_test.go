package clusters

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"
)

// fastExportHold shortens the waits of the export source for a test.
func fastExportHold(t *testing.T) {
	oldEvery, oldConfirm, oldHold := exportRediscover, deletionConfirm, exportHold
	exportRediscover, deletionConfirm, exportHold = 20*time.Millisecond, 50*time.Millisecond, time.Hour
	t.Cleanup(func() { exportRediscover, deletionConfirm, exportHold = oldEvery, oldConfirm, oldHold })
}

func v1beta1Export(namespace, name string, labels map[string]string) *mcsv1beta1.ServiceExport {
	return &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels}}
}

// TestDeletingTheServiceExportCRDHoldsItsExports: the exports a CRD's
// deletion deletes stay in the member's cache while no version is served,
// then, once it is served again, until re-created or until the hold ends;
// what was not re-created is withdrawn then.
func TestDeletingTheServiceExportCRDHoldsItsExports(t *testing.T) {
	fastExportHold(t)
	ctx := context.Background()
	mcs := mcsfake.NewSimpleClientset(v1beta1Export("shop", "web", nil), v1beta1Export("shop", "api", nil))
	d := &servedVersions{}
	d.set("v1beta1")
	c := startExportMember(t, mcs, d)
	cached := func(name string) bool { return c.ServiceExport("shop", name) != nil }
	if !cached("web") || !cached("api") {
		t.Fatal("exports not read")
	}

	// The CRD is deleted: its API server deletes every export.
	d.setTerminating()
	for _, name := range []string{"web", "api"} {
		if err := mcs.MulticlusterV1beta1().ServiceExports("shop").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, func() bool {
		f := c.Failure()
		return f != nil && strings.Contains(f.Message, "no longer serves ServiceExport")
	})
	d.set() // gone
	time.Sleep(10 * exportRediscover)
	if !cached("web") || !cached("api") {
		t.Fatalf("while the CRD is deleted: web %v, api %v cached; want both held", cached("web"), cached("api"))
	}

	// Served again, with nothing in it: a complete list holds no export,
	// and withdraws none while held.
	src := c.informers.Load().exportSrc
	d.set("v1beta1")
	waitUntil(t, func() bool { return src.heldUntil().After(time.Now()) })
	time.Sleep(10 * exportRediscover)
	if !cached("web") || !cached("api") {
		t.Fatalf("once served again: web %v, api %v cached; want both held", cached("web"), cached("api"))
	}
	if err := c.PatchServiceExportConditions(ctx, c.ServiceExport("shop", "api"), nil); err != nil {
		t.Fatalf("status of a held export: %v", err)
	}
	if p := exportActions(mcs, "patch"); len(p) != 0 {
		t.Fatalf("status of a held export written to the member: %v", p)
	}

	// web is applied again: the member's own object replaces the held one.
	if _, err := mcs.MulticlusterV1beta1().ServiceExports("shop").Create(ctx, v1beta1Export("shop", "web", map[string]string{"again": "yes"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { se := c.ServiceExport("shop", "web"); return se != nil && se.Labels["again"] == "yes" })

	// The hold ends: api, never re-created, is withdrawn; web stays.
	src.endHold()
	waitUntil(t, func() bool { return !cached("api") })
	if !cached("web") || src.isHeld("shop", "web") {
		t.Fatalf("after the hold: web cached %v, held %v; want the member's own", cached("web"), src.isHeld("shop", "web"))
	}
}

// TestUnexportingWhileTheCRDIsServedWithdraws: a ServiceExport deleted by
// its owner, its CRD still served, is withdrawn and nothing is held.
func TestUnexportingWhileTheCRDIsServedWithdraws(t *testing.T) {
	fastExportHold(t)
	mcs := mcsfake.NewSimpleClientset(v1beta1Export("shop", "web", nil), v1beta1Export("shop", "api", nil))
	d := &servedVersions{}
	d.set("v1beta1")
	c := startExportMember(t, mcs, d)
	if err := mcs.MulticlusterV1beta1().ServiceExports("shop").Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return c.ServiceExport("shop", "web") == nil })
	if c.ServiceExport("shop", "api") == nil || c.informers.Load().exportSrc.held != nil {
		t.Fatalf("after an unexport: api cached %v, held %+v; want api, nothing held", c.ServiceExport("shop", "api") != nil, c.informers.Load().exportSrc.held)
	}
}

// heldUntil is when s lets its held exports go; zero if none are held or
// no version is served.
func (s *exportSource) heldUntil() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		return time.Time{}
	}
	return s.held.until
}

// endHold lets s's held exports go now.
func (s *exportSource) endHold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held.until = time.Now()
}

// TestHeldExportsJoinThePagedListOnce: the held exports a list lacks are
// added once, to its last page; one on any page is no longer held.
func TestHeldExportsJoinThePagedListOnce(t *testing.T) {
	held := map[types.NamespacedName]*mcsv1beta1.ServiceExport{}
	for _, name := range []string{"web", "api", "db"} {
		held[types.NamespacedName{Namespace: "shop", Name: name}] = v1beta1Export("shop", name, map[string]string{"held": "yes"})
	}
	s := &exportSource{held: &heldExports{exports: held}}
	names := func(l *mcsv1beta1.ServiceExportList) (out []string) {
		for _, se := range l.Items {
			out = append(out, se.Name+"/"+se.Labels["held"])
		}
		return out
	}
	first := s.withHeld(context.Background(), &mcsv1beta1.ServiceExportList{ListMeta: metav1.ListMeta{Continue: "next"},
		Items: []mcsv1beta1.ServiceExport{*v1beta1Export("shop", "web", nil)}})
	last := s.withHeld(context.Background(), &mcsv1beta1.ServiceExportList{
		Items: []mcsv1beta1.ServiceExport{*v1beta1Export("shop", "db", nil)}})
	if got := names(first); !slices.Equal(got, []string{"web/"}) {
		t.Errorf("first page: %v, want the member's web alone", got)
	}
	if got := names(last); !slices.Equal(got, []string{"db/", "api/yes"}) {
		t.Errorf("last page: %v, want the member's db, then the held api", got)
	}
	if s.isHeld("shop", "web") || s.isHeld("shop", "db") || !s.isHeld("shop", "api") || s.heldUntil().IsZero() {
		t.Errorf("held after the list: web %v, db %v, api %v, until %v; want api alone, with an end",
			s.isHeld("shop", "web"), s.isHeld("shop", "db"), s.isHeld("shop", "api"), s.heldUntil())
	}
}
