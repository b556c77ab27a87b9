package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

const (
	daemonNamespace = "endpoint-aggregator"
	appNamespace    = "shop"

	memberLabel       = "endpoint-aggregator.io/member-cluster"
	clusterNameAnno   = "endpoint-aggregator.io/cluster-name"
	kubeconfigDataKey = "kubeconfig"
	exportAnnotation  = "endpoint-aggregator.io/export"

	mcsServiceLabel = "multicluster.kubernetes.io/service-name"
	mcsClusterLabel = "multicluster.kubernetes.io/source-cluster"
	sourceLabel     = "endpoint-aggregator.io/source-cluster"
)

// endpoint is one backend in a member's EndpointSlice.
type endpoint struct {
	ip, hostname, node, zone string
	ready                    bool
}

// member describes what the demo creates in one member cluster.
type member struct {
	name string
	cart []endpoint // Service "cart": http 80->8080, grpc 9090
	db   []endpoint // headless Service "db" (only if non-empty)
}

var members = []member{
	{
		name: "east",
		cart: []endpoint{
			{ip: "10.1.0.10", hostname: "cart-7d9f-a", node: "east-node-1", zone: "east-a", ready: true},
			{ip: "10.1.0.11", hostname: "cart-7d9f-b", node: "east-node-2", zone: "east-b", ready: true},
			{ip: "10.1.0.12", hostname: "cart-7d9f-c", node: "east-node-1", zone: "east-a", ready: true},
			{ip: "10.1.0.13", hostname: "cart-7d9f-d", node: "east-node-2", zone: "east-b", ready: false},
		},
		db: []endpoint{
			{ip: "10.1.1.20", hostname: "db-0", node: "east-node-1", zone: "east-a", ready: true},
			{ip: "10.1.1.21", hostname: "db-1", node: "east-node-2", zone: "east-b", ready: true},
		},
	},
	{
		name: "west",
		cart: []endpoint{
			{ip: "10.2.0.10", hostname: "cart-5c4b-a", node: "west-node-1", zone: "west-a", ready: true},
			{ip: "10.2.0.11", hostname: "cart-5c4b-b", node: "west-node-2", zone: "west-b", ready: true},
			{ip: "10.2.0.12", hostname: "cart-5c4b-c", node: "west-node-1", zone: "west-a", ready: false},
		},
	},
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// registrationSecret registers a member with the daemon running on the hub.
func registrationSecret(cluster string, kubeconfig []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "member-" + cluster,
			Namespace:   daemonNamespace,
			Labels:      map[string]string{memberLabel: "true"},
			Annotations: map[string]string{clusterNameAnno: cluster},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{kubeconfigDataKey: kubeconfig},
	}
}

func cartService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "cart",
			Namespace:   appNamespace,
			Annotations: map[string]string{exportAnnotation: "true"},
		},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: map[string]string{"app": "cart"},
			Ports: []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)},
				{Name: "grpc", Protocol: corev1.ProtocolTCP, Port: 9090, TargetPort: intstr.FromInt32(9090)},
			},
		},
	}
}

func dbService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "db",
			Namespace:   appNamespace,
			Annotations: map[string]string{exportAnnotation: "true"},
		},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{"app": "db"},
			Ports: []corev1.ServicePort{
				{Name: "postgres", Protocol: corev1.ProtocolTCP, Port: 5432, TargetPort: intstr.FromInt32(5432)},
			},
		},
	}
}

// endpointSlice builds the slice the EndpointSlice controller would have
// written for svc (there is no controller-manager in the demo clusters).
func endpointSlice(svc *corev1.Service, eps []endpoint) *discoveryv1.EndpointSlice {
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      svc.Name + "-demo",
			Namespace: svc.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   "endpointslice-controller.k8s.io",
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, p := range svc.Spec.Ports {
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{
			Name:     ptr(p.Name),
			Protocol: ptr(p.Protocol),
			Port:     ptr(p.TargetPort.IntVal),
		})
	}
	for _, e := range eps {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{e.ip},
			Conditions: discoveryv1.EndpointConditions{
				Ready:       ptr(e.ready),
				Serving:     ptr(e.ready),
				Terminating: ptr(false),
			},
			Hostname: ptr(e.hostname),
			NodeName: ptr(e.node),
			Zone:     ptr(e.zone),
			TargetRef: &corev1.ObjectReference{
				Kind: "Pod", Namespace: svc.Namespace, Name: e.hostname,
			},
		})
	}
	return slice
}

// populateMember creates namespace shop, the Services and their
// EndpointSlices in one member cluster.
func populateMember(ctx context.Context, cs kubernetes.Interface, m member) error {
	if _, err := cs.CoreV1().Namespaces().Create(ctx, namespace(appNamespace), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("%s: create namespace %s: %w", m.name, appNamespace, err)
	}
	type svcSlice struct {
		svc *corev1.Service
		eps []endpoint
	}
	items := []svcSlice{{cartService(), m.cart}}
	if len(m.db) > 0 {
		items = append(items, svcSlice{dbService(), m.db})
	}
	for _, it := range items {
		if _, err := cs.CoreV1().Services(appNamespace).Create(ctx, it.svc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("%s: create Service %s: %w", m.name, it.svc.Name, err)
		}
		slice := endpointSlice(it.svc, it.eps)
		if _, err := cs.DiscoveryV1().EndpointSlices(appNamespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("%s: create EndpointSlice %s: %w", m.name, slice.Name, err)
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
