package sync

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

// Event handlers only map objects to keys. They never write and never block.
// A change queues its keys in the live lane; an informer's initial list, like
// every other sweep, queues them in bulk (see lanes).

// EventHandlers returns the handlers for one member's informers. It satisfies
// the member registry's callback interface.
func (c *Controller) EventHandlers(cluster string) (services, slices, exports cache.ResourceEventHandler) {
	// A member change queues the member key only: its sync records the
	// export in the hub and queues the clusterset key when the record
	// changed.
	service := func(obj interface{}, bulk, _ bool) {
		m, err := metaOf(obj)
		if err != nil || !c.opts.Export.NamespaceSelected(m.GetNamespace()) {
			return
		}
		c.queue.add(Key{Cluster: cluster, Namespace: m.GetNamespace(), Name: m.GetName()}, lane(bulk))
	}
	slice := func(obj interface{}, bulk, _ bool) {
		m, err := metaOf(obj)
		if err != nil || !c.opts.Export.NamespaceSelected(m.GetNamespace()) {
			return
		}
		svc := m.GetLabels()[discoveryv1.LabelServiceName]
		if svc == "" {
			return
		}
		c.queue.add(Key{Cluster: cluster, Namespace: m.GetNamespace(), Name: svc}, lane(bulk))
	}
	sliceHandler := changeHandler(slice)
	// A slice moved to another service (label change) must resync the old one.
	sliceHandler.UpdateFunc = func(old, cur interface{}) {
		o, n := old.(*endpoints.MemberSlice), cur.(*endpoints.MemberSlice)
		if o.ResourceVersion == n.ResourceVersion {
			return
		}
		if o.Labels[discoveryv1.LabelServiceName] != n.Labels[discoveryv1.LabelServiceName] {
			slice(old, false, false)
		}
		slice(cur, false, false)
	}
	return changeHandler(service), sliceHandler, changeHandler(service)
}

// ClusterSynced queues everything a newly synced (or rotated) member may
// affect: each of its services, and each hub object sourced from it, which
// garbage collects what it no longer has.
func (c *Controller) ClusterSynced(cluster string) {
	if st, _ := c.members.Lookup(cluster); !st.Unreachable {
		c.policy.stop(cluster) // connected: no policy step is due
	}
	c.resyncMember(cluster)
}

// resyncMember queues every key of a member: each service of its caches,
// once it has synced, and each hub object sourced from it. It wakes what
// waited for the member.
func (c *Controller) resyncMember(cluster string) {
	st, m := c.members.Lookup(cluster)
	services := 0
	if m != nil && st.Phase == lifecycle.Synced {
		svcs, err := m.ServiceLister().List(labels.Everything())
		if err != nil {
			// Listing a cache fails only on a broken selector; the hub's
			// objects below are queued all the same.
			utilruntime.HandleErrorWithContext(context.TODO(), fmt.Errorf("listing the Services of member %q: %w", cluster, err), "Listing failed", "cluster", cluster)
		}
		for _, s := range svcs {
			if !c.opts.Export.NamespaceSelected(s.Namespace) {
				continue
			}
			c.queue.add(Key{Cluster: cluster, Namespace: s.Namespace, Name: s.Name}, aSweep)
		}
		services = len(svcs)
		// A ServiceExport without its Service has a key too: its status
		// says the Service is missing.
		exports, err := m.ServiceExports()
		if err != nil {
			utilruntime.HandleErrorWithContext(context.TODO(), fmt.Errorf("listing the ServiceExports of member %q: %w", cluster, err), "Listing failed", "cluster", cluster)
		}
		for _, se := range exports {
			if c.opts.Export.NamespaceSelected(se.Namespace) {
				c.queue.add(Key{Cluster: cluster, Namespace: se.Namespace, Name: se.Name}, aSweep)
			}
		}
	}
	c.enqueueClusterObjects(cluster)
	c.wakeMember(cluster)
	klog.V(2).InfoS("Queued member", "cluster", cluster, "phase", st.Phase.String(), "services", services)
}

