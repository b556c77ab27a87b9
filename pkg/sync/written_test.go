package sync

import (
	"context"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	kubefake "k8s.io/client-go/kubernetes/fake"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"
)

// TestSyncReadsItsOwnWritesBeforeTheCacheSeesThem runs a controller whose hub
// caches never see a write (they are not started): each sync must build on
// what the previous one wrote, not on the empty cache, so nothing is created
// twice, updated from a stale copy or deleted twice.
func TestSyncReadsItsOwnWritesBeforeTheCacheSeesThem(t *testing.T) {
	ctx := context.Background()
	shop := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}
	f := &fixture{t: t, ctx: ctx, hub: kubefake.NewClientset(shop), hubMCS: mcsfake.NewSimpleClientset(),
		members: &fakeMembers{members: map[string]*fakeMember{}, synced: true}}
	ctrl, err := New(f.hub, f.hubMCS, f.members, Options{Export: ExportPolicy{Mode: ExportAll, Exclude: sets.New(DefaultExcludedNamespaces...)}, HubMetadata: metadataOf(f.hub)})
	if err != nil {
		t.Fatal(err)
	}
	_ = ctrl.caches.nsInf.GetStore().Add(shop)
	m := f.member("c1")
	_ = m.services.Add(service("shop", "cart"))
	m.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-abc", 0, 3, true)}

	step := func(name string, key Key, want []string) {
		t.Helper()
		f.resetActions()
		if err := ctrl.sync(ctx, key); err != nil {
			t.Fatalf("%s: sync: %v", name, err)
		}
		if got := f.writes(); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: writes\n got %q\nwant %q", name, got, want)
		}
	}
	step("first sync", cartC1, []string{
		"create endpoints shop/cart-c1",
		"create endpointslices shop/" + sliceName(0),
		"create services shop/cart-c1",
	})
	step("again", cartC1, nil)
	step("import", cartC1.ClusterSet(), []string{
		"create serviceimports shop/cart",
		"create services shop/" + endpoints.DerivedServiceName("shop", "cart"),
		"update serviceimports/status shop/cart",
	})
	step("import again", cartC1.ClusterSet(), nil)

	m.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-abc", 0, 4, true)}
	step("one more endpoint", cartC1, []string{
		"update endpoints shop/cart-c1",
		"update endpointslices shop/" + sliceName(0),
	})
	m.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-abc", 0, 5, true)}
	step("and another", cartC1, []string{
		"update endpoints shop/cart-c1",
		"update endpointslices shop/" + sliceName(0),
	})

	_ = m.services.Delete(service("shop", "cart"))
	step("service gone", cartC1, []string{
		"delete endpoints shop/cart-c1",
		"delete endpointslices shop/" + sliceName(0),
		"delete services shop/cart-c1",
	})
	step("gone again", cartC1, nil)
}

// wrote and deleted record a write that returned without racing events.
func wrote(w *written, resource string, obj hubObject) {
	w.begin(resource, obj)
	w.end(resource, obj, obj, false)
}

func deleted(w *written, resource string, obj hubObject) {
	w.begin(resource, obj)
	w.end(resource, obj, nil, true)
}

func TestWrittenIsForgottenOnceTheCacheCatchesUp(t *testing.T) {
	w := newWritten()
	now := time.Unix(0, 0)
	w.now = func() time.Time { return now }
	var requeued []Key
	drain := func() { requeued = append(requeued, requeuedIn(w)...) }
	svc := func(rv string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart-c1", ResourceVersion: rv, UID: "u1",
			Labels: map[string]string{endpoints.LabelSourceCluster: "c1", endpoints.LabelServiceName: "cart"}}}
	}
	tracked := func() bool {
		_, ok := w.get(resourceService, "shop", "cart-c1")
		return ok
	}

	wrote(w, resourceService, svc("2"))
	if w.seen(resourceService, svc("1"), false) || !tracked() {
		t.Fatal("an event older than the write was taken for its echo")
	}
	if !w.seen(resourceService, svc("2"), false) || tracked() {
		t.Fatal("the echo of the write was not recognised, or the write is still tracked")
	}
	if w.seen(resourceService, svc("3"), false) {
		t.Fatal("someone else's later write was taken for our echo")
	}

	deleted(w, resourceService, svc("2"))
	if o, ok := w.get(resourceService, "shop", "cart-c1"); !ok || o != nil {
		t.Fatalf("a deleted object reads as %v, %v", o, ok)
	}
	other := svc("2")
	other.UID = "u2"
	if w.seen(resourceService, other, true) {
		t.Fatal("the deletion of another object of that name was taken for the echo of ours")
	}
	if !w.seen(resourceService, svc("2"), true) || tracked() {
		t.Fatal("the echo of the delete was not recognised")
	}

	wrote(w, resourceService, svc("3"))
	w.expire()
	drain()
	if !tracked() || len(requeued) != 0 {
		t.Fatalf("a fresh write expired (requeued %v)", requeued)
	}
	now = now.Add(writtenTTL + time.Second)
	if tracked() {
		t.Fatal("a write whose event never came is trusted past the TTL")
	}
	// The expiry queues the owner: the cache may hold a change we never
	// saw an event for.
	w.expire()
	drain()
	if want := []Key{cartC1}; !reflect.DeepEqual(requeued, want) || w.len() != 0 {
		t.Fatalf("expiry queued %v and left %d entries, want %v and none", requeued, w.len(), want)
	}
}

