package sync

import (
	"context"
	"errors"
	stdsync "sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcslisters "sigs.k8s.io/mcs-api/pkg/client/listers/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// The reader builds the hub view of a key: what the hub holds of the
// objects the key owns, from the hub caches overlaid with our writes the
// caches have not shown yet (written). An object that holds one of the
// key's names but is ours for another source is a conflict: reading fails.
// A name held by an object that is not ours at all is found when a create
// fails (taken), and read past the cache from then on; the sync then does
// what it can without that name and reports the conflict, which parks the
// key until it looks again.

// hubReader reads what the hub holds of a key's objects: the hub caches
// overlaid with our tracked writes. It has listers and, for a name found
// taken, getters that read past the cache; no client that writes.
type hubReader struct {
	services   corelisters.ServiceLister
	endpoints  cache.Indexer // digests
	slices     cache.Indexer // digests, indexed bySource
	imports    mcslisters.ServiceImportLister
	namespaces corelisters.NamespaceLister
	ranges     serviceRanges
	written    *written
	taken      *taken
	getService func(ctx context.Context, namespace, name string) (*corev1.Service, error)
	getImport  func(ctx context.Context, namespace, name string) (*mcsv1beta1.ServiceImport, error)
	locality   localityOptions
}

// localityOptions are what the reader needs besides the caches to read a
// member key's endpoints.Locality.
type localityOptions struct {
	preferLocal bool
	hubCluster  string
	zones       func() []string // the hub's Nodes' zones, sorted
}

// newHubReader reads through the hub caches; getService and getImport
// read past them.
func newHubReader(caches *hubCaches, written *written, taken *taken, locality localityOptions,
	getService func(ctx context.Context, namespace, name string) (*corev1.Service, error),
	getImport func(ctx context.Context, namespace, name string) (*mcsv1beta1.ServiceImport, error),
) *hubReader {
	return &hubReader{
		services: caches.services, endpoints: caches.endpointInf.GetIndexer(), slices: caches.sliceInf.GetIndexer(),
		imports: caches.imports, namespaces: caches.namespaces, ranges: caches.ranges, written: written, taken: taken,
		getService: getService, getImport: getImport, locality: locality,
	}
}

// hasNamespace reports whether the hub has a namespace.
func (r *hubReader) hasNamespace(ns string) bool {
	_, err := r.namespaces.Get(ns)
	return err == nil
}

// readMember returns the hub view of a member key, and the object of
// someone else that holds its per-cluster Service's name, if one does.
func (r *hubReader) readMember(ctx context.Context, key Key) (endpoints.MemberView, hubObject, error) {
	var view endpoints.MemberView
	var holder hubObject
	name, _ := endpoints.PerClusterName(key.Name, key.Cluster)
	// One of ours for another key may hold the name (a source whose name
	// and cluster join to the same, an import's alias): the name is taken,
	// and the MCS slices are written all the same.
	svc, err := r.liveService(key.Namespace, name)
	if view.Service, holder, err = ownedOrHeld(resourceService, key, svc, err); err != nil {
		return view, nil, err
	}
	view.ServiceTaken = holder != nil
	eps, err := r.liveEndpoints(key.Namespace, name)
	if view.Endpoints, _, err = ownedOrHeld(resourceEndpoints, key, eps, err); err != nil {
		return view, nil, err
	}
	if view.Service == nil && !view.ServiceTaken {
		if holder, err = r.holder(ctx, resourceService, key.Namespace, name); err != nil {
			return view, nil, err
		}
		view.ServiceTaken = holder != nil
	}
	if view.Slices, err = r.hubSlices(key); err != nil {
		return view, holder, err
	}
	imp, err := r.liveImport(key.Namespace, key.Name)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return view, holder, err
	case ownedBy(imp, key.ClusterSet()):
		view.PortClaims = endpoints.ImportPortClaims(imp)
		view.Locality.TrafficDistribution = ptr.Deref(imp.Spec.TrafficDistribution, "")
		if r.locality.hubCluster != "" && endpoints.LocalityOf(imp).PrefersLocal(r.locality.preferLocal) {
			view.Locality.PreferLocal = true
			view.Locality.HubCluster, view.Locality.HubZones = r.locality.hubCluster, r.locality.zones()
		}
	}
	// Zone preference stands in for "this cluster first" where the hub's
	// zones cannot be hinted: read what it needs either way.
	if endpoints.ZoneHinted(view.Locality.TrafficDistribution) {
		if view.Locality.PeersUnzoned, err = r.peersUnzoned(key); err != nil {
			return view, holder, err
		}
	}
	return view, holder, nil
}