// ClusterHealthChanged publishes the member's health on its Lease (see
// runMemberLeases) and re-syncs a member when it recovers. When it fails
// (or a registration that cannot connect is retried), it applies the step
// of its unreachable policy that is due now, if it changed, and sets the
// member's one policy timer to the moment the next step takes effect. A
// recovery stops the timer.
func (c *Controller) ClusterHealthChanged(cluster string, healthy bool) {
	c.wakeLeases()
	if healthy {
		// Its hub objects differ from those of a reachable member only if
		// a policy step other than Keep applied, or its ServiceExports'
		// status was not written meanwhile (syncExportStatus): a probe
		// that flaps under load costs no resync of the member otherwise.
		if c.policy.stop(cluster) || c.writesExportStatus() {
			c.resyncMember(cluster)
		}
		return
	}
	c.applyPolicy(cluster)
}

// applyPolicy resyncs the member when the step of its unreachable policy
// due now differs from the one last applied (an outage is reported a probe
// or more after it began, and a registration's overrides may change), and
// sets its policy timer to the next step, which does the same.
func (c *Controller) applyPolicy(cluster string) {
	st, _ := c.members.Lookup(cluster)
	step, next := st.UnreachableStep(c.opts.Clock.Now(), c.opts.UnreachableGrace, c.opts.UnreachableWithdraw)
	if c.policy.applied(cluster, step) {
		c.resyncMember(cluster)
	}
	c.policy.set(cluster, next, func() { c.applyPolicy(cluster) })
}

// ClusterRemoved queues every hub object sourced from a removed member, which
// withdraws them, and the merged objects it contributed to: they drop it at
// once, as they merge only registered members.
func (c *Controller) ClusterRemoved(cluster string) {
	c.policy.stop(cluster)
	c.enqueueClusterObjects(cluster)
	c.enqueueImportsOf(cluster)
	c.wakeMember(cluster)
	c.waits.dropCluster(cluster)
}

// enqueueImportsOf queues the clusterset key of every ServiceImport that
// lists cluster in its status, as cached or as we last wrote it.
func (c *Controller) enqueueImportsOf(cluster string) {
	objs, err := c.caches.importInf.GetIndexer().ByIndex(byCluster, cluster)
	if err != nil {
		utilruntime.HandleErrorWithContext(context.TODO(), fmt.Errorf("listing the ServiceImports of cluster %q: %w", cluster, err), "Listing failed", "cluster", cluster)
	}
	for _, o := range c.written.objects(resourceServiceImport) {
		if keys, _ := importClusterIndex(o); slices.Contains(keys, cluster) {
			objs = append(objs, o)
		}
	}
	for _, o := range objs {
		if m, err := metaOf(o); err == nil {
			c.queue.add(Key{Namespace: m.GetNamespace(), Name: m.GetName()}, aSweep)
		}
	}
}

// enqueueClusterObjects queues the keys of every hub object sourced from a
// cluster, and their clusterset keys, whose merge reads the records on that
// cluster's slices; and the cluster's keys something is kept of, whose
// syncs keep or drop it (memberStates).
func (c *Controller) enqueueClusterObjects(cluster string) {
	for _, k := range c.state.keys(cluster) {
		c.queue.add(k, aSweep)
	}
	for _, k := range c.written.ownersIn(cluster) {
		c.queue.add(k, aSweep)
		c.queue.add(k.ClusterSet(), aSweep)
	}
	for _, inf := range []cache.SharedIndexInformer{c.caches.serviceInf, c.caches.endpointInf, c.caches.sliceInf} {
		objs, err := inf.GetIndexer().ByIndex(byCluster, cluster)
		if err != nil {
			// Only an index that does not exist fails, a bug: say so.
			utilruntime.HandleErrorWithContext(context.TODO(), fmt.Errorf("listing the hub objects of cluster %q: %w", cluster, err), "Listing failed", "cluster", cluster)
			continue
		}
		for _, o := range objs {
			if m, err := metaOf(o); err == nil {
				if k, ok := hubKey(m); ok {
					c.queue.add(k, aSweep)
					c.queue.add(k.ClusterSet(), aSweep)
				}
			}
		}
	}
}

// enqueueHubObjects queues the owner of every cached hub object.
func (c *Controller) enqueueHubObjects(sel labels.Selector) {
	for resource, inf := range c.caches.ours() {
		for _, o := range inf.GetStore().List() {
			if m, err := metaOf(o); err == nil && sel.Matches(labels.Set(m.GetLabels())) {
				c.enqueueHub(resource, o, true)
			}
		}
	}
}

