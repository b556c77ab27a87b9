package sync

import (
	"context"
	stdsync "sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// The reader builds the hub view of a key: what the hub holds of the
// objects the key owns, from the hub caches overlaid with our writes the
// caches have not shown yet (written). An object that holds one of the
// key's names but is ours for another source is a conflict: reading fails.
// A name held by an object that is not ours at all is found when a create
// fails (taken), and read past the cache from then on.

// readMember returns the hub view of a member key.
func (c *Controller) readMember(ctx context.Context, key Key) (endpoints.MemberView, error) {
	var view endpoints.MemberView
	name, _ := endpoints.PerClusterName(key.Name, key.Cluster)
	svc, err := c.liveService(key.Namespace, name)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return view, err
	case !ownedBy(svc, key):
		// Ours, but written for another source whose name collides.
		return view, c.conflict(resourceService, svc, key)
	default:
		view.Service = svc
	}
	eps, err := c.liveEndpoints(key.Namespace, name)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return view, err
	case !ownedBy(eps, key):
		return view, c.conflict(resourceEndpoints, eps.Meta(), key)
	default:
		view.Endpoints = eps
	}
	if view.Service == nil {
		if view.ServiceTaken, err = c.stillTaken(ctx, resourceService, key.Namespace, name); err != nil {
			return view, err
		}
	}
	view.Slices, err = c.hubSlices(key)
	return view, err
}

// readImport returns the hub view of a clusterset key.
func (c *Controller) readImport(ctx context.Context, key Key) (endpoints.ImportView, error) {
	var view endpoints.ImportView
	imp, err := c.liveImport(key.Namespace, key.Name)
	switch {
	case apierrors.IsNotFound(err):
		if view.ImportTaken, err = c.stillTaken(ctx, resourceServiceImport, key.Namespace, key.Name); err != nil {
			return view, err
		}
	case err != nil:
		return view, err
	default:
		view.Import = imp
	}
	svc, err := c.liveService(key.Namespace, endpoints.DerivedServiceName(key.Namespace, key.Name))
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return view, err
	case !ownedBy(svc, key):
		return view, c.conflict(resourceService, svc, key)
	default:
		view.Derived = svc
	}
	return view, nil
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

func (t *taken) set(ref objectRef, held bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !held {
		delete(t.names, ref)
		return
	}
	if t.names == nil {
		t.names = map[objectRef]bool{}
	}
	t.names[ref] = true
}

func (t *taken) has(ref objectRef) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.names[ref]
}

// stillTaken reports whether a name found taken is still held by an
// object that is not ours, reading past the cache: the holder may have gone
// without our caches seeing it.
func (c *Controller) stillTaken(ctx context.Context, resource, namespace, name string) (bool, error) {
	ref := objectRef{resource, namespace, name}
	if !c.taken.has(ref) {
		return false, nil
	}
	var labels map[string]string
	var err error
	switch resource {
	case resourceService:
		var o *corev1.Service
		if o, err = c.hub.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{}); err == nil {
			labels = o.Labels
		}
	case resourceServiceImport:
		var o *mcsv1beta1.ServiceImport
		if o, err = c.hubMCS.MulticlusterV1beta1().ServiceImports(namespace).Get(ctx, name, metav1.GetOptions{}); err == nil {
			labels = o.Labels
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		c.taken.set(ref, false)
		return false, nil
	case err != nil:
		return false, err
	}
	held := labels[endpoints.LabelManagedBy] != endpoints.ManagedByValue
	c.taken.set(ref, held)
	return held, nil
}
