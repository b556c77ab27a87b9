package clusters

import (
	"context"
	"errors"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// TestMemberInformerLogsNameTheMember: what a member's informers log, such
// as a list refused with Unauthorized, carries the member's name.
func TestMemberInformerLogsNameTheMember(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	old := memberLogger
	memberLogger = func() logr.Logger {
		return funcr.New(func(prefix, args string) {
			mu.Lock()
			lines = append(lines, prefix+" "+args)
			mu.Unlock()
		}, funcr.Options{})
	}
	defer func() { memberLogger = old }()

	kube := kubefake.NewClientset()
	kube.PrependReactor("list", "services", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewUnauthorized("token revoked")
	})
	s, err := newInformerSet(context.Background(), "east", Clients{Kube: kube}, EventHandlers{}, nil, ReadBounds{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.run()
	defer s.shutdown()
	waitUntil(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range lines {
			if strings.Contains(l, "token revoked") && strings.Contains(l, `"cluster"="east"`) {
				return true
			}
		}
		return false
	})
}

// TestMemberSliceCacheHoldsProjections: the member informers' transform
// turns EndpointSlices into their projections, which the index, the event
// handlers and EndpointSlices see; a slice moved to another service moves
// in the index.
func TestMemberSliceCacheHoldsProjections(t *testing.T) {
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart-abc", ResourceVersion: "1",
			Labels:          map[string]string{discoveryv1.LabelServiceName: "cart", "team": "x"},
			Annotations:     map[string]string{corev1.EndpointsLastChangeTriggerTime: "2026-07-01T12:00:00Z", "other": "y"},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}},
			OwnerReferences: []metav1.OwnerReference{{Kind: "Service", Name: "cart"}}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
		Endpoints: []discoveryv1.Endpoint{{
			Addresses: []string{"10.1.0.1"}, NodeName: ptr.To("node-a"),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "cart-0"},
		}},
	}
	want := endpoints.ProjectSlice(sl)
	var mu sync.Mutex
	var seen []interface{}
	record := func(obj interface{}) { mu.Lock(); seen = append(seen, obj); mu.Unlock() }
	handler := cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, cur interface{}) { record(cur) }}
	kube := kubefake.NewClientset(sl.DeepCopy())
	c, err := newCluster("east", "h", "", Clients{Kube: kube}, EventHandlers{EndpointSlices: handler}, ReadBounds{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.shutdown()
	c.identity.letIn() // no probe runs here to read the About API
	if !c.start(10*time.Second, func() {}, func() {}) {
		t.Fatal("informers did not sync")
	}
	got, err := c.EndpointSlices("shop", "cart")
	if err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Fatalf("EndpointSlices = %+v, %v; want %+v", got, err, want)
	}
	mu.Lock()
	if len(seen) != 1 || !reflect.DeepEqual(seen[0], want) {
		t.Errorf("handler saw %+v, want the projection", seen)
	}
	mu.Unlock()

	moved := sl.DeepCopy()
	moved.Labels[discoveryv1.LabelServiceName] = "basket"
	moved.ResourceVersion = "2"
	if _, err := kube.DiscoveryV1().EndpointSlices("shop").Update(context.Background(), moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { got, _ := c.EndpointSlices("shop", "basket"); return len(got) == 1 })
	if got, _ := c.EndpointSlices("shop", "cart"); len(got) != 0 {
		t.Errorf("the moved slice is still indexed under its old service: %+v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if last, ok := seen[len(seen)-1].(*endpoints.MemberSlice); !ok || last.Labels[discoveryv1.LabelServiceName] != "basket" {
		t.Errorf("handler saw %+v last, want the moved projection", seen[len(seen)-1])
	}
}

// TestMemberListWatchReportsWhatAReflectorReports: a plain informer takes
// no watch error handler, so its ListerWatcher reports what a shared
// informer's reflector passed to one: failed lists, and watches that fail
// to start, but not those the reflector retries by itself (connection
// refused, 429) nor a streaming list request (the reflector lists
// instead). Each of those still marks the set failed; a watch's normal end
// and the errors of a stopping set do not.
func TestMemberListWatchReportsWhatAReflectorReports(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "", errors.New("no RBAC"))
	tooMany := apierrors.NewTooManyRequests("slow down", 1)
	expired := apierrors.NewResourceExpired("too old resource version")
	streaming := metav1.ListOptions{SendInitialEvents: ptr.To(true)}
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	_, refused := net.Dial("tcp", closedAddr(t))
	if refused == nil {
		t.Fatal("dialing a closed port succeeded")
	}
	for _, tc := range []struct {
		name       string
		ctx        context.Context
		list       bool
		opts       metav1.ListOptions
		err        error
		wantReport bool
		wantFailed bool
	}{
		{name: "list forbidden", list: true, err: forbidden, wantReport: true, wantFailed: true},
		{name: "list refused", list: true, err: refused, wantReport: true, wantFailed: true},
		{name: "list expired", list: true, err: expired},
		{name: "watch forbidden", err: forbidden, wantReport: true, wantFailed: true},
		{name: "watch refused", err: refused, wantFailed: true},
		{name: "watch 429", err: tooMany, wantFailed: true},
		{name: "streaming list forbidden", opts: streaming, err: forbidden, wantFailed: true},
		{name: "watch expired", err: expired},
		{name: "watch gone", err: apierrors.NewGone("gone")}, //nolint:staticcheck // a plain 410, as older servers send it
		{name: "list of a stopped set", ctx: stopped, list: true, err: forbidden},
		{name: "list ok", list: true},
		{name: "watch ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reported []error
			s := &informerSet{onError: func(err error) { reported = append(reported, err) }}
			lw := &memberListWatch{set: s, what: "Services", ListWatch: &cache.ListWatch{
				ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
					return &corev1.ServiceList{}, tc.err
				},
				WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
					if tc.err != nil {
						return nil, tc.err
					}
					return watch.NewEmptyWatch(), nil
				},
			}}
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			var err error
			if tc.list {
				_, err = lw.ListWithContext(ctx, tc.opts)
			} else {
				_, err = lw.WatchWithContext(ctx, tc.opts)
			}
			if !errors.Is(err, tc.err) {
				t.Errorf("returned %v, want %v unchanged", err, tc.err)
			}
			if got := len(reported) == 1; got != tc.wantReport || len(reported) > 1 {
				t.Errorf("reported %v, want a report: %v", reported, tc.wantReport)
			}
			if tc.wantReport && (!errors.Is(reported[0], tc.err) || !strings.Contains(reported[0].Error(), "Services")) {
				t.Errorf("reported %v, want %v naming what failed", reported[0], tc.err)
			}
			if s.failed.Load() != tc.wantFailed {
				t.Errorf("set failed %v, want %v", s.failed.Load(), tc.wantFailed)
			}
		})
	}
}