// peersUnzoned returns the first, by name, of the other clusters whose hub
// slices of key's service hold a ready endpoint without a zone; "" when
// none does. It reads the cache alone: a change to a peer's slices queues
// key when the cache shows it (queueZonePeers).
func (r *hubReader) peersUnzoned(key Key) (string, error) {
	objs, err := r.slices.ByIndex(byService, serviceKey(key))
	if err != nil {
		return "", err
	}
	first := ""
	for _, o := range objs {
		s, ok := o.(*endpoints.SliceDigest)
		if !ok || !s.Unzoned {
			continue
		}
		if k, ok := hubKey(s); ok && k.Cluster != key.Cluster && (first == "" || k.Cluster < first) {
			first = k.Cluster
		}
	}
	return first, nil
}

// readImport returns the hub view of a clusterset key, and the object of
// someone else that holds its ServiceImport's name, if one does.
func (r *hubReader) readImport(ctx context.Context, key Key) (endpoints.ImportView, hubObject, error) {
	var view endpoints.ImportView
	imp, err := r.liveImport(key.Namespace, key.Name)
	if view.Import, err = owned(resourceServiceImport, key, imp, err); err != nil {
		return view, nil, err
	}
	var holder hubObject
	if view.Import == nil {
		if holder, err = r.holder(ctx, resourceServiceImport, key.Namespace, key.Name); err != nil {
			return view, nil, err
		}
		view.ImportTaken = holder != nil
	}
	svc, err := r.liveService(key.Namespace, endpoints.DerivedServiceName(key.Namespace, key.Name))
	view.Derived, err = owned(resourceService, key, svc, err)
	return view, holder, err
}

// readAlias returns the alias of a clusterset key when it is ours, or else
// the object that holds its name, if one does: someone else's Service, or
// one of ours for another key (a member named after the alias suffix).
func (r *hubReader) readAlias(ctx context.Context, key Key) (*corev1.Service, hubObject, error) {
	name := endpoints.AliasName(key.Name)
	svc, err := r.liveService(key.Namespace, name)
	alias, holder, err := ownedOrHeld(resourceService, key, svc, err)
	if err != nil || alias != nil || holder != nil {
		return alias, holder, err
	}
	holder, err = r.holder(ctx, resourceService, key.Namespace, name)
	return nil, holder, err
}

// ownedOrHeld is owned, but one of ours for another key is the holder of
// the name rather than an error: a key whose object it is not leaves it
// alone and goes on with its other objects.
func ownedOrHeld[T hubObject](resource string, key Key, live T, err error) (T, hubObject, error) {
	obj, err := owned(resource, key, live, err)
	var held *conflictError
	if errors.As(err, &held) {
		return obj, held.holder, nil
	}
	return obj, nil, err
}

// owned turns what a live read returned into the key's object: nil when
// there is none, a conflict when it is ours but for another key (a name
// collision between sources). It only reads.
func owned[T hubObject](resource string, key Key, live T, err error) (T, error) {
	var none T
	switch {
	case apierrors.IsNotFound(err):
		return none, nil
	case err != nil:
		return none, err
	case !ownedBy(live, key):
		var ref hubObject = live
		if d, ok := any(live).(*endpoints.EndpointsDigest); ok {
			ref = d.Meta() // Events need a registered type
		}
		return none, newConflict(resource, ref, key)
	}
	return live, nil
}

// hubSlices returns our hub slices sourced from key, as cached or, where
// the cache has not seen our last write yet, as written; read-only.
func (r *hubReader) hubSlices(key Key) ([]*endpoints.SliceDigest, error) {
	source := sourceKey(key)
	objs, err := r.slices.ByIndex(bySource, source)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*endpoints.SliceDigest, len(objs))
	for _, o := range objs {
		if s, ok := o.(*endpoints.SliceDigest); ok {
			byName[s.Name] = s
		}
	}
	for name, o := range r.written.sourceSlices(source) {
		if o == nil {
			delete(byName, name)
		} else {
			byName[name] = o.(*endpoints.SliceDigest)
		}
	}
	out := make([]*endpoints.SliceDigest, 0, len(byName))
	for _, s := range byName {
		out = append(out, s)
	}
	return out, nil
}

