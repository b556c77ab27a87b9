package clusters

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	kubefake "k8s.io/client-go/kubernetes/fake"
)

// pagedServices serves n Services in pages, as an API server does, and
// records what each call asked for.
type pagedServices struct {
	n     int
	calls []metav1.ListOptions
}

func (p *pagedServices) list(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
	p.calls = append(p.calls, o)
	from := 0
	if o.Continue != "" {
		from, _ = strconv.Atoi(o.Continue)
	}
	to := p.n
	if o.Limit > 0 && from+int(o.Limit) < p.n {
		to = from + int(o.Limit)
	}
	l := &corev1.ServiceList{ListMeta: metav1.ListMeta{ResourceVersion: "7"}}
	for i := from; i < to; i++ {
		l.Items = append(l.Items, corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("s%d", i), Labels: map[string]string{"app": "x"}},
			Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "x"}},
		})
	}
	if to < p.n {
		l.Continue = strconv.Itoa(to)
	}
	return l, nil
}

// A bounded list reads pages and stops at the page that crosses the bound:
// a member with 2,000 Services under a bound of 1,200 is read three pages
// deep, never whole, and never from resourceVersion "0" (which the watch
// cache serves whole). Within the bound the caller gets every item, joined
// when it asked for no pages, and the list counts as complete.
func TestBoundedListStopsAtThePageThatCrossesTheBound(t *testing.T) {
	src := &pagedServices{n: 2000}
	b := newReadBound("Services", ReadBounds{Services: 1200})
	_, done, err := b.list(context.Background(), metav1.ListOptions{ResourceVersion: "0"}, src.list)
	if !errors.Is(err, errOverBounds) || done {
		t.Fatalf("list of 2000 under a bound of 1200: err %v, done %v; want over its bounds", err, done)
	}
	if len(src.calls) != 3 {
		t.Errorf("%d pages read, want 3 (500 + 500 + 500 crosses 1200)", len(src.calls))
	}
	for _, o := range src.calls {
		if o.ResourceVersion == "0" || o.Limit != listPageSize {
			t.Errorf("a page asked with resourceVersion %q, limit %d; want not \"0\", %d", o.ResourceVersion, o.Limit, listPageSize)
		}
	}

	src.calls = nil
	b = newReadBound("Services", ReadBounds{Services: 2000})
	obj, done, err := b.list(context.Background(), metav1.ListOptions{}, src.list)
	if err != nil || !done {
		t.Fatalf("list of 2000 under a bound of 2000: err %v, done %v", err, done)
	}
	if n := countItems(t, obj); n != 2000 {
		t.Errorf("joined list holds %d items, want 2000", n)
	}

	// A caller that pages (client-go's pager) gets its pages; the last
	// one completes the list.
	src.calls = nil
	o := metav1.ListOptions{Limit: 500}
	for page := 1; ; page++ {
		obj, done, err := b.list(context.Background(), o, src.list)
		if err != nil {
			t.Fatal(err)
		}
		cont := obj.(*corev1.ServiceList).Continue
		if done != (cont == "") {
			t.Fatalf("page %d: done %v with continue %q", page, done, cont)
		}
		if done {
			break
		}
		o.Continue = cont
	}

	// A list from a version (a relist) asks for no older, not that one.
	src.calls = nil
	if _, _, err := b.list(context.Background(), metav1.ListOptions{ResourceVersion: "42"}, src.list); err != nil {
		t.Fatal(err)
	}
	if o := src.calls[0]; o.ResourceVersion != "42" || o.ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan {
		t.Errorf("a relist from version 42 asked %q %q, want 42 NotOlderThan (a limit alone lists exactly 42, maybe long gone)", o.ResourceVersion, o.ResourceVersionMatch)
	}

	// No bound: the list is passed through as asked.
	src.calls = nil
	b = newReadBound("Services", ReadBounds{})
	if _, _, err := b.list(context.Background(), metav1.ListOptions{ResourceVersion: "0"}, src.list); err != nil || len(src.calls) != 1 || src.calls[0].ResourceVersion != "0" {
		t.Errorf("unbounded list: err %v, calls %+v; want one call as asked", err, src.calls)
	}
}

// A bounded list strips each page as it comes, as the informer's transform
// would, so a list read in pages never holds more than one page of the
// member's objects as sent; the caller still gets every item.
func TestBoundedListStripsEachPage(t *testing.T) {
	src := &pagedServices{n: 1200}
	b := newReadBound("Services", ReadBounds{Services: 2000})
	b.strip = stripMemberObject
	obj, done, err := b.list(context.Background(), metav1.ListOptions{}, src.list)
	if err != nil || !done {
		t.Fatalf("err %v, done %v", err, done)
	}
	n := 0
	err = meta.EachListItem(obj, func(item runtime.Object) error {
		svc, ok := item.(*corev1.Service)
		if !ok || svc.Labels != nil || svc.Spec.Selector != nil {
			return fmt.Errorf("item %d: %T %+v, want a projected Service", n, item, item)
		}
		n++
		return nil
	})
	if err != nil || n != 1200 {
		t.Fatalf("%d items (%v), want 1200 projected Services", n, err)
	}
	// A caller that pages gets each page stripped, with its continue token.
	page, _, err := b.list(context.Background(), metav1.ListOptions{Limit: 500}, src.list)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := meta.ListAccessor(page); err != nil || m.GetContinue() != "500" || meta.LenList(page) != 500 {
		t.Errorf("first page: %v, continue %q, %d items; want 500 and a continue token", err, m.GetContinue(), meta.LenList(page))
	}
}

