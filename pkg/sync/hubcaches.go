package sync

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"
	mcslisters "sigs.k8s.io/mcs-api/pkg/client/listers/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// Hub informer indexes.
const (
	// byCluster indexes our hub objects by source cluster, and
	// ServiceImports by the clusters they list.
	byCluster = "cluster"
	// bySource indexes our MCS slices by "<namespace>/<service>/<cluster>".
	bySource = "source"
	// byService indexes our MCS slices by "<namespace>/<service>".
	byService = "service"
)

// hubCaches are the controller's informers of the hub: our objects,
// indexed byCluster, bySource and byService, the namespaces, and as configured the
// ServiceCIDRs and the member Leases. The controller adds their handlers.
type hubCaches struct {
	// starters start the informer factories.
	starters []func(stop <-chan struct{})

	services   corelisters.ServiceLister
	serviceInf cache.SharedIndexInformer
	// The Endpoints and EndpointSlice caches hold digests, made from their
	// metadata alone (digestMeta).
	endpointInf cache.SharedIndexInformer
	sliceInf    cache.SharedIndexInformer
	imports     mcslisters.ServiceImportLister
	importInf   cache.SharedIndexInformer
	namespaces  corelisters.NamespaceLister
	nsInf       cache.SharedIndexInformer
	// ranges are the hub's Service ranges: the fixed ones, and with
	// WatchServiceCIDRs those cidrInf caches (nil otherwise).
	ranges  serviceRanges
	cidrInf cache.SharedIndexInformer
	// leaseInf caches the member Leases, memberLeases lists them; both nil
	// without member Leases (Options.LeaseNamespace).
	leaseInf     cache.SharedIndexInformer
	memberLeases coordinationlisters.LeaseNamespaceLister
	// nodeInf caches the hub's Nodes, reduced to their zones (watchNodes),
	// where the hub is a member (Options.HubCluster); else both are nil.
	nodeInf cache.SharedIndexInformer
	// nodesCounted reports whether the handler that counts the Nodes'
	// zones has seen the first list.
	nodesCounted func() bool
}

// newHubCaches builds the hub informers, not started; the member Leases
// are read through opts.LeaseClient, the metadata of our EndpointSlices and
// Endpoints through opts.HubMetadata.
func newHubCaches(hub kubernetes.Interface, hubMCS mcsclientset.Interface, opts Options) (*hubCaches, error) {
	// The hub caches hold only our objects: every write is labelled, and
	// filtering keeps memory proportional to our output, not the hub's size.
	ours := labels.Set{endpoints.LabelManagedBy: endpoints.ManagedByValue}.String()
	kubeFactory := informers.NewSharedInformerFactoryWithOptions(hub, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = ours }),
		informers.WithTransform(stripHubObject))
	// The EndpointSlices and Endpoints, which carry every aggregated
	// endpoint, are watched as metadata: their digests are in it.
	metaFactory := metadatainformer.NewFilteredSharedInformerFactory(opts.HubMetadata, 0, metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.LabelSelector = ours })
	// Slices are recognised by their managed-by label alone: mirrored slices
	// copy our other labels from the per-cluster Endpoints.
	sliceFactory := metadatainformer.NewFilteredSharedInformerFactory(opts.HubMetadata, 0, metav1.NamespaceAll,
		func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{discoveryv1.LabelManagedBy: endpoints.SliceManagedByValue}.String()
		})
	mcsFactory := mcsinformers.NewSharedInformerFactoryWithOptions(hubMCS, 0,
		mcsinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = ours }),
		mcsinformers.WithTransform(stripHubObject))
	nsFactory := informers.NewSharedInformerFactoryWithOptions(hub, 0, informers.WithTransform(stripHubObject))

	h := &hubCaches{
		serviceInf:  kubeFactory.Core().V1().Services().Informer(),
		services:    kubeFactory.Core().V1().Services().Lister(),
		endpointInf: metaFactory.ForResource(corev1.SchemeGroupVersion.WithResource(resourceEndpoints)).Informer(),
		sliceInf:    sliceFactory.ForResource(discoveryv1.SchemeGroupVersion.WithResource(resourceEndpointSlice)).Informer(),
		importInf:   mcsFactory.Multicluster().V1beta1().ServiceImports().Informer(),
		imports:     mcsFactory.Multicluster().V1beta1().ServiceImports().Lister(),
		nsInf:       nsFactory.Core().V1().Namespaces().Informer(),
		namespaces:  nsFactory.Core().V1().Namespaces().Lister(),
		ranges:      serviceRanges{fixed: opts.Addresses.HubServiceRanges},
		starters:    []func(<-chan struct{}){kubeFactory.Start, metaFactory.Start, sliceFactory.Start, mcsFactory.Start, nsFactory.Start},
	}
	read := newFullReader(hub)
	if err := h.endpointInf.SetTransform(digestMeta(resourceEndpoints, read, opts.Metrics.HubFullReads.WithLabelValues(resourceEndpoints))); err != nil {
		return nil, err
	}
	if err := h.sliceInf.SetTransform(digestMeta(resourceEndpointSlice, read, opts.Metrics.HubFullReads.WithLabelValues(resourceEndpointSlice))); err != nil {
		return nil, err
	}
	if opts.WatchServiceCIDRs {
		h.cidrInf = nsFactory.Networking().V1().ServiceCIDRs().Informer()
		h.ranges.lister = nsFactory.Networking().V1().ServiceCIDRs().Lister()
	}
	if opts.LeaseNamespace != "" && opts.LeaseDuration > 0 {
		h.watchMemberLeases(opts.LeaseClient, opts.LeaseNamespace)
	}
	if opts.HubCluster != "" {
		h.watchNodes(hub)
	}
	for _, inf := range []cache.SharedIndexInformer{h.serviceInf, h.endpointInf, h.sliceInf} {
		if err := inf.AddIndexers(cache.Indexers{byCluster: clusterIndex}); err != nil {
			return nil, err
		}
	}
	if err := h.sliceInf.AddIndexers(cache.Indexers{bySource: sourceIndex, byService: serviceIndex}); err != nil {
		return nil, err
	}
	if err := h.importInf.AddIndexers(cache.Indexers{byCluster: importClusterIndex}); err != nil {
		return nil, err
	}
	return h, nil
}

