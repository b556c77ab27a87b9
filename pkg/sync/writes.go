package sync

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/hashicorp/go-multierror"

	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// fieldManager names the daemon in managedFields.
const fieldManager = "endpoint-aggregator"

// ReasonNameConflict is the Event reason on a hub object that holds a name the
// daemon wanted to write, without being managed by it.
const ReasonNameConflict = "NameConflict"

// errStaleCache says a write failed because our hub cache lags behind the API
// server (the object exists already, or changed since we read it). The watch
// event that brings the cache up to date queues the key again, so the sync
// is not retried with backoff.
var errStaleCache = errors.New("hub cache is behind the API server")

// conflictError says a hub object we do not own holds a name we need. It
// is an outcome of a sync: processNext reports it (report) and parks the
// key; resyncNow asks for one more sync at once, which writes what the key
// can without that name.
type conflictError struct {
	resource, namespace, name string
	key                       Key
	holder                    hubObject // for the Event
	resyncNow                 bool
}

func (e *conflictError) Error() string {
	return fmt.Sprintf("%s %s/%s exists and is not managed by endpoint-aggregator for %s; left untouched", e.resource, e.namespace, e.name, e.key)
}

// hubObject is a typed hub object: a pointer to an API struct.
type hubObject interface {
	metav1.Object
	runtime.Object
}

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

// create writes a new hub object. If the name is taken by an object we do
// not own for key, it reports a conflict instead of touching it; if it is
// ours (our cache lags), the error makes the key retry.
func create[T hubObject](ctx context.Context, w *hubWriter, o ops[T], key Key, obj T) (T, error) {
	out, err := send(w, o.resource, verbCreate, obj, func() (T, error) { return o.create(ctx, obj) })
	if apierrors.IsAlreadyExists(err) {
		w.written.forget(o.resource, obj.GetNamespace(), obj.GetName())
		w.calling()
		live, gerr := o.get(ctx, obj.GetNamespace(), obj.GetName())
		if gerr != nil {
			return out, gerr
		}
		if !ownedBy(live, key) {
			err := newConflict(o.resource, live, key)
			// A name newly found taken: sync again at once, as without the
			// name what the key holds under it must go (see readMember).
			err.resyncNow = live.GetLabels()[endpoints.LabelManagedBy] != endpoints.ManagedByValue && w.taken.set(refOf(o.resource, live), true)
			return out, err
		}
		return out, fmt.Errorf("creating %s %s/%s: %w", o.resource, obj.GetNamespace(), obj.GetName(), errStaleCache)
	}
	return out, err
}

func update[T hubObject](ctx context.Context, w *hubWriter, o ops[T], obj T) (T, error) {
	return sendUpdate(w, o.resource, verbUpdate, obj, func() (T, error) { return o.update(ctx, obj) })
}

// sendUpdate sends an update (or a status update) of obj; a conflict means
// our cache lags, and the watch event that updates it queues the key again.
func sendUpdate[T hubObject](w *hubWriter, resource, verb string, obj T, call func() (T, error)) (T, error) {
	out, err := send(w, resource, verb, obj, call)
	if apierrors.IsConflict(err) {
		w.written.forget(resource, obj.GetNamespace(), obj.GetName())
		return out, fmt.Errorf("%s %s %s/%s: %w", verb, resource, obj.GetNamespace(), obj.GetName(), errStaleCache)
	}
	return out, err
}

// send makes one hub write of obj, counted, and tells the write tracker
// when it starts and what it returned.
func send[T hubObject](w *hubWriter, resource, verb string, obj T, call func() (T, error)) (T, error) {
	w.written.begin(resource, obj)
	w.calling()
	out, err := call()
	w.countWrite(resource, verb, err)
	var done hubObject
	if err == nil {
		done = out
	}
	w.written.end(resource, obj, done, false)
	return out, err
}

// remove deletes one of our hub objects, preconditioned on the UID we saw so
// a newer object of the same name is never deleted by mistake. NotFound is
// success.
func remove[T hubObject](ctx context.Context, w *hubWriter, o ops[T], live T) error {
	uid := live.GetUID()
	opts := metav1.DeleteOptions{}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	w.written.begin(o.resource, live)
	w.calling()
	err := o.delete(ctx, live.GetNamespace(), live.GetName(), opts)
	w.countWrite(o.resource, verbDelete, err)
	gone := err == nil || apierrors.IsNotFound(err)
	w.written.end(o.resource, live, nil, gone)
	switch {
	case gone:
		return nil
	case apierrors.IsConflict(err): // a newer object of that name
		w.written.forget(o.resource, live.GetNamespace(), live.GetName())
	}
	return err
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

// ownedBy reports whether a hub object is ours and belongs to key.
func ownedBy(obj metav1.Object, key Key) bool {
	if obj.GetLabels()[endpoints.LabelManagedBy] != endpoints.ManagedByValue {
		return false
	}
	if k, ok := hubKey(obj); ok {
		return k == key
	}
	// A ServiceImport carries no source labels: its name is the key's.
	return key.IsClusterSet() && obj.GetName() == key.Name && obj.GetNamespace() == key.Namespace
}

// newConflict is the outcome of finding an object that holds a name key
// needs.
func newConflict(resource string, live hubObject, key Key) *conflictError {
	return &conflictError{resource: resource, namespace: live.GetNamespace(), name: live.GetName(), key: key, holder: live}
}

// reportConflict says where an operator looks that an object holds a name
// we need: an Event on that object, a metric and a log line.
func (c *Controller) reportConflict(e *conflictError) {
	c.metrics.Conflicts.WithLabelValues(e.resource).Inc()
	c.recorder.Eventf(e.holder, corev1.EventTypeWarning, ReasonNameConflict,
		"endpoint-aggregator needs this name for %s but the object is not managed by it (label %s=%s missing or for another source); left untouched",
		e.key, endpoints.LabelManagedBy, endpoints.ManagedByValue)
	klog.InfoS("Hub name conflict", "resource", e.resource, "object", klog.KRef(e.namespace, e.name), "key", e.key.String())
}

// conflictsIn returns every conflict an error of a sync carries (a write
// step joins the errors of its writes).
func conflictsIn(err error) []*conflictError {
	var merr *multierror.Error
	if errors.As(err, &merr) {
		var out []*conflictError
		for _, e := range merr.Errors {
			out = append(out, conflictsIn(e)...)
		}
		return out
	}
	var ce *conflictError
	if errors.As(err, &ce) {
		return []*conflictError{ce}
	}
	return nil
}

// countWrite and countMemberWrite count one write to the hub or to a
// member, by its result: the accounting of the write step itself.
func (w *hubWriter) countWrite(resource, verb string, err error) {
	result := resultOf(err)
	w.metrics.HubWrites.WithLabelValues(resource, verb, result).Inc()
	if result == resultError {
		reason := string(apierrors.ReasonForError(err))
		if reason == "" {
			reason = "Other"
		}
		w.metrics.HubWriteRefusals.WithLabelValues(resource, verb, reason).Inc()
	}
}

func (w *hubWriter) countMemberWrite(err error) {
	w.metrics.MemberWrites.WithLabelValues(resultOf(err)).Inc()
}

// resultOf is the result label of a write.
func resultOf(err error) string {
	switch {
	case err == nil:
		return resultSuccess
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		return resultConflict
	case apierrors.IsNotFound(err):
		return resultNotFound
	}
	return resultError
}