// An event that arrives while the write it may echo is in flight is held
// back; once the write is done, only an event that was not its echo queues
// the owner.
func TestWrittenHoldsEventsRacingTheirWrite(t *testing.T) {
	w := newWritten()
	var requeued []Key
	drain := func() { requeued = append(requeued, requeuedIn(w)...) }
	svc := func(rv string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart-c1", ResourceVersion: rv,
			Labels: map[string]string{endpoints.LabelSourceCluster: "c1", endpoints.LabelServiceName: "cart"}}}
	}
	w.begin(resourceService, svc("4"))
	if !w.seen(resourceService, svc("5"), false) {
		t.Fatal("an event racing a write was not held")
	}
	w.end(resourceService, svc("4"), svc("5"), false)
	drain()
	if len(requeued) != 0 {
		t.Fatalf("the echo of a write queued its owner: %q", requeued)
	}

	w.begin(resourceService, svc("5"))
	w.seen(resourceService, svc("6"), false) // someone else's write
	w.end(resourceService, svc("5"), nil, false)
	drain()
	if len(requeued) != 1 {
		t.Fatalf("a foreign change held during a failed write was lost: requeued %q", requeued)
	}

	w.begin(resourceService, svc("6"))
	w.seen(resourceService, svc("6"), true)
	w.end(resourceService, svc("6"), nil, true)
	drain()
	if len(requeued) != 1 {
		t.Fatalf("the echo of a delete queued its owner: %q", requeued)
	}
	if w.seen(resourceService, svc("7"), false) {
		t.Fatal("an event after the write was held or taken for an echo")
	}
}

// A write whose echo arrives while it is in flight leaves no entry: the cache
// has it already, and a later change by someone else must be read from the
// cache, not shadowed by our copy.
func TestWrittenEchoedInFlightIsNotRecorded(t *testing.T) {
	w := newWritten()
	svc := func(rv string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart-c1", ResourceVersion: rv}}
	}
	tracked := func() bool {
		_, ok := w.get(resourceService, "shop", "cart-c1")
		return ok
	}
	w.begin(resourceService, svc("4"))
	w.seen(resourceService, svc("5"), false)
	w.end(resourceService, svc("4"), svc("5"), false)
	if tracked() {
		t.Fatal("a write echoed while in flight is still tracked")
	}
	if w.seen(resourceService, svc("6"), false) || tracked() {
		t.Fatal("someone else's later change was taken for ours or shadowed")
	}

	// Without an echo in flight the write is recorded until its echo.
	w.begin(resourceService, svc("6"))
	w.end(resourceService, svc("6"), svc("7"), false)
	if o, ok := w.get(resourceService, "shop", "cart-c1"); !ok || o.GetResourceVersion() != "7" {
		t.Fatalf("the write is not read back: %v, %v", o, ok)
	}
	if !w.seen(resourceService, svc("7"), false) || tracked() {
		t.Fatal("the echo after the write did not clear it")
	}

	// A delete echoed in flight leaves nothing either; one not yet echoed
	// reads as deleted.
	w.begin(resourceService, svc("7"))
	w.seen(resourceService, svc("7"), true)
	w.end(resourceService, svc("7"), nil, true)
	if tracked() {
		t.Fatal("a delete echoed in flight is still tracked")
	}
	w.begin(resourceService, svc("8"))
	w.end(resourceService, svc("8"), nil, true)
	if o, ok := w.get(resourceService, "shop", "cart-c1"); !ok || o != nil {
		t.Fatalf("a delete not yet echoed reads as %v, %v", o, ok)
	}
}

// A failed write (perhaps applied) during which the cache moved on drops
// what an earlier write left in the overlay: the cache is newer. So does a
// conflict (forget). Either way the readers of the entry are told.
func TestWrittenFailedWriteWhileTheCacheMovedBelievesTheCache(t *testing.T) {
	w := newWritten()
	var unshadowed []string
	drain := func() {
		for _, n := range w.takeNotices() {
			if u := n.unshadowed; u != nil {
				unshadowed = append(unshadowed, u.ref.name+"@"+u.entry.obj.GetResourceVersion())
			}
		}
	}
	imp := func(rv string) *mcsv1beta1.ServiceImport {
		return &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart", ResourceVersion: rv}}
	}
	read := func() string {
		if o, ok := w.get(resourceServiceImport, "shop", "cart"); ok {
			return o.GetResourceVersion()
		}
		return "cache"
	}
	// The spec update returns 7; the status update times out, applied as
	// 8, while the cache delivers 7 and 8.
	w.begin(resourceServiceImport, imp("6"))
	w.end(resourceServiceImport, imp("6"), imp("7"), false)
	w.begin(resourceServiceImport, imp("7"))
	w.seen(resourceServiceImport, imp("7"), false)
	w.seen(resourceServiceImport, imp("8"), false)
	w.end(resourceServiceImport, imp("7"), nil, false)
	drain()
	if got := read(); got != "cache" {
		t.Fatalf("after the failed write the overlay shadows the cache with %s", got)
	}
	if !reflect.DeepEqual(unshadowed, []string{"cart@7"}) {
		t.Errorf("unshadowed %q, want the entry at 7", unshadowed)
	}

	// A conflict drops the entry too.
	w.begin(resourceServiceImport, imp("8"))
	w.end(resourceServiceImport, imp("8"), imp("9"), false)
	w.forget(resourceServiceImport, "shop", "cart")
	drain()
	if got := read(); got != "cache" || !reflect.DeepEqual(unshadowed, []string{"cart@7", "cart@9"}) {
		t.Errorf("after forget: read %s, unshadowed %q", got, unshadowed)
	}
}

// requeuedIn returns the owners the tracker found to sync again.
func requeuedIn(w *written) []Key {
	var out []Key
	for _, n := range w.takeNotices() {
		if n.requeue != nil {
			out = append(out, *n.requeue)
		}
	}
	return out
}
