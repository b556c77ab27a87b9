package clusters

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
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
	// Discovery tells which ServiceExport version the member serves
	// (exports.go); nil (fake clients in unit tests): v1beta1.
	Discovery Discovery
}

// EventHandlers are registered on a member's informers before they start.
// Any of them may be nil.
type EventHandlers struct {
	Services       cache.ResourceEventHandler
	EndpointSlices cache.ResourceEventHandler
	ServiceExports cache.ResourceEventHandler
}

// Cluster is one connected member: its clients, informers and listers.
// Its clients and settings never change once started; a kubeconfig change
// builds a new Cluster. Its informers may be replaced by a fresh set on the
// same clients when the member answers again after an outage (see
// runInformers); listers always read the current set.
type Cluster struct {
	name     string
	hash     string
	secret   string // queue key of the registering Secret or ClusterProfile
	clients  Clients
	handlers EventHandlers

	informers atomic.Pointer[informerSet] // the set the listers read
	reconnect chan struct{}               // asks for a fresh set
	// informerLoop is set while a goroutine serves reconnect requests
	// (see askReconnect); onReconnected is called after each swap.
	informerLoop  atomic.Bool
	onReconnected func()

	// ctx ends when the Cluster stops, and with it every informer set
	// built on it; stop is its Done channel.
	ctx      context.Context
	cancel   context.CancelFunc
	stop     <-chan struct{}
	synced   atomic.Bool
	timedOut atomic.Bool
	started  time.Time

	probeNow chan struct{} // asks for a probe now (after syncing)
	policy   PolicyOverride
	health   atomic.Pointer[health] // healthy until a probe says otherwise
	// reported is why the cluster manager says the member's control plane
	// is unhealthy (a ClusterProfile's ControlPlaneHealthy=False); "" or
	// nil when it does not. The probe fails while it is set.
	reported atomic.Pointer[string]
	// bounds bound what its informers read; over says which of them is
	// over its bound now. The probe fails while one is (readbounds.go).
	bounds ReadBounds
	over   overBounds
	// watchErr is the latest failed list or watch of its informers; cleared
	// when a set of them syncs. onWatchFailure, when set before start, is
	// told when its class changes.
	watchErr       atomic.Pointer[watchFailure]
	onWatchFailure func(Failure)
	// identity is what the About API says of the member (about.go); its
	// informers start once a check lets it in. clusterSet, when set before
	// start, returns the hub's ClusterSet ("" for none).
	identity   *identityCheck
	clusterSet func() string
}

