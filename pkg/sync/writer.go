package sync

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

// fieldManager names the daemon in managedFields.
const fieldManager = "endpoint-aggregator"

// hubWriter makes the hub writes of a plan: clients, the write tracker and
// write accounting; no listers. A GET past the cache tells a create that
// found its name taken whether our cache lags or someone else holds it.
type hubWriter struct {
	hub     kubernetes.Interface
	hubMCS  mcsclientset.Interface
	written *written
	taken   *taken
	metrics *Metrics
	// beforeCall, when set, runs before each API call: the order explorer
	// parks a worker there, to interleave the calls of several workers.
	beforeCall func()
}

// calling is said before each API call.
func (w *hubWriter) calling() {
	if w.beforeCall != nil {
		w.beforeCall()
	}
}

// ops are the typed client calls for one hub resource.
type ops[T hubObject] struct {
	resource string
	create   func(ctx context.Context, obj T) (T, error)
	update   func(ctx context.Context, obj T) (T, error)
	delete   func(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error
	// get reads past the cache, to tell our lagging cache from a foreign object.
	get func(ctx context.Context, namespace, name string) (T, error)
}

func (w *hubWriter) serviceOps() ops[*corev1.Service] {
	return ops[*corev1.Service]{
		resource: resourceService,
		create: func(ctx context.Context, o *corev1.Service) (*corev1.Service, error) {
			return w.hub.CoreV1().Services(o.Namespace).Create(ctx, o, metav1.CreateOptions{FieldManager: fieldManager})
		},
		update: func(ctx context.Context, o *corev1.Service) (*corev1.Service, error) {
			return w.hub.CoreV1().Services(o.Namespace).Update(ctx, o, metav1.UpdateOptions{FieldManager: fieldManager})
		},
		delete: func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
			return w.hub.CoreV1().Services(ns).Delete(ctx, name, opts)
		},
		get: func(ctx context.Context, ns, name string) (*corev1.Service, error) {
			return w.hub.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		},
	}
}

func (w *hubWriter) endpointsOps() ops[*corev1.Endpoints] {
	return ops[*corev1.Endpoints]{
		resource: resourceEndpoints,
		create: func(ctx context.Context, o *corev1.Endpoints) (*corev1.Endpoints, error) {
			return w.hub.CoreV1().Endpoints(o.Namespace).Create(ctx, o, metav1.CreateOptions{FieldManager: fieldManager})
		},
		update: func(ctx context.Context, o *corev1.Endpoints) (*corev1.Endpoints, error) {
			return w.hub.CoreV1().Endpoints(o.Namespace).Update(ctx, o, metav1.UpdateOptions{FieldManager: fieldManager})
		},
		delete: func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
			return w.hub.CoreV1().Endpoints(ns).Delete(ctx, name, opts)
		},
		get: func(ctx context.Context, ns, name string) (*corev1.Endpoints, error) {
			return w.hub.CoreV1().Endpoints(ns).Get(ctx, name, metav1.GetOptions{})
		},
	}
}

func (w *hubWriter) sliceOps() ops[*discoveryv1.EndpointSlice] {
	return ops[*discoveryv1.EndpointSlice]{
		resource: resourceEndpointSlice,
		create: func(ctx context.Context, o *discoveryv1.EndpointSlice) (*discoveryv1.EndpointSlice, error) {
			return w.hub.DiscoveryV1().EndpointSlices(o.Namespace).Create(ctx, o, metav1.CreateOptions{FieldManager: fieldManager})
		},
		update: func(ctx context.Context, o *discoveryv1.EndpointSlice) (*discoveryv1.EndpointSlice, error) {
			return w.hub.DiscoveryV1().EndpointSlices(o.Namespace).Update(ctx, o, metav1.UpdateOptions{FieldManager: fieldManager})
		},
		delete: func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
			return w.hub.DiscoveryV1().EndpointSlices(ns).Delete(ctx, name, opts)
		},
		get: func(ctx context.Context, ns, name string) (*discoveryv1.EndpointSlice, error) {
			return w.hub.DiscoveryV1().EndpointSlices(ns).Get(ctx, name, metav1.GetOptions{})
		},
	}
}

func (w *hubWriter) importOps() ops[*mcsv1beta1.ServiceImport] {
	return ops[*mcsv1beta1.ServiceImport]{
		resource: resourceServiceImport,
		create: func(ctx context.Context, o *mcsv1beta1.ServiceImport) (*mcsv1beta1.ServiceImport, error) {
			return w.hubMCS.MulticlusterV1beta1().ServiceImports(o.Namespace).Create(ctx, o, metav1.CreateOptions{FieldManager: fieldManager})
		},
		update: func(ctx context.Context, o *mcsv1beta1.ServiceImport) (*mcsv1beta1.ServiceImport, error) {
			return w.hubMCS.MulticlusterV1beta1().ServiceImports(o.Namespace).Update(ctx, o, metav1.UpdateOptions{FieldManager: fieldManager})
		},
		delete: func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
			return w.hubMCS.MulticlusterV1beta1().ServiceImports(ns).Delete(ctx, name, opts)
		},
		get: func(ctx context.Context, ns, name string) (*mcsv1beta1.ServiceImport, error) {
			return w.hubMCS.MulticlusterV1beta1().ServiceImports(ns).Get(ctx, name, metav1.GetOptions{})
		},
	}
}
