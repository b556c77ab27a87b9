package sync

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	stdsync "sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
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
	// notices are what the tracker found that the controller must act on
	// (takeNotices): it tracks, and never queues a key itself.
	notices []notice
}

// notice is one finding of the tracker: an owner to sync again (a change
// held during its write that was not the write's echo, or a write whose
// echo never came), or an overlay entry dropped while the cache does not
// show it (forgotten, expired, or overtaken by a failed write): a sync that
// read the entry may have seen other than the cache shows.
type notice struct {
	requeue    *Key
	unshadowed *shadow
}

type shadow struct {
	ref   objectRef
	entry overlayEntry
}

// takeNotices returns and forgets what the tracker found.
func (w *written) takeNotices() []notice {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.notices
	w.notices = nil
	return out
}

func (w *written) requeueLocked(k Key) { w.notices = append(w.notices, notice{requeue: &k}) }
func (w *written) unshadowLocked(ref objectRef, o overlayEntry) {
	w.notices = append(w.notices, notice{unshadowed: &shadow{ref, o}})
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
		inflight: map[objectRef][]echo{}, now: time.Now}
}

func refOf(resource string, obj hubObject) objectRef {
	return objectRef{resource, obj.GetNamespace(), obj.GetName()}
}

// write makes one hub write of obj (call) and tracks it: the events its
// cache delivers meanwhile are held, then judged against what call returned
// (the object written; nil after a delete or a failure). A delete that
// succeeds or finds obj gone is tracked as a deletion. A write refused
// because the cache lags (a create that finds the name taken, an update or
// a delete that finds obj changed) drops what is tracked of obj: the cache
// is to be believed.
func (w *written) write(resource, verb string, obj hubObject, call func() (hubObject, error)) error {
	w.begin(resource, obj)
	out, err := call()
	w.end(resource, obj, out, verb == verbDelete && (err == nil || apierrors.IsNotFound(err)))
	stale := apierrors.IsConflict(err)
	if verb == verbCreate {
		stale = apierrors.IsAlreadyExists(err)
	}
	if stale {
		w.forget(resource, obj.GetNamespace(), obj.GetName())
	}
	return err
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
	source := sliceSource(resource, obj)
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
		w.putLocked(ref, want, overlayEntry{obj: cached.(hubObject), owner: owner, source: source})
	case deleted:
		w.putLocked(ref, want, overlayEntry{owner: owner, source: source})
	}
	for _, o := range gone {
		w.unshadowLocked(ref, o)
	}
	if foreign && owned {
		w.requeueLocked(owner)
	}
	w.mu.Unlock()
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
	defer w.mu.Unlock()
	o, ok := w.overlay[ref]
	w.dropLocked(ref)
	if ok {
		w.unshadowLocked(ref, o)
	}
}

// expire drops the writes whose echo did not come within writtenTTL, and
// notes their owners to sync again and the entries as unshadowed: what the
// cache shows of them is what counts now.
func (w *written) expire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	for _, ref := range slices.SortedFunc(maps.Keys(w.overlay), compareRefs) {
		if o := w.overlay[ref]; now.Sub(o.at) > writtenTTL {
			w.dropLocked(ref)
			w.requeueLocked(o.owner)
			w.unshadowLocked(ref, o)
		}
	}
}

func compareRefs(a, b objectRef) int {
	return cmp.Or(strings.Compare(a.resource, b.resource), strings.Compare(a.namespace, b.namespace), strings.Compare(a.name, b.name))
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
