package clusters

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"
	mcslisters "sigs.k8s.io/mcs-api/pkg/client/listers/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/compact"
)

// sliceServiceIndex indexes member EndpointSlices by "<namespace>/<service>".
const sliceServiceIndex = "service"

// Clients are the API clients of one member.
type Clients struct {
	// Kube serves core/v1, discovery.k8s.io/v1 and discovery for real
	// members (newMemberClients): calling any other group panics.
	Kube kubernetes.Interface
	// MCS is nil unless ServiceExports are watched.
	MCS mcsclientset.Interface
}

// EventHandlers are registered on a member's informers before they start.
// Any of them may be nil.
type EventHandlers struct {
	Services       cache.ResourceEventHandler
	EndpointSlices cache.ResourceEventHandler
	ServiceExports cache.ResourceEventHandler
}

// Cluster is one connected member: its clients, informers and listers.
// A Cluster is immutable once started; a kubeconfig change builds a new one.
type Cluster struct {
	name    string
	hash    string
	secret  string // namespace/name of the registering Secret
	clients Clients

	services     cache.SharedIndexInformer
	slices       cache.SharedIndexInformer
	exports      cache.SharedIndexInformer // nil unless watched
	serviceList  corelisters.ServiceLister
	exportLister mcslisters.ServiceExportLister

	stopOnce sync.Once
	stop     chan struct{}
	synced   atomic.Bool
	timedOut atomic.Bool
	started  time.Time

	probeNow       chan struct{} // asks for a probe now (after syncing)
	policy         policyOverride
	healthy        atomic.Bool
	lastHealthy    atomic.Int64 // unix nanoseconds
	unhealthySince atomic.Int64 // unix nanoseconds; 0 before the first failure
}

func newCluster(name, hash, secret string, clients Clients, handlers EventHandlers) (*Cluster, error) {
	c := &Cluster{
		name:     name,
		hash:     hash,
		secret:   secret,
		clients:  clients,
		stop:     make(chan struct{}),
		probeNow: make(chan struct{}, 1),
	}
	// No resync: the controller is level-triggered from events alone.
	kf := informers.NewSharedInformerFactoryWithOptions(clients.Kube, 0, informers.WithTransform(stripMemberObject))
	c.services = kf.Core().V1().Services().Informer()
	c.serviceList = kf.Core().V1().Services().Lister()
	c.slices = kf.Discovery().V1().EndpointSlices().Informer()
	if err := c.slices.AddIndexers(cache.Indexers{sliceServiceIndex: sliceService}); err != nil {
		return nil, err
	}
	if clients.MCS != nil {
		mf := mcsinformers.NewSharedInformerFactoryWithOptions(clients.MCS, 0, mcsinformers.WithTransform(stripMemberObject))
		c.exports = mf.Multicluster().V1beta1().ServiceExports().Informer()
		c.exportLister = mf.Multicluster().V1beta1().ServiceExports().Lister()
	}
	for _, h := range []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{{c.services, handlers.Services}, {c.slices, handlers.EndpointSlices}, {c.exports, handlers.ServiceExports}} {
		if h.inf == nil || h.h == nil {
			continue
		}
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return nil, fmt.Errorf("adding event handler: %w", err)
		}
	}
	return c, nil
}

// Name is the member's cluster name.
func (c *Cluster) Name() string { return c.name }

// Secret is the namespace/name of the Secret that registered the member.
func (c *Cluster) Secret() string { return c.secret }

// Clients returns the member's API clients.
func (c *Cluster) Clients() Clients { return c.clients }

// HasSynced reports whether every informer of the member has synced once.
// It stays true if the member later becomes unreachable: its caches then hold
// the last-known state.
func (c *Cluster) HasSynced() bool { return c.synced.Load() }

// SyncTimedOut reports whether the member missed its sync timeout and has
// not synced since.
func (c *Cluster) SyncTimedOut() bool { return c.timedOut.Load() && !c.synced.Load() }

// ServiceLister lists the member's Services.
func (c *Cluster) ServiceLister() corelisters.ServiceLister { return c.serviceList }

// ServiceExport returns the member's ServiceExport namespace/name, or nil when
// there is none or ServiceExports are not watched.
func (c *Cluster) ServiceExport(namespace, name string) *mcsv1beta1.ServiceExport {
	if c.exportLister == nil {
		return nil
	}
	se, err := c.exportLister.ServiceExports(namespace).Get(name)
	if err != nil {
		return nil
	}
	return se
}

