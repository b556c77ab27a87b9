package sync

import (
	stdsync "sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// writtenTTL bounds how long a write is trusted over the cache. Its watch
// event normally arrives within milliseconds; one that never comes (the
// cache relisted past it) must not shadow the cache for long.
const writtenTTL = time.Minute

// written remembers the hub objects this controller wrote until the hub
// caches have seen them, so that a sync right after a write reads what it
// wrote instead of the lagging cache and does not send an update bound to
// fail with a conflict (or a create bound to find the name taken).
//
// Entries are dropped when the cache catches up (an event carrying the
// written resourceVersion, or the delete event of a deleted object), when a
// write fails on a conflict (someone else wrote: the cache will tell), and
// after writtenTTL.
type written struct {
	mu   stdsync.Mutex
	objs map[objectRef]writtenObject
	// sources indexes the slices among objs by sourceKey.
	sources map[string]sets.Set[objectRef]
	now     func() time.Time
	swept   time.Time // last sweepLocked
	// inflight holds, for each object being written, the events its cache
	// delivered meanwhile (resourceVersions, "" for a delete): most are the
	// echo of that write, racing its response; end sorts them out.
	inflight map[objectRef][]string
	// requeue queues the owner of an object (enqueueHub).
	requeue func(obj interface{})
}

type objectRef struct{ resource, namespace, name string }

type writtenObject struct {
	obj    hubObject // nil: deleted
	source string    // slices: sourceKey
	at     time.Time
}

func newWritten() *written {
	return &written{objs: map[objectRef]writtenObject{}, sources: map[string]sets.Set[objectRef]{}, inflight: map[objectRef][]string{},
		now: time.Now, requeue: func(interface{}) {}}
}

func refOf(resource string, obj hubObject) objectRef {
	return objectRef{resource, obj.GetNamespace(), obj.GetName()}
}

// wrote records an object as the API server returned it from a write, in
// the form the hub caches hold (stripHubObject, which may share obj's
// metadata: obj must not be modified afterwards).
func (w *written) wrote(resource string, obj hubObject) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.putLocked(refOf(resource, obj), wroteEntry(resource, obj))
}

// deleted records that we deleted an object.
func (w *written) deleted(resource string, obj hubObject) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.putLocked(refOf(resource, obj), writtenObject{source: sliceSource(resource, obj)})
}

func wroteEntry(resource string, obj hubObject) writtenObject {
	cached, _ := stripHubObject(obj)
	return writtenObject{obj: cached.(hubObject), source: sliceSource(resource, obj)}
}

func (w *written) putLocked(ref objectRef, o writtenObject) {
	w.dropLocked(ref)
	o.at = w.now()
	w.sweepLocked(o.at)
	w.objs[ref] = o
	if o.source != "" {
		if w.sources[o.source] == nil {
			w.sources[o.source] = sets.New[objectRef]()
		}
		w.sources[o.source].Insert(ref)
	}
}

// sweepLocked drops expired entries, at most once per writtenTTL, so writes
// whose echo never came and that are never read again do not pile up.
func (w *written) sweepLocked(now time.Time) {
	if now.Sub(w.swept) < writtenTTL {
		return
	}
	w.swept = now
	for ref, o := range w.objs {
		if now.Sub(o.at) > writtenTTL {
			w.dropLocked(ref)
		}
	}
}

// forget drops what we know of an object: the cache is to be believed.
func (w *written) forget(resource, namespace, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dropLocked(objectRef{resource, namespace, name})
}

func (w *written) dropLocked(ref objectRef) {
	o, ok := w.objs[ref]
	if !ok {
		return
	}
	delete(w.objs, ref)
	if s := w.sources[o.source]; s != nil {
		s.Delete(ref)
		if s.Len() == 0 {
			delete(w.sources, o.source)
		}
	}
}

// get returns what we last wrote of an object, if the cache has not seen it
// yet: the object, or nil when we deleted it.
func (w *written) get(resource, namespace, name string) (hubObject, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.getLocked(objectRef{resource, namespace, name})
}

func (w *written) getLocked(ref objectRef) (hubObject, bool) {
	o, ok := w.objs[ref]
	if !ok {
		return nil, false
	}
	if w.now().Sub(o.at) > writtenTTL {
		w.dropLocked(ref)
		return nil, false
	}
	return o.obj, true
}

