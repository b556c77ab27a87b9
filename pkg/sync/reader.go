package sync

import (
	"context"
	stdsync "sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

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

// readMember returns the hub view of a member key, and the object of
// someone else that holds its per-cluster Service's name, if one does.
func (c *Controller) readMember(ctx context.Context, key Key) (endpoints.MemberView, hubObject, error) {
	var view endpoints.MemberView
	name, _ := endpoints.PerClusterName(key.Name, key.Cluster)
	svc, err := c.liveService(key.Namespace, name)
	if view.Service, err = owned(resourceService, key, svc, err); err != nil {
		return view, nil, err
	}
	eps, err := c.liveEndpoints(key.Namespace, name)
	if view.Endpoints, err = owned(resourceEndpoints, key, eps, err); err != nil {
		return view, nil, err
	}
	var holder hubObject
	if view.Service == nil {
		if holder, err = c.holder(ctx, resourceService, key.Namespace, name); err != nil {
			return view, nil, err
		}
		view.ServiceTaken = holder != nil
	}
	view.Slices, err = c.hubSlices(key)
	return view, holder, err
}

// readImport returns the hub view of a clusterset key, and the object of
// someone else that holds its ServiceImport's name, if one does.
func (c *Controller) readImport(ctx context.Context, key Key) (endpoints.ImportView, hubObject, error) {
	var view endpoints.ImportView
	imp, err := c.liveImport(key.Namespace, key.Name)
	if view.Import, err = owned(resourceServiceImport, key, imp, err); err != nil {
		return view, nil, err
	}
	var holder hubObject
	if view.Import == nil {
		if holder, err = c.holder(ctx, resourceServiceImport, key.Namespace, key.Name); err != nil {
			return view, nil, err
		}
		view.ImportTaken = holder != nil
	}
	svc, err := c.liveService(key.Namespace, endpoints.DerivedServiceName(key.Namespace, key.Name))
	view.Derived, err = owned(resourceService, key, svc, err)
	return view, holder, err
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
func (c *Controller) hubSlices(key Key) ([]*endpoints.SliceDigest, error) {
	source := sourceKey(key)
	objs, err := c.sliceInf.GetIndexer().ByIndex(bySource, source)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*endpoints.SliceDigest, len(objs))
	for _, o := range objs {
		if s, ok := o.(*endpoints.SliceDigest); ok {
			byName[s.Name] = s
		}
	}
	for name, o := range c.written.sourceSlices(source) {
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
func (c *Controller) holder(ctx context.Context, resource, namespace, name string) (hubObject, error) {
	ref := objectRef{resource, namespace, name}
	if !c.taken.has(ref) {
		return nil, nil
	}
	var live hubObject
	var err error
	switch resource {
	case resourceService:
		live, err = c.hub.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	case resourceServiceImport:
		live, err = c.hubMCS.MulticlusterV1beta1().ServiceImports(namespace).Get(ctx, name, metav1.GetOptions{})
	}
	switch {
	case apierrors.IsNotFound(err):
		c.taken.set(ref, false)
		return nil, nil
	case err != nil:
		return nil, err
	}
	if live.GetLabels()[endpoints.LabelManagedBy] == endpoints.ManagedByValue {
		c.taken.set(ref, false)
		return nil, nil
	}
	return live, nil
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
