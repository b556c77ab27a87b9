package sync

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	kubefake "k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

// fakeMember is a member whose caches the test fills directly.
type fakeMember struct {
	synced   bool
	services cache.Indexer
	slices   []*discoveryv1.EndpointSlice
	exports  map[string]*mcsv1beta1.ServiceExport
	// downSince is when the member became unreachable; zero: reachable.
	downSince time.Time
	// statusWrites lists the ServiceExports whose conditions were written.
	statusWrites []string
	// registered and allowed are its registration's time and allowed
	// ranges (lifecycle.State).
	registered time.Time
	allowed    []netip.Prefix
	// phase overrides the phase synced implies when set; cause and why
	// are the lifecycle State's Cause and Reason; elsewhere: not owned.
	phase      lifecycle.Phase
	cause, why string
	elsewhere  bool
}

func newFakeMember() *fakeMember {
	return &fakeMember{
		synced:   true,
		services: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		exports:  map[string]*mcsv1beta1.ServiceExport{},
	}
}

func (m *fakeMember) HasSynced() bool    { return m.synced }
func (m *fakeMember) SyncTimedOut() bool { return !m.synced }
func (m *fakeMember) state() lifecycle.State {
	st := lifecycle.State{Phase: lifecycle.Connected, Owned: true, RegisteredAt: m.registered}
	st.Policy.AllowedEndpoints = m.allowed
	if m.synced {
		st.Phase = lifecycle.Synced
	}
	if !m.downSince.IsZero() {
		st.Unreachable, st.Since = true, m.downSince
	}
	if m.phase != lifecycle.Unregistered {
		st.Phase = m.phase
	}
	st.Cause, st.Reason, st.Owned = m.cause, m.why, !m.elsewhere
	return st
}
func (m *fakeMember) ServiceLister() corelisters.ServiceLister {
	return corelisters.NewServiceLister(m.services)
}

// EndpointSlices projects the member's slices, as the informers' transform
// does for the daemon's caches.
func (m *fakeMember) EndpointSlices(ns, svc string) ([]*endpoints.MemberSlice, error) {
	var out []*endpoints.MemberSlice
	for _, s := range m.slices {
		if s.Namespace == ns && s.Labels[discoveryv1.LabelServiceName] == svc {
			out = append(out, endpoints.ProjectSlice(s))
		}
	}
	return out, nil
}
func (m *fakeMember) ServiceExport(ns, name string) *mcsv1beta1.ServiceExport {
	return m.exports[ns+"/"+name]
}
func (m *fakeMember) ServiceExports() ([]*mcsv1beta1.ServiceExport, error) {
	out := make([]*mcsv1beta1.ServiceExport, 0, len(m.exports))
	for _, se := range m.exports {
		out = append(out, se)
	}
	return out, nil
}
func (m *fakeMember) PatchServiceExportConditions(_ context.Context, se *mcsv1beta1.ServiceExport, conds []metav1.Condition) error {
	m.statusWrites = append(m.statusWrites, se.Namespace+"/"+se.Name)
	upd := se.DeepCopy()
	upd.Status.Conditions = conds
	m.exports[se.Namespace+"/"+se.Name] = upd
	return nil
}

// testMember is a test member that knows its lifecycle state.
type testMember interface {
	Member
	state() lifecycle.State
}

// memberSet is a member registry of test members. unconnected holds the
// members registered without a connection.
type memberSet[M testMember] struct {
	members     map[string]M
	unconnected map[string]lifecycle.State
	synced      bool
}

func (s *memberSet[M]) Lookup(name string) (lifecycle.State, Member) {
	if m, ok := s.members[name]; ok {
		return m.state(), m
	}
	if st, ok := s.unconnected[name]; ok {
		return st, nil
	}
	return lifecycle.State{}, nil
}

func (s *memberSet[M]) Names() []string {
	out := make([]string, 0, len(s.members)+len(s.unconnected))
	for n := range s.members {
		out = append(out, n)
	}
	for n := range s.unconnected {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (s *memberSet[M]) SecretsSynced() bool { return s.synced }

type fakeMembers = memberSet[*fakeMember]

// fixture is a controller on fake hub clients with fake members.
type fixture struct {
	t       *testing.T
	ctx     context.Context
	hub     *kubefake.Clientset
	hubMCS  *mcsfake.Clientset
	members *fakeMembers
	ctrl    *Controller
}

func newFixture(t *testing.T, opts Options, hubObjects []runtime.Object, importObjects []runtime.Object) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	objs := append([]runtime.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}}, hubObjects...)
	f := &fixture{
		t:       t,
		ctx:     ctx,
		hub:     kubefake.NewClientset(objs...),
		hubMCS:  mcsfake.NewSimpleClientset(importObjects...),
		members: &fakeMembers{members: map[string]*fakeMember{}, synced: true},
	}
	if opts.Export.Mode == "" {
		opts.Export = ExportPolicy{Mode: ExportAll, Exclude: sets.New(DefaultExcludedNamespaces...)}
	}
	if opts.HubMetadata == nil {
		opts.HubMetadata = metadataOf(f.hub)
	}
	ctrl, err := New(f.hub, f.hubMCS, f.members, opts)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl = ctrl
	ctrl.StartInformers(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), ctrl.HubSynced) {
		t.Fatal("hub caches did not sync")
	}
	// The test syncs keys itself, as the workers of a running controller
	// would: its events are queued as a running controller queues them.
	ctrl.queue.start()
	return f
}

func (f *fixture) member(name string) *fakeMember {
	m := newFakeMember()
	f.members.members[name] = m
	return m
}