func countItems(t *testing.T, obj runtime.Object) int {
	t.Helper()
	n := 0
	if err := meta.EachListItem(obj, func(runtime.Object) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// Endpoints, not slices, count against the endpoints bound.
func TestSlicesCountTheirEndpoints(t *testing.T) {
	slice := func(n int) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4}
		for i := range n {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.0.0.%d", i+1)}})
		}
		return s
	}
	b := newReadBound("EndpointSlices", ReadBounds{Endpoints: 250})
	l := &discoveryv1.EndpointSliceList{Items: []discoveryv1.EndpointSlice{*slice(100), *slice(100)}}
	if err := b.page(metav1.ListOptions{}, l); err != nil {
		t.Errorf("200 endpoints under 250: %v", err)
	}
	l.Items = append(l.Items, *slice(51))
	if err := b.page(metav1.ListOptions{}, l); !errors.Is(err, errOverBounds) {
		t.Errorf("251 endpoints under 250: %v, want over its bounds", err)
	}
}

// A watch ends with an error at the event that crosses the bound: while
// it streams its initial list, counting what it added; after that,
// counting what the store holds. Deletes always pass.
func TestBoundedWatchEndsAtTheEventThatCrossesTheBound(t *testing.T) {
	svc := func(name string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	}
	end := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	type step struct {
		ev      watch.Event
		wantErr bool
	}
	for _, tc := range []struct {
		name      string
		streaming bool
		held      int64
		steps     []step
	}{
		{"streamed initial list", true, 0, []step{
			{watch.Event{Type: watch.Added, Object: svc("a")}, false},
			{watch.Event{Type: watch.Added, Object: svc("b")}, false},
			{watch.Event{Type: watch.Added, Object: svc("c")}, true},
		}},
		{"after the initial list", true, 2, []step{
			{watch.Event{Type: watch.Bookmark, Object: end}, false},
			{watch.Event{Type: watch.Deleted, Object: svc("a")}, false},
			{watch.Event{Type: watch.Added, Object: svc("c")}, true},
		}},
		{"after a list", false, 1, []step{
			{watch.Event{Type: watch.Added, Object: svc("b")}, false},
		}},
		{"a change at the bound", false, 2, []step{
			{watch.Event{Type: watch.Modified, Object: svc("b")}, false},
			{watch.Event{Type: watch.Added, Object: svc("c")}, true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newReadBound("Services", ReadBounds{Services: 2})
			b.held.Store(tc.held)
			inner := watch.NewFake()
			var reported, within int
			w := b.watch(inner, tc.streaming, func(err error) {
				if !errors.Is(err, errOverBounds) {
					t.Errorf("reported %v, want over its bounds", err)
				}
				reported++
			}, func() { within++ })
			defer w.Stop()
			wantReported := 0
			for i, s := range tc.steps {
				go inner.Action(s.ev.Type, s.ev.Object)
				got := <-w.ResultChan()
				if s.wantErr {
					wantReported++
					if got.Type != watch.Error || apierrors.FromObject(got.Object).(apierrors.APIStatus).Status().Code != http.StatusRequestEntityTooLarge {
						t.Errorf("step %d: %s %T, want a 413 error", i, got.Type, got.Object)
					}
				} else if got.Type != s.ev.Type {
					t.Errorf("step %d: %s, want %s passed on", i, got.Type, s.ev.Type)
				}
			}
			if reported != wantReported {
				t.Errorf("reported %d times, want %d", reported, wantReported)
			}
			if tc.name == "after the initial list" && within != 1 {
				t.Errorf("the initial list's end within the bound told %d times, want once", within)
			}
		})
	}
}

// A member over its read bounds is not read past them: its informers do not
// sync, its failure and its probe say OverBounds; once it is back within
// them, a list succeeds and its probe passes again.
func TestMemberOverItsReadBoundsFailsItsProbeUntilBackWithin(t *testing.T) {
	var objs []runtime.Object
	for i := range 10 {
		objs = append(objs, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("s%d", i)}})
	}
	kube := kubefake.NewClientset(objs...)
	c, err := newCluster("east", "h", "", Clients{Kube: kube}, EventHandlers{}, ReadBounds{Services: 5, Endpoints: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer c.shutdown()
	if c.start(200*time.Millisecond, func() {}, func() {}) {
		t.Fatal("a member over its bounds synced")
	}
	waitUntil(t, func() bool { f := c.Failure(); return f != nil && f.Class == ClassOverBounds })
	if err := c.probe(time.Second); Classify(err) != ClassOverBounds {
		t.Fatalf("probe: %v, want OverBounds", err)
	}
	for i := range 6 {
		if err := kube.CoreV1().Services("ns").Delete(context.Background(), fmt.Sprintf("s%d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The reflector lists again after its backoff (about a second at first).
	waitUntil(t, func() bool { return c.probe(time.Second) == nil })
	// The probe passes once the list is read within the bounds, a moment
	// before the reflector has stored it.
	waitUntil(t, c.informers.Load().services.HasSynced)
	if n := c.informers.Load().services.LastSyncResourceVersion(); n == "" {
		t.Error("the Service informer never completed a list after the member came back within its bounds")
	}
}
