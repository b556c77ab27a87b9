package clusters

import (
	"context"
	"reflect"
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
	s, err := newInformerSet("east", Clients{Kube: kube}, EventHandlers{}, nil)
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
	c, err := newCluster("east", "h", "", Clients{Kube: kube}, EventHandlers{EndpointSlices: handler})
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
