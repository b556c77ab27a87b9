package clusters

import (
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// TestServiceProjectionKeepsWhatTheSyncReads: the member Service cache holds
// the fields the sync and explain read and nothing else a member sets. It
// fails when client-go adds a ServiceSpec field: decide whether the sync
// reads it, and keep it in projectService if so.
func TestServiceProjectionKeepsWhatTheSyncReads(t *testing.T) {
	kept := []string{"Ports", "ClusterIP", "ClusterIPs", "Type", "SessionAffinity", "IPFamilies",
		"SessionAffinityConfig", "IPFamilyPolicy", "InternalTrafficPolicy", "TrafficDistribution"}
	dropped := []string{"Selector", "ExternalIPs", "LoadBalancerIP", "LoadBalancerSourceRanges", "ExternalName",
		"ExternalTrafficPolicy", "HealthCheckNodePort", "PublishNotReadyAddresses", "AllocateLoadBalancerNodePorts",
		"LoadBalancerClass"}
	var fields []string
	for f := range reflect.TypeFor[corev1.ServiceSpec]().Fields() {
		fields = append(fields, f.Name)
	}
	if want := append(slices.Clone(kept), dropped...); !sameSet(fields, want) {
		t.Fatalf("ServiceSpec fields %v, the test knows %v: decide what the cache keeps of the new ones", fields, want)
	}

	now := metav1.Now()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "shop", UID: "u1", ResourceVersion: "7", Generation: 3,
			CreationTimestamp: now, DeletionTimestamp: &now, Finalizers: []string{"x"},
			Labels: map[string]string{endpoints.LabelManagedBy: "someone", "app": "web"},
			Annotations: map[string]string{annotationExport: "true", endpoints.AnnotationPreferLocal: "false",
				"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
			OwnerReferences: []metav1.OwnerReference{{Name: "owner"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.0.0.1", ClusterIPs: []string{"10.0.0.1", "fd00::1"},
			Ports:                 []corev1.ServicePort{{Name: "http", Port: 80, NodePort: 30080}},
			SessionAffinity:       corev1.ServiceAffinityClientIP,
			SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}},
			IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			IPFamilyPolicy:        ptr.To(corev1.IPFamilyPolicyPreferDualStack),
			InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyLocal),
			TrafficDistribution:   ptr.To(corev1.ServiceTrafficDistributionPreferClose),
			Selector:              map[string]string{"app": "web"},
			ExternalIPs:           []string{"192.0.2.1"}, LoadBalancerIP: "192.0.2.2",
			LoadBalancerSourceRanges: []string{"0.0.0.0/0"}, ExternalName: "x.example",
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: 31000,
			PublishNotReadyAddresses: true, AllocateLoadBalancerNodePorts: ptr.To(true), LoadBalancerClass: ptr.To("lb"),
		},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.3"}}}},
	}
	obj, err := stripMemberObject(svc.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	got := obj.(*corev1.Service)
	want := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "shop", UID: "u1", ResourceVersion: "7",
			CreationTimestamp: now, DeletionTimestamp: &now,
			Labels:      map[string]string{endpoints.LabelManagedBy: "someone"},
			Annotations: map[string]string{annotationExport: "true", endpoints.AnnotationPreferLocal: "false"},
		},
	}
	in, out := reflect.ValueOf(svc.Spec), reflect.ValueOf(&want.Spec).Elem()
	for _, name := range kept {
		out.FieldByName(name).Set(in.FieldByName(name))
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("projected Service\n%+v\nwant\n%+v", got, want)
	}
	// Projecting a projection changes nothing: a relist may hand the
	// transform either.
	again, _ := stripMemberObject(got.DeepCopy())
	if !reflect.DeepEqual(again, want) {
		t.Errorf("projecting a projected Service changed it: %+v", again)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