// writes returns the hub write actions recorded since the last reset, as
// "verb resource[/subresource] namespace/name" strings.
func (f *fixture) writes() []string {
	var out []string
	for _, cs := range []interface{ Actions() []clienttesting.Action }{f.hub, f.hubMCS} {
		for _, a := range cs.Actions() {
			switch a.GetVerb() {
			case "get", "list", "watch":
				continue
			}
			res := a.GetResource().Resource
			if sub := a.GetSubresource(); sub != "" {
				res += "/" + sub
			}
			name := ""
			switch act := a.(type) {
			case clienttesting.CreateAction: // an UpdateAction too
				m, _ := metaOf(act.GetObject())
				name = m.GetName()
			case clienttesting.DeleteAction:
				name = act.GetName()
			}
			out = append(out, fmt.Sprintf("%s %s %s/%s", a.GetVerb(), res, a.GetNamespace(), name))
		}
	}
	sort.Strings(out)
	return out
}

func (f *fixture) resetActions() {
	f.hub.ClearActions()
	f.hubMCS.ClearActions()
}

// syncAndSettle runs one sync, then waits until the hub caches hold what the
// fake API server holds, so a following sync sees its own writes.
func (f *fixture) sync(key Key) {
	f.t.Helper()
	if err := f.ctrl.sync(f.ctx, key); err != nil {
		f.t.Fatalf("sync %s: %v", key, err)
	}
	f.settle()
}

func (f *fixture) settle() {
	f.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if f.cachesMatch() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.t.Fatal("hub caches did not catch up with the fake API server")
}

// quietFor is how long the queue must stay as it is for the informers'
// handlers to count as done: a hub cache holds an object a moment before
// its handlers (which queue keys) have seen it.
const quietFor = 200 * time.Millisecond

// quiesce empties the queue until nothing more arrives in it, so that the
// keys queued late by earlier writes are gone.
func (f *fixture) quiesce() {
	f.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for f.ctrl.queue.wq.Len() > 0 {
			k, _ := f.ctrl.queue.wq.Get()
			f.ctrl.queue.wq.Done(k)
		}
		time.Sleep(quietFor)
		if f.ctrl.queue.wq.Len() == 0 {
			return
		}
	}
	f.t.Fatal("the queue did not stay empty")
}

// queuedWhenQuiet waits until the queue has stopped growing, then takes
// every key in it, in order.
func (f *fixture) queuedWhenQuiet() []Key {
	f.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for n := -1; n != f.ctrl.queue.wq.Len(); {
		if time.Now().After(deadline) {
			f.t.Fatal("the queue did not stop growing")
		}
		n = f.ctrl.queue.wq.Len()
		time.Sleep(quietFor)
	}
	var keys []Key
	for f.ctrl.queue.wq.Len() > 0 {
		k, _ := f.ctrl.queue.wq.Get()
		f.ctrl.queue.wq.Done(k)
		keys = append(keys, k)
	}
	return keys
}

func (f *fixture) cachesMatch() bool {
	ours := metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=endpoint-aggregator"}
	svcs, _ := f.hub.CoreV1().Services("").List(f.ctx, ours)
	eps, _ := f.hub.CoreV1().Endpoints("").List(f.ctx, ours)
	sl, _ := f.hub.DiscoveryV1().EndpointSlices("").List(f.ctx, metav1.ListOptions{LabelSelector: "endpointslice.kubernetes.io/managed-by=endpoint-aggregator.io"})
	imps, _ := f.hubMCS.MulticlusterV1beta1().ServiceImports("").List(f.ctx, ours)
	var want []runtime.Object
	for i := range svcs.Items {
		want = append(want, &svcs.Items[i])
	}
	for i := range eps.Items {
		want = append(want, &eps.Items[i])
	}
	for i := range sl.Items {
		want = append(want, &sl.Items[i])
	}
	for i := range imps.Items {
		want = append(want, &imps.Items[i])
	}
	stores := map[string]cache.Store{
		"Service": f.ctrl.caches.serviceInf.GetStore(), "Endpoints": f.ctrl.caches.endpointInf.GetStore(),
		"EndpointSlice": f.ctrl.caches.sliceInf.GetStore(), "ServiceImport": f.ctrl.caches.importInf.GetStore(),
	}
	total := 0
	for _, s := range stores {
		total += len(s.List())
	}
	if total != len(want) {
		return false
	}
	for _, o := range want {
		kind := reflect.TypeOf(o).Elem().Name()
		cached, ok, _ := stores[kind].Get(o)
		exp := digestRead(normalized(o))
		if !ok || !apiequality.Semantic.DeepEqual(normalized(cached.(runtime.Object)), exp) {
			return false
		}
	}
	return true
}

// normalized drops what differs between a watched and a listed object.
func normalized(o runtime.Object) runtime.Object {
	o = o.DeepCopyObject()
	o.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	m, _ := metaOf(o)
	m.SetManagedFields(nil)
	return o
}

func service(ns, name string, ports ...corev1.ServicePort) *corev1.Service {
	if len(ports) == 0 {
		ports = []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(time.Unix(1000, 0))},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.10", Ports: ports},
	}
}

// memberSlice returns a member slice of ns/svc with n IPv4 endpoints from base.
func memberSlice(ns, svc, name string, base, n int, ready bool) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for i := 0; i < n; i++ {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", (base+i)/65536%256, (base+i)/256%256, (base+i)%256)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(false)},
			NodeName:   ptr.To("node-1"),
			Zone:       ptr.To("zone-a"),
		})
	}
	return s
}
