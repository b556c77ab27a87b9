package sync

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

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

// createNamespace creates a hub namespace; one that exists is success.
func (w *hubWriter) createNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	w.calling()
	_, err := w.hub.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{FieldManager: fieldManager})
	w.countWrite(resourceNamespace, verbCreate, err)
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
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

// typedClient is what ops call of a client-go typed client of one
// namespace.
type typedClient[T any] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
}

// opsOf are the ops of resource through in, which gives the typed client
// of a namespace.
func opsOf[T hubObject, C typedClient[T]](resource string, in func(namespace string) C) ops[T] {
	return ops[T]{
		resource: resource,
		create: func(ctx context.Context, o T) (T, error) {
			return in(o.GetNamespace()).Create(ctx, o, metav1.CreateOptions{FieldManager: fieldManager})
		},
		update: func(ctx context.Context, o T) (T, error) {
			return in(o.GetNamespace()).Update(ctx, o, metav1.UpdateOptions{FieldManager: fieldManager})
		},
		delete: func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
			return in(ns).Delete(ctx, name, opts)
		},
		get: func(ctx context.Context, ns, name string) (T, error) {
			return in(ns).Get(ctx, name, metav1.GetOptions{})
		},
	}
}

func (w *hubWriter) serviceOps() ops[*corev1.Service] {
	return opsOf[*corev1.Service](resourceService, w.hub.CoreV1().Services)
}

func (w *hubWriter) endpointsOps() ops[*corev1.Endpoints] {
	return opsOf[*corev1.Endpoints](resourceEndpoints, w.hub.CoreV1().Endpoints)
}

func (w *hubWriter) sliceOps() ops[*discoveryv1.EndpointSlice] {
	return opsOf[*discoveryv1.EndpointSlice](resourceEndpointSlice, w.hub.DiscoveryV1().EndpointSlices)
}

func (w *hubWriter) importOps() ops[*mcsv1beta1.ServiceImport] {
	return opsOf[*mcsv1beta1.ServiceImport](resourceServiceImport, w.hubMCS.MulticlusterV1beta1().ServiceImports)
}