func newCluster(name, hash, secret string, clients Clients, handlers EventHandlers, bounds ReadBounds) (*Cluster, error) {
	c := &Cluster{
		bounds:    bounds,
		name:      name,
		hash:      hash,
		secret:    secret,
		clients:   clients,
		handlers:  handlers,
		reconnect: make(chan struct{}, 1),
		probeNow:  make(chan struct{}, 1),
		identity:  newIdentityCheck(),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.stop = c.ctx.Done()
	c.informerLoop.Store(true) // runInformers serves reconnect requests until the first sync
	s, err := newInformerSet(c.ctx, name, clients, handlers, c.watchFailed, bounds, c.overBound)
	if err != nil {
		c.cancel()
		return nil, err
	}
	c.informers.Store(s)
	c.health.Store(&health{healthy: true})
	return c, nil
}

// HasSynced reports whether every informer of the member has synced once.
// It stays true if the member later becomes unreachable: its caches then hold
// the last-known state.
func (c *Cluster) HasSynced() bool { return c.synced.Load() }

// SyncTimedOut reports whether the member missed its sync timeout and has
// not synced since.
func (c *Cluster) SyncTimedOut() bool { return c.timedOut.Load() && !c.synced.Load() }

// ServiceLister lists the member's Services.
func (c *Cluster) ServiceLister() corelisters.ServiceLister { return c.informers.Load().serviceList }

// ServiceExport returns the member's ServiceExport namespace/name, or nil when
// there is none or ServiceExports are not watched.
func (c *Cluster) ServiceExport(namespace, name string) *mcsv1beta1.ServiceExport {
	l := c.informers.Load().exportLister
	if l == nil {
		return nil
	}
	se, err := l.ServiceExports(namespace).Get(name)
	if err != nil {
		return nil
	}
	return se
}

// ServiceExports lists the member's ServiceExports; none when they are not
// watched.
func (c *Cluster) ServiceExports() ([]*mcsv1beta1.ServiceExport, error) {
	l := c.informers.Load().exportLister
	if l == nil {
		return nil, nil
	}
	return l.List(labels.Everything())
}

// EndpointSlices returns the projections of the member's EndpointSlices of
// service namespace/name, as the cache holds them (see stripMemberObject).
// They are shared with the cache: callers must not modify them.
func (c *Cluster) EndpointSlices(namespace, service string) ([]*endpoints.MemberSlice, error) {
	objs, err := c.informers.Load().sliceIndex.ByIndex(sliceServiceIndex, namespace+"/"+service)
	if err != nil {
		return nil, err
	}
	out := make([]*endpoints.MemberSlice, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*endpoints.MemberSlice); ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// start runs the informers and waits, up to timeout, for them to sync. It
// returns whether they synced; when they did not, the informers keep trying
// and onSynced is called if they catch up later. onReconnected is called
// each time a fresh informer set replaced a synced one (see runInformers).
func (c *Cluster) start(timeout time.Duration, onSynced, onReconnected func()) bool {
	firstSync := make(chan struct{})
	c.onReconnected = onReconnected
	go c.runInformers(firstSync, onSynced)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-firstSync:
		return true
	case <-timer.C:
		return c.synced.Load()
	case <-c.stop:
		return false
	}
}

// shutdown stops the member's informers and probe. It is safe to call more
// than once.
func (c *Cluster) shutdown() { c.cancel() }

// sliceService is the index function of sliceServiceIndex.
func sliceService(obj interface{}) ([]string, error) {
	s, ok := obj.(*endpoints.MemberSlice)
	if !ok {
		return nil, nil
	}
	svc := s.Labels[discoveryv1.LabelServiceName]
	if svc == "" {
		return nil, nil
	}
	return []string{s.Namespace + "/" + svc}, nil
}

// annotationExport is the one annotation of member Services the sync
// reads; the others are dropped.
const annotationExport = "endpoint-aggregator.io/export"

// stripMemberObject keeps per-member caches small: a Service becomes a
// fresh one holding only what the sync reads (projectService), an
// EndpointSlice its projection (endpoints.ProjectSlice), which the cache
// holds instead; a ServiceExport loses its managed fields. An object
// already projected stays as it is.
func stripMemberObject(obj interface{}) (interface{}, error) {
	switch o := obj.(type) {
	case *corev1.Service:
		return projectService(o), nil
	case *discoveryv1.EndpointSlice:
		return endpoints.ProjectSlice(o), nil
	case *mcsv1beta1.ServiceExport:
		o.ManagedFields = nil
	}
	return obj, nil
}

// projectService returns a new Service with only the fields of svc that
// the sync and explain read, in svc's memory: identity, the export and
// prefer-local annotations, the managed-by label, and the spec the hub
// objects are built from. Anything else a member sets (labels, selectors, status, external
// IPs, load balancer settings, managed fields) is not held.
// TestServiceProjectionKeepsWhatTheSyncReads lists the fields.
func projectService(svc *corev1.Service) *corev1.Service {
	in := &svc.Spec
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:              svc.Name,
			Namespace:         svc.Namespace,
			UID:               svc.UID,
			ResourceVersion:   svc.ResourceVersion,
			CreationTimestamp: svc.CreationTimestamp,
			DeletionTimestamp: svc.DeletionTimestamp,
			Labels:            keepAnnotations(svc.Labels, endpoints.LabelManagedBy),
			Annotations:       keepAnnotations(svc.Annotations, annotationExport, endpoints.AnnotationPreferLocal),
		},
		Spec: corev1.ServiceSpec{
			Type:                  in.Type,
			ClusterIP:             in.ClusterIP,
			ClusterIPs:            in.ClusterIPs,
			Ports:                 in.Ports,
			SessionAffinity:       in.SessionAffinity,
			SessionAffinityConfig: in.SessionAffinityConfig,
			IPFamilies:            in.IPFamilies,
			IPFamilyPolicy:        in.IPFamilyPolicy,
			InternalTrafficPolicy: in.InternalTrafficPolicy,
			TrafficDistribution:   in.TrafficDistribution,
		},
	}
}

// keepAnnotations returns the entries of in under the keys keep, or nil.
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
// ServiceExport with a JSON merge patch on the status subresource, in the
// version the member serves them in. The patch carries the cached resourceVersion, so it fails with a conflict
// instead of overwriting a newer object.
func (c *Cluster) PatchServiceExportConditions(ctx context.Context, se *mcsv1beta1.ServiceExport, conditions []metav1.Condition) error {
	src := c.informers.Load().exportSrc
	if src == nil {
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
	return src.patchStatus(ctx, se.Namespace, se.Name, patch)
}

// ExportVersion is the version in which the member's ServiceExports were
// last listed: ExportNotServed when it serves none, "" when they are not
// watched or not listed yet.
func (c *Cluster) ExportVersion() ExportVersion {
	if src := c.informers.Load().exportSrc; src != nil {
		return src.version()
	}
	return ""
}
