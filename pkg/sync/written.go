package sync

import (
	stdsync "sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// writtenTTL bounds how long a write is trusted over the cache. Its watch
// event normally arrives within milliseconds; one that never comes (the
// cache relisted past it) must not shadow the cache for long. An entry that
// expires queues its owner, which then reads the cache.
const writtenTTL = time.Minute

// written tracks this controller's hub writes until the hub caches have
// seen them. It does two separate jobs:
//
//   - echo detection: the watch event a write causes is not a change to
//     react to (seen reports it). A write's expected echo is its returned
//     resourceVersion, or for a delete the deleted object's UID. Events that
//     arrive while the write is in flight are held and judged when it ends.
//   - read-your-writes: until its echo, a sync reads what it wrote instead
//     of the lagging cache (get, sourceSlices), so it does not send an
//     update bound to fail with a conflict or a create bound to find the
//     name taken.
//
// Both are dropped for an object when its echo is seen, when a write of it
// fails on a conflict (someone else wrote: the cache will tell), and after
// writtenTTL (expire), which queues the object's owner.
type written struct {
	mu      stdsync.Mutex
	now     func() time.Time
	echoes  map[objectRef]echo
	overlay map[objectRef]overlayEntry
	// sources indexes the slices in overlay by sourceKey.
	sources map[string]sets.Set[objectRef]
	// inflight holds, for each object being written, the events its cache
	// delivered meanwhile: most are the echo of that write, racing its
	// response; end sorts them out.
	inflight map[objectRef][]echo
	// requeue queues the owner of an object.
	requeue func(Key)
	// unshadowed is told of an overlay entry dropped while the cache does
	// not show it (forgotten, expired, or overtaken by a failed write): a
	// sync that read the entry may have seen other than the cache shows.
	unshadowed func(ref objectRef, o overlayEntry)
}

type objectRef struct{ resource, namespace, name string }

// echo identifies one watch event of an object: its resourceVersion, or for
// a deletion the deleted object's UID.
type echo struct {
	gone bool
	rv   string
	uid  types.UID
}

func (e echo) matches(ev echo) bool {
	if e.gone != ev.gone {
		return false
	}
	if e.gone {
		return e.uid == "" || ev.uid == "" || e.uid == ev.uid
	}
	return e.rv == ev.rv
}

type overlayEntry struct {
	obj    hubObject // nil: deleted
	owner  Key
	source string // slices: sourceKey
	at     time.Time
}

func newWritten() *written {
	return &written{echoes: map[objectRef]echo{}, overlay: map[objectRef]overlayEntry{}, sources: map[string]sets.Set[objectRef]{},
		inflight: map[objectRef][]echo{}, now: time.Now, requeue: func(Key) {}, unshadowed: func(objectRef, overlayEntry) {}}
}

func refOf(resource string, obj hubObject) objectRef {
	return objectRef{resource, obj.GetNamespace(), obj.GetName()}
}

// begin says a write of obj is being sent; end must follow.
func (w *written) begin(resource string, obj hubObject) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight[refOf(resource, obj)] = []echo{}
}

// end says the write of obj begun is done: out is what the API server
// returned (nil after a delete or a failure), deleted whether it was a
// successful delete. A successful write is tracked unless its echo came
// while it was in flight (the cache has it already). Held events that were
// not its echo queue obj's owner, as seen would have.
func (w *written) end(resource string, obj, out hubObject, deleted bool) {
	w.mu.Lock()
	ref := refOf(resource, obj)
	held := w.inflight[ref]
	delete(w.inflight, ref)
	var want echo
	switch {
	case out != nil:
		want = echo{rv: out.GetResourceVersion()}
	case deleted:
		want = echo{gone: true, uid: obj.GetUID()}
	}
	echoed, foreign := false, false
	for _, ev := range held {
		if (out != nil || deleted) && want.matches(ev) {
			echoed = true
		} else {
			foreign = true
		}
	}
	owner, owned := ownerOf(resource, obj)
	var gone []overlayEntry
	switch {
	case echoed:
		w.dropLocked(ref)
	case out == nil && !deleted && len(held) > 0:
		// A failed write, perhaps applied, while the cache moved on: the
		// cache is newer than what an earlier write left in the overlay
		// (whose echo may be among the held events).
		if o, ok := w.overlay[ref]; ok {
			gone = append(gone, o)
		}
		w.dropLocked(ref)
	case out != nil:
		cached, _ := stripHubObject(out)
		w.putLocked(ref, want, overlayEntry{obj: cached.(hubObject), owner: owner, source: sliceSource(resource, obj)})
	case deleted:
		w.putLocked(ref, want, overlayEntry{owner: owner, source: sliceSource(resource, obj)})
	}
	w.mu.Unlock()
	for _, o := range gone {
		w.unshadowed(ref, o)
	}
	if foreign && owned {
		w.requeue(owner)
	}
}