// hubHandler handles the events of one hub cache: it tells written what the
// cache has seen and queues the owner of any change that is not the echo of
// our own write, so that a change made by someone else is undone.
//
// Slice events, echoes included, also queue the clusterset key whose merge
// reads the export record on the slice, when the record may have changed
// for a reader of the cache: the slice came or went, or its record differs.
// ServiceImport events, echoes included, queue the member keys that read
// what the import says of their exports, when that changed.
func (c *Controller) hubHandler(resource string) cache.ResourceEventHandler {
	h := changeHandler(func(obj interface{}, initialList, gone bool) {
		if !c.written.seen(resource, obj, gone) {
			c.enqueueHub(resource, obj, initialList)
		}
	})
	switch resource {
	case resourceServiceImport:
		return c.importHandler(h)
	case resourceEndpointSlice:
	default:
		return h
	}
	add, update, remove := h.AddFunc, h.UpdateFunc, h.DeleteFunc
	h.AddFunc = func(obj interface{}, initialList bool) {
		add(obj, initialList)
		c.enqueueMerge(obj)
		if !initialList {
			c.queueZonePeers(nil, obj)
		}
	}
	h.UpdateFunc = func(old, cur interface{}) {
		update(old, cur)
		o, err1 := metaOf(old)
		n, err2 := metaOf(cur)
		if err1 == nil && err2 == nil && o.GetAnnotations()[endpoints.AnnotationExportRecord] != n.GetAnnotations()[endpoints.AnnotationExportRecord] {
			c.enqueueMerge(cur)
		}
		c.queueZonePeers(old, cur)
	}
	h.DeleteFunc = func(obj interface{}) {
		remove(obj)
		c.enqueueMerge(obj)
		c.queueZonePeers(obj, nil)
	}
	return h
}

// queueZonePeers queues the member keys of the other sources of a
// service when a slice event changed whether one source holds a ready
// endpoint without a zone, and the service's import asks for zone hints:
// their hints depend on it (endpoints.HintsFor).
func (c *Controller) queueZonePeers(old, cur interface{}) {
	unzoned := func(obj interface{}) (*endpoints.SliceDigest, bool) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		d, ok := obj.(*endpoints.SliceDigest)
		return d, ok && d.Unzoned
	}
	o, wasUnzoned := unzoned(old)
	n, isUnzoned := unzoned(cur)
	if wasUnzoned == isUnzoned {
		return
	}
	ref := n
	if ref == nil {
		ref = o
	}
	from, ok := hubKey(ref)
	if !ok || from.IsClusterSet() {
		return
	}
	imp, err := c.caches.imports.ServiceImports(from.Namespace).Get(from.Name)
	if err != nil {
		return
	}
	if !endpoints.LocalityOf(imp).ZoneHinted {
		return
	}
	objs, _ := c.caches.sliceInf.GetIndexer().ByIndex(byService, serviceKey(from))
	peers := map[Key]bool{}
	for _, obj := range objs {
		if m, err := metaOf(obj); err == nil {
			if k, ok := hubKey(m); ok && k.Cluster != from.Cluster {
				peers[k] = true
			}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(peers), compareKeys) {
		c.queue.addFound(from, k)
	}
}

// importHandler extends h, the handler of the ServiceImport cache, to queue
// the member keys of an import's clusters when what their syncs read of it
// changed (see importReaders).
func (c *Controller) importHandler(h cache.ResourceEventHandlerDetailedFuncs) cache.ResourceEventHandler {
	changed := func(old, cur interface{}) {
		o, _ := old.(*mcsv1beta1.ServiceImport)
		n, _ := cur.(*mcsv1beta1.ServiceImport)
		ref := n
		if ref == nil {
			ref = o
		}
		if ref != nil {
			c.queueImportReaders(Key{Namespace: ref.Namespace, Name: ref.Name}, o, n)
		}
	}
	add, update, remove := h.AddFunc, h.UpdateFunc, h.DeleteFunc
	h.AddFunc = func(obj interface{}, initialList bool) {
		add(obj, initialList)
		if !initialList {
			changed(nil, obj)
		}
	}
	h.UpdateFunc = func(old, cur interface{}) {
		update(old, cur)
		changed(old, cur)
	}
	h.DeleteFunc = func(obj interface{}) {
		remove(obj)
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		changed(obj, nil)
	}
	return h
}