// taken remembers the hub names that objects not ours hold: the hub caches
// see only our objects, so a create that found one is the only sign.
type taken struct {
	mu    stdsync.Mutex
	names map[objectRef]bool
}

// set records whether ref is held by someone else and reports whether
// that is news.
func (t *taken) set(ref objectRef, held bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.names[ref]
	if !held {
		delete(t.names, ref)
		return false
	}
	if t.names == nil {
		t.names = map[objectRef]bool{}
	}
	t.names[ref] = true
	return !was
}

func (t *taken) has(ref objectRef) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.names[ref]
}

// holder returns the object not ours that holds a name found taken, read
// past the cache (the holder may have gone without our caches seeing it),
// or nil.
func (r *hubReader) holder(ctx context.Context, resource, namespace, name string) (hubObject, error) {
	ref := objectRef{resource, namespace, name}
	if !r.taken.has(ref) {
		return nil, nil
	}
	var live hubObject
	var err error
	switch resource {
	case resourceService:
		live, err = r.getService(ctx, namespace, name)
	case resourceServiceImport:
		live, err = r.getImport(ctx, namespace, name)
	}
	switch {
	case apierrors.IsNotFound(err):
		r.taken.set(ref, false)
		return nil, nil
	case err != nil:
		return nil, err
	}
	if live.GetLabels()[endpoints.LabelManagedBy] == endpoints.ManagedByValue {
		r.taken.set(ref, false)
		return nil, nil
	}
	return live, nil
}

// readYourWrites returns the object from the cache unless we wrote it since
// the cache last saw it.
func readYourWrites[T hubObject](w *written, resource, namespace, name string, cached func() (T, error)) (T, error) {
	if o, ok := w.get(resource, namespace, name); ok {
		if o == nil {
			var zero T
			return zero, apierrors.NewNotFound(schema.GroupResource{Resource: resource}, name)
		}
		return o.(T), nil
	}
	return cached()
}

func (r *hubReader) liveService(namespace, name string) (*corev1.Service, error) {
	return readYourWrites(r.written, resourceService, namespace, name, func() (*corev1.Service, error) {
		return r.services.Services(namespace).Get(name)
	})
}

// liveEndpoints returns the digest of a hub Endpoints.
func (r *hubReader) liveEndpoints(namespace, name string) (*endpoints.EndpointsDigest, error) {
	return readYourWrites(r.written, resourceEndpoints, namespace, name, func() (*endpoints.EndpointsDigest, error) {
		o, ok, err := r.endpoints.GetByKey(namespace + "/" + name)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, apierrors.NewNotFound(corev1.Resource("endpoints"), name)
		}
		return o.(*endpoints.EndpointsDigest), nil
	})
}

func (r *hubReader) liveImport(namespace, name string) (*mcsv1beta1.ServiceImport, error) {
	return readYourWrites(r.written, resourceServiceImport, namespace, name, func() (*mcsv1beta1.ServiceImport, error) {
		return r.imports.ServiceImports(namespace).Get(name)
	})
}

// readExports returns the exports of a clusterset key's service as the hub
// records them, one per member of members that has slices for it, and the
// member keys whose slices carry a record that cannot be read (written by
// an older version, or edited by someone), with why.
func (r *hubReader) readExports(key Key, members []string) (exports []endpoints.Export, unreadable []unreadableRecord, err error) {
	for _, name := range members {
		src := Key{Cluster: name, Namespace: key.Namespace, Name: key.Name}
		hubSlices, err := r.hubSlices(src)
		if err != nil {
			return nil, nil, err
		}
		record, ok := endpoints.SourceRecord(key.Namespace, key.Name, name, hubSlices)
		if !ok {
			continue
		}
		e, err := endpoints.ParseExportRecord(name, key.Namespace, key.Name, record)
		if err != nil {
			unreadable = append(unreadable, unreadableRecord{src, err})
			continue
		}
		exports = append(exports, e)
	}
	return exports, unreadable, nil
}

// unreadableRecord is a member key whose slices carry an export record
// that cannot be read, and why.
type unreadableRecord struct {
	src Key
	err error
}