// TestMemberInformersCallTheirHandlerBeforeTheySync: the plain informers
// call their handler from their own process loop, so by the time a set has
// synced every object of the initial list reached its handler, and the
// listers and the slice index serve them.
func TestMemberInformersCallTheirHandlerBeforeTheySync(t *testing.T) {
	kube := kubefake.NewClientset(
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart"}},
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart-1",
			Labels: map[string]string{discoveryv1.LabelServiceName: "cart"}}},
	)
	var mu sync.Mutex
	var added []string
	h := func(kind string) cache.ResourceEventHandler {
		return cache.ResourceEventHandlerFuncs{AddFunc: func(obj interface{}) {
			mu.Lock()
			defer mu.Unlock()
			added = append(added, kind+" "+obj.(metav1.Object).GetName())
		}}
	}
	s, err := newInformerSet(context.Background(), "east", Clients{Kube: kube}, EventHandlers{Services: h("Service"), EndpointSlices: h("EndpointSlice")}, nil, ReadBounds{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.run()
	defer s.shutdown()
	waitUntil(t, s.hasSynced)
	mu.Lock()
	got := slices.Clone(added)
	mu.Unlock()
	slices.Sort(got)
	if want := []string{"EndpointSlice cart-1", "Service cart"}; !slices.Equal(got, want) {
		t.Errorf("handlers saw %v by the time the set synced, want %v", got, want)
	}
	if svc, err := s.serviceList.Services("shop").Get("cart"); err != nil || svc.Name != "cart" {
		t.Errorf("service lister: %v, %v", svc, err)
	}
	if objs, err := s.sliceIndex.ByIndex(sliceServiceIndex, "shop/cart"); err != nil || len(objs) != 1 {
		t.Errorf("slices of shop/cart by index: %v, %v", objs, err)
	}
}