// EndpointSlices returns the member's EndpointSlices of service namespace/name.
// The objects are shared with the cache: callers must not modify them.
func (c *Cluster) EndpointSlices(namespace, service string) ([]*discoveryv1.EndpointSlice, error) {
	objs, err := c.slices.GetIndexer().ByIndex(sliceServiceIndex, namespace+"/"+service)
	if err != nil {
		return nil, err
	}
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// start runs the informers and waits, up to timeout, for them to sync. It
// returns whether they synced; when they did not, the informers keep trying
// and onSynced is called if they catch up later.
func (c *Cluster) start(timeout time.Duration, onSynced func()) bool {
	syncs := []cache.InformerSynced{c.services.HasSynced, c.slices.HasSynced}
	go c.services.Run(c.stop)
	go c.slices.Run(c.stop)
	if c.exports != nil {
		go c.exports.Run(c.stop)
		syncs = append(syncs, c.exports.HasSynced)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if cache.WaitForCacheSync(c.stop, syncs...) {
			c.synced.Store(true)
			select {
			case c.probeNow <- struct{}{}:
			default:
			}
			onSynced()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	select {
	case <-done:
		return c.synced.Load()
	case <-ctx.Done():
		return false
	case <-c.stop:
		return false
	}
}

// shutdown stops the member's informers. It is safe to call more than once.
func (c *Cluster) shutdown() {
	c.stopOnce.Do(func() { close(c.stop) })
}

// sliceService is the index function of sliceServiceIndex.
func sliceService(obj interface{}) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	svc := s.Labels[discoveryv1.LabelServiceName]
	if svc == "" {
		return nil, nil
	}
	return []string{s.Namespace + "/" + svc}, nil
}

// Annotations the sync reads from member objects; all others are dropped.
const (
	annotationExport            = "endpoint-aggregator.io/export"
	annotationLastChangeTrigger = "endpoints.kubernetes.io/last-change-trigger-time"
)

// stripMemberObject drops what the sync never reads, to keep per-member caches
// small: managed fields, most annotations, Service selectors and status.
func stripMemberObject(obj interface{}) (interface{}, error) {
	switch o := obj.(type) {
	case *corev1.Service:
		o.ManagedFields = nil
		o.Annotations = keepAnnotations(o.Annotations, annotationExport)
		o.Spec.Selector = nil
		o.Status = corev1.ServiceStatus{}
	case *discoveryv1.EndpointSlice:
		o.ManagedFields = nil
		o.Annotations = keepAnnotations(o.Annotations, annotationLastChangeTrigger)
		o.OwnerReferences = nil
		for i := range o.Endpoints {
			o.Endpoints[i].TargetRef = nil
			o.Endpoints[i].DeprecatedTopology = nil
		}
		compact.EndpointSlice(o)
	case *mcsv1beta1.ServiceExport:
		o.ManagedFields = nil
	}
	return obj, nil
}

func keepAnnotations(in map[string]string, keep ...string) map[string]string {
	var out map[string]string
	for _, k := range keep {
		if v, ok := in[k]; ok {
			if out == nil {
				out = make(map[string]string, len(keep))
			}
			out[k] = v
		}
	}
	return out
}

// memberWriteTimeout bounds one write to a member.
const memberWriteTimeout = 10 * time.Second

// PatchServiceExportConditions replaces the conditions of a member's
// ServiceExport with a JSON merge patch on the status subresource. The
// patch carries the cached resourceVersion, so it fails with a conflict
// instead of overwriting a newer object.
func (c *Cluster) PatchServiceExportConditions(ctx context.Context, se *mcsv1beta1.ServiceExport, conditions []metav1.Condition) error {
	if c.clients.MCS == nil {
		return fmt.Errorf("member %q: ServiceExports are not watched", c.name)
	}
	patch, err := json.Marshal(map[string]interface{}{
		"metadata": map[string]interface{}{"resourceVersion": se.ResourceVersion},
		"status":   map[string]interface{}{"conditions": conditions},
	})
	if err != nil {
		return err
	}
	// A member that hangs must not hold a worker for long.
	ctx, cancel := context.WithTimeout(ctx, memberWriteTimeout)
	defer cancel()
	_, err = c.clients.MCS.MulticlusterV1beta1().ServiceExports(se.Namespace).Patch(ctx, se.Name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: "endpoint-aggregator"}, "status")
	return err
}