// queueImportReaders queues the member keys of importReaders, found by an
// event of the ServiceImport of key.
func (c *Controller) queueImportReaders(key Key, before, after *mcsv1beta1.ServiceImport) {
	for _, k := range c.importReaders(key, before, after) {
		c.queue.addFound(key, k)
	}
}

// unshadowed queues the keys that read an overlay entry of another key,
// dropped while the cache shows something else: the clusterset key that
// merged a slice's record, the member keys that read an import.
func (c *Controller) unshadowed(ref objectRef, o overlayEntry) {
	switch ref.resource {
	case resourceEndpointSlice:
		c.queue.add(o.owner.ClusterSet(), why{origin: o.owner.Cluster})
	case resourceServiceImport:
		overlaid, _ := o.obj.(*mcsv1beta1.ServiceImport)
		cached, err := c.caches.imports.ServiceImports(ref.namespace).Get(ref.name)
		if err != nil {
			cached = nil
		}
		c.queueImportReaders(Key{Namespace: ref.namespace, Name: ref.name}, overlaid, cached)
	}
}

// enqueueMerge queues the clusterset key of the source of one of our
// slices, coalesced: the sync that wrote the slice queued it already, so
// this is the safety net for a merge that read something else.
func (c *Controller) enqueueMerge(obj interface{}) {
	m, err := metaOf(obj)
	if err != nil {
		return
	}
	if k, ok := ownerOf(resourceEndpointSlice, m); ok && !k.IsClusterSet() {
		c.queue.add(k.ClusterSet(), why{coalesce: true})
	}
}

// enqueueHub queues the key that owns one of our hub objects of resource,
// so that a change made by someone else is undone and a deleted object
// comes back. The echoes of our own writes never get here (written.seen),
// so a change is live; sweeps and the initial list are bulk.
func (c *Controller) enqueueHub(resource string, obj interface{}, bulk bool) {
	m, err := metaOf(obj)
	if err != nil {
		return
	}
	if k, ok := ownerOf(resource, m); ok {
		c.queue.add(k, lane(bulk))
	}
}

// namespaceAdded wakes the keys that waited for a hub namespace.
func (c *Controller) namespaceAdded(obj interface{}) {
	if ns, ok := obj.(*corev1.Namespace); ok {
		c.waits.wake(waitNamespace(ns.Name), false)
	}
}

// changeHandler calls f on add, on delete (tombstones unwrapped; gone is
// true) and on updates that changed the resourceVersion; initialList is true
// for the adds of an informer's initial list.
func changeHandler(f func(obj interface{}, initialList, gone bool)) cache.ResourceEventHandlerDetailedFuncs {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj interface{}, initialList bool) { f(obj, initialList, false) },
		UpdateFunc: func(old, cur interface{}) {
			o, err1 := metaOf(old)
			n, err2 := metaOf(cur)
			if err1 == nil && err2 == nil && o.GetResourceVersion() == n.GetResourceVersion() {
				return
			}
			f(cur, false, false)
		},
		DeleteFunc: func(obj interface{}) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			f(obj, false, true)
		},
	}
}

// ClusterSyncTimedOut is told when a member misses its first-sync timeout.
// Nothing waits for it: merged imports read the hub's records of the
// member, and its own keys wait for its sync.
func (c *Controller) ClusterSyncTimedOut(string) {}

// wakeMember wakes what waited for a member that synced or went away.
func (c *Controller) wakeMember(cluster string) {
	c.waits.wake(waitMemberSynced(cluster), true)
}

// memberSynced reports whether what waits for a member's sync may go on:
// it synced, it is no longer registered (its objects are withdrawn), or the
// unreachable policy withdraws it.
func (c *Controller) memberSynced(cluster string) bool {
	st, _ := c.members.Lookup(cluster)
	return st.Phase == lifecycle.Synced || !st.Registered() || c.unreachableStep(st) == lifecycle.Withdraw
}

// serviceRangesChanged resyncs every member when the hub's ServiceCIDRs
// change: what their endpoints may be depends on them.
func (c *Controller) serviceRangesChanged(_ interface{}, initialList, _ bool) {
	if initialList {
		return // the startup sweep reads them
	}
	klog.InfoS("Hub ServiceCIDRs changed; resyncing every member")
	for _, name := range c.members.Names() {
		c.resyncMember(name)
	}
}