func (w *written) putLocked(ref objectRef, e echo, o overlayEntry) {
	w.dropLocked(ref)
	o.at = w.now()
	w.echoes[ref] = e
	w.overlay[ref] = o
	if o.source != "" {
		if w.sources[o.source] == nil {
			w.sources[o.source] = sets.New[objectRef]()
		}
		w.sources[o.source].Insert(ref)
	}
}

func (w *written) dropLocked(ref objectRef) {
	delete(w.echoes, ref)
	o, ok := w.overlay[ref]
	if !ok {
		return
	}
	delete(w.overlay, ref)
	if s := w.sources[o.source]; s != nil {
		s.Delete(ref)
		if s.Len() == 0 {
			delete(w.sources, o.source)
		}
	}
}

// forget drops what we know of an object: the cache is to be believed.
func (w *written) forget(resource, namespace, name string) {
	ref := objectRef{resource, namespace, name}
	w.mu.Lock()
	o, ok := w.overlay[ref]
	w.dropLocked(ref)
	w.mu.Unlock()
	if ok {
		w.unshadowed(ref, o)
	}
}

// expire drops the writes whose echo did not come within writtenTTL and
// queues their owners, and tells unshadowed: what the cache shows of them is
// what counts now.
func (w *written) expire() {
	w.mu.Lock()
	now := w.now()
	gone := map[objectRef]overlayEntry{}
	for ref, o := range w.overlay {
		if now.Sub(o.at) > writtenTTL {
			w.dropLocked(ref)
			gone[ref] = o
		}
	}
	w.mu.Unlock()
	for ref, o := range gone {
		w.requeue(o.owner)
		w.unshadowed(ref, o)
	}
}

// ownersIn returns the owners of the tracked writes of cluster's objects.
// They belong with what the hub caches index by cluster: a write whose echo
// has not come is in no cache yet.
func (w *written) ownersIn(cluster string) []Key {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Key
	for _, o := range w.overlay {
		if o.owner.Cluster == cluster {
			out = append(out, o.owner)
		}
	}
	return out
}

// objects returns the tracked objects of resource (deletions left out).
func (w *written) objects(resource string) []hubObject {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []hubObject
	for ref, o := range w.overlay {
		if ref.resource == resource && o.obj != nil {
			out = append(out, o.obj)
		}
	}
	return out
}

// len is the number of tracked writes.
func (w *written) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.overlay)
}

// get returns what we last wrote of an object, if the cache has not seen it
// yet: the object, or nil when we deleted it.
func (w *written) get(resource, namespace, name string) (hubObject, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.getLocked(objectRef{resource, namespace, name})
}

// getLocked ignores an expired entry; expire drops it and queues its owner.
func (w *written) getLocked(ref objectRef) (hubObject, bool) {
	o, ok := w.overlay[ref]
	if !ok || w.now().Sub(o.at) > writtenTTL {
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

// seen tells w what a hub cache has just seen of an object (gone: its
// deletion) and reports whether that was the echo of our own last write of
// it, which needs no sync. While a write of the object is in flight, the
// event is held for end to judge.
func (w *written) seen(resource string, obj interface{}, gone bool) bool {
	m, err := metaOf(obj)
	if err != nil {
		return false
	}
	ev := echo{gone: gone, rv: m.GetResourceVersion(), uid: m.GetUID()}
	if gone {
		ev.rv = ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ref := objectRef{resource, m.GetNamespace(), m.GetName()}
	if held, ok := w.inflight[ref]; ok {
		w.inflight[ref] = append(held, ev)
		return true
	}
	want, ok := w.echoes[ref]
	if !ok || !want.matches(ev) {
		return false
	}
	w.dropLocked(ref)
	return true
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