// watchMemberLeases caches the member Leases in the daemon's namespace,
// whoever wrote them: the merging replica deletes those of unregistered
// members from it, and every replica reads the outages they publish
// (outageStart). The hub caches count as synced once it is.
func (h *hubCaches) watchMemberLeases(client kubernetes.Interface, namespace string) {
	selector := labels.Set{endpoints.LabelManagedBy: endpoints.ManagedByValue}.String() + "," + LabelLeaseCluster
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }),
		informers.WithTransform(stripHubObject))
	h.leaseInf = f.Coordination().V1().Leases().Informer()
	h.memberLeases = f.Coordination().V1().Leases().Lister().Leases(namespace)
	h.starters = append(h.starters, f.Start)
}

// ours are the caches of our hub objects, by resource.
func (h *hubCaches) ours() map[string]cache.SharedIndexInformer {
	return map[string]cache.SharedIndexInformer{
		resourceService: h.serviceInf, resourceEndpoints: h.endpointInf, resourceEndpointSlice: h.sliceInf, resourceServiceImport: h.importInf,
	}
}

// start starts the informers.
func (h *hubCaches) start(stop <-chan struct{}) {
	for _, start := range h.starters {
		start(stop)
	}
}

// hasSynced reports whether every informer has synced.
func (h *hubCaches) hasSynced() bool {
	return h.serviceInf.HasSynced() && h.endpointInf.HasSynced() && h.sliceInf.HasSynced() &&
		h.importInf.HasSynced() && h.nsInf.HasSynced() && (h.cidrInf == nil || h.cidrInf.HasSynced()) &&
		(h.leaseInf == nil || h.leaseInf.HasSynced()) && (h.nodeInf == nil || h.nodeInf.HasSynced() && h.nodesCounted())
}

// clusterIndex is the byCluster index function.
func clusterIndex(obj interface{}) ([]string, error) {
	m, err := metaOf(obj)
	if err != nil {
		return nil, nil
	}
	if k, ok := hubKey(m); ok && !k.IsClusterSet() {
		return []string{k.Cluster}, nil
	}
	return nil, nil
}

// importClusterIndex indexes ServiceImports by the clusters their status
// lists.
func importClusterIndex(obj interface{}) ([]string, error) {
	imp, ok := obj.(*mcsv1beta1.ServiceImport)
	if !ok {
		return nil, nil
	}
	out := make([]string, 0, len(imp.Status.Clusters))
	for _, c := range imp.Status.Clusters {
		out = append(out, c.Cluster)
	}
	return out, nil
}

// sourceIndex is the bySource index function.
func sourceIndex(obj interface{}) ([]string, error) {
	m, err := metaOf(obj)
	if err != nil {
		return nil, nil
	}
	if k, ok := hubKey(m); ok && !k.IsClusterSet() {
		return []string{sourceKey(k)}, nil
	}
	return nil, nil
}

// serviceIndex is the byService index function.
func serviceIndex(obj interface{}) ([]string, error) {
	m, err := metaOf(obj)
	if err != nil {
		return nil, nil
	}
	if k, ok := hubKey(m); ok && !k.IsClusterSet() {
		return []string{serviceKey(k)}, nil
	}
	return nil, nil
}

// stripHubObject is the transform of the typed hub caches: managed fields
// dropped. It also digests our EndpointSlices and Endpoints (digestRead),
// whose caches are fed from metadata (digestMeta): here they are the
// responses to our own writes, which the overlay of written.go holds.
func stripHubObject(obj interface{}) (interface{}, error) {
	if o, ok := obj.(runtime.Object); ok {
		return digestRead(o), nil
	}
	return obj, nil
}