// sourceSlices returns, by name, the slices of a source we wrote or deleted
// and the cache has not seen yet (nil for a deleted one).
func (w *written) sourceSlices(source string) map[string]hubObject {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]hubObject{}
	for _, ref := range w.sources[source].UnsortedList() {
		if o, ok := w.getLocked(ref); ok {
			out[ref.name] = o
		}
	}
	return out
}

// begin says a write of obj is being sent; end must follow.
func (w *written) begin(resource string, obj hubObject) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight[refOf(resource, obj)] = []string{}
}

// end says the write of obj begun is done: out is what the API server
// returned (nil after a delete or a failure), deleted whether it was a
// successful delete. A successful write is recorded unless its echo came
// while it was in flight (the cache has it already). Held events that were
// not its echo queue obj's owner, as seen would have.
func (w *written) end(resource string, obj, out hubObject, deleted bool) {
	w.mu.Lock()
	ref := refOf(resource, obj)
	held := w.inflight[ref]
	delete(w.inflight, ref)
	echoed, foreign := false, false
	for _, rv := range held {
		if (deleted && rv == "") || (out != nil && rv == out.GetResourceVersion()) {
			echoed = true
		} else {
			foreign = true
		}
	}
	switch {
	case echoed:
		w.dropLocked(ref)
	case out != nil:
		w.putLocked(ref, wroteEntry(resource, out))
	case deleted:
		w.putLocked(ref, writtenObject{source: sliceSource(resource, obj)})
	}
	w.mu.Unlock()
	if foreign {
		w.requeue(obj)
	}
}

// seen tells w what a hub cache has just seen of an object (gone: its
// deletion) and reports whether that was the echo of our own last write of
// it, which needs no sync. While a write of the object is in flight, the
// event is held for end to judge.
func (w *written) seen(resource string, obj interface{}, gone bool) bool {
	m, err := metaOf(obj)
	if err != nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ref := objectRef{resource, m.GetNamespace(), m.GetName()}
	if held, ok := w.inflight[ref]; ok {
		rv := m.GetResourceVersion()
		if gone {
			rv = ""
		}
		w.inflight[ref] = append(held, rv)
		return true
	}
	o, ok := w.objs[ref]
	if !ok {
		return false
	}
	echo := (o.obj == nil && gone) || (o.obj != nil && !gone && o.obj.GetResourceVersion() == m.GetResourceVersion())
	if echo {
		w.dropLocked(ref)
	}
	return echo
}

// sliceSource is the source key of one of our slices, "" for other kinds.
func sliceSource(resource string, obj hubObject) string {
	if resource != resourceEndpointSlice {
		return ""
	}
	if k, ok := hubKey(obj); ok && !k.IsClusterSet() {
		return sourceKey(k)
	}
	return ""
}

// readYourWrites returns the object from the cache unless we wrote it since
// the cache last saw it.
func readYourWrites[T hubObject](c *Controller, resource, namespace, name string, cached func() (T, error)) (T, error) {
	if o, ok := c.written.get(resource, namespace, name); ok {
		if o == nil {
			var zero T
			return zero, apierrors.NewNotFound(schema.GroupResource{Resource: resource}, name)
		}
		return o.(T), nil
	}
	return cached()
}

func (c *Controller) liveService(namespace, name string) (*corev1.Service, error) {
	return readYourWrites(c, resourceService, namespace, name, func() (*corev1.Service, error) {
		return c.services.Services(namespace).Get(name)
	})
}

// liveEndpoints returns the digest of a hub Endpoints.
func (c *Controller) liveEndpoints(namespace, name string) (*endpoints.EndpointsDigest, error) {
	return readYourWrites(c, resourceEndpoints, namespace, name, func() (*endpoints.EndpointsDigest, error) {
		o, ok, err := c.endpointInf.GetIndexer().GetByKey(namespace + "/" + name)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, apierrors.NewNotFound(corev1.Resource("endpoints"), name)
		}
		return o.(*endpoints.EndpointsDigest), nil
	})
}

func (c *Controller) liveImport(namespace, name string) (*mcsv1beta1.ServiceImport, error) {
	return readYourWrites(c, resourceServiceImport, namespace, name, func() (*mcsv1beta1.ServiceImport, error) {
		return c.imports.ServiceImports(namespace).Get(name)
	})
}
