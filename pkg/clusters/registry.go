package clusters

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	cplisters "sigs.k8s.io/cluster-inventory-api/client/listers/apis/v1alpha1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

// Handler is told about members. EventHandlers is called before a member's
// informers start; ClusterSynced once its caches are ready and it is the
// member's active connection (also after a rotation, and after its informers
// were restarted when it answered again after an outage); ClusterRemoved after the
// member was unregistered and stopped. Callbacks must not block.
type Handler interface {
	EventHandlers(cluster string) (services, endpointSlices, serviceExports cache.ResourceEventHandler)
	ClusterSynced(cluster string)
	// ClusterSyncTimedOut is called once when the active connection misses
	// its first-sync timeout; it keeps trying, and ClusterSynced follows if
	// it catches up.
	ClusterSyncTimedOut(cluster string)
	ClusterRemoved(cluster string)
	// ClusterHealthChanged is called when the active connection's probe
	// starts or stops succeeding, and with false on each failed attempt to
	// connect a registered member that has no connection (ClusterSynced
	// follows when it connects).
	ClusterHealthChanged(cluster string, healthy bool)
}

// Options configure a Registry.
type Options struct {
	// Namespace holds the registration Secrets.
	Namespace string
	// SyncTimeout bounds how long a member may take to sync before the daemon
	// counts it as timed out for readiness. It keeps trying afterwards.
	SyncTimeout time.Duration
	// QPS and Burst limit each member's client separately, so one member
	// cannot starve the others.
	QPS   float32
	Burst int
	// DisableCompression asks members for plain responses instead of gzip
	// (client-go's default). A compressed watch holds about 40 KB of
	// decompressor state in the daemon for as long as it runs, and a
	// compressor in the member's API server. A registration's
	// AnnotationMemberCompression overrides it for its member.
	DisableCompression bool
	// ReadBounds bound what the daemon reads of each member (readbounds.go).
	ReadBounds ReadBounds
	// WatchServiceExports adds a ServiceExport informer per member.
	WatchServiceExports bool
	Policy              KubeconfigPolicy
	// NewClients builds a member's clients; tests inject fakes. The default
	// builds real clientsets from the config.
	NewClients func(cfg *rest.Config) (Clients, error)
	// UserAgent is set on member clients.
	UserAgent string
	// WarningHandler returns the handler of API warnings for a member's
	// clients (nil: client-go's default).
	WarningHandler func(cluster string) rest.WarningHandler
	// ProbeInterval and ProbeTimeout pace the health probe of each member
	// (DefaultProbeInterval, DefaultProbeTimeout): an unreachable member is
	// noticed within interval + 2 × timeout (two failed probes in a row).
	ProbeInterval, ProbeTimeout time.Duration
	// Static members are registered without a Secret, e.g. the hub itself
	// with --hub-is-member. A Secret cannot claim their names.
	Static map[string]*rest.Config
	// ClusterProfiles registers members from ClusterProfiles too.
	ClusterProfiles ClusterProfileOptions
	// Leading reports whether this replica holds the leader Lease. Events
	// say what the replica does, so a standby records none (it still logs);
	// the leader records them, and ReportState sums up, once, what a replica
	// that starts leading takes over. Nil: always leading (no leader
	// election).
	Leading func() bool
	// Wanted reports whether this replica runs a connection to a member
	// (see package shard); nil: to every member. A member not wanted here
	// is registered, not owned, and not unreachable. Reconsider applies a
	// change.
	Wanted func(cluster string) bool
	// ClusterSet returns the hub's ClusterSet, its About API property
	// clusterset.k8s.io; a member that names another is refused (about.go).
	// Nil or "": members are not checked against one.
	ClusterSet func() string
}

// Registry runs one Cluster per registration Secret.
type Registry struct {
	opts     Options
	handler  Handler
	recorder record.EventRecorder

	secretInformer cache.SharedIndexInformer
	secrets        corelisters.SecretLister
	// profileInformers and profiles watch ClusterProfiles, by namespace.
	profileInformers []cache.SharedIndexInformer
	profiles         map[string]cplisters.ClusterProfileNamespaceLister
	queue            workqueue.TypedRateLimitingInterface[string]

	// initialized is set once every Secret present at start was processed.
	initialized atomic.Bool

	// staticMu orders the starts and stops of static members.
	staticMu sync.Mutex
	mu       sync.RWMutex
	members  map[string]*member // by cluster name
	bySecret map[string]string  // queue key of a Secret or ClusterProfile → cluster name
	// rejections are the warnings of the last sync of each Secret or
	// ClusterProfile (by refKey), which ReportState repeats.
	rejections map[string][]rejection
}

// rejection is a warning Event about a registration.
type rejection struct {
	ref             *corev1.ObjectReference
	reason, message string
}

// NewRegistry returns a Registry watching registration Secrets through hub.
func NewRegistry(hub kubernetes.Interface, recorder record.EventRecorder, handler Handler, opts Options) *Registry {
	if opts.SyncTimeout <= 0 {
		opts.SyncTimeout = DefaultSyncTimeout
	}
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = DefaultProbeInterval
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = DefaultProbeTimeout
	}
	if opts.NewClients == nil {
		opts.NewClients = defaultClients(opts.WatchServiceExports)
	}
	secretInformer := coreinformers.NewFilteredSecretInformer(hub, opts.Namespace, 0, claimIndexers(),
		func(lo *metav1.ListOptions) {
			lo.LabelSelector = labels.Set{LabelMemberCluster: MemberClusterValue}.String()
		})
	r := &Registry{
		opts:           opts,
		handler:        handler,
		recorder:       recorder,
		secretInformer: secretInformer,
		secrets:        corelisters.NewSecretLister(secretInformer.GetIndexer()),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "member_secrets"}),
		members:    map[string]*member{},
		bySecret:   map[string]string{},
		rejections: map[string][]rejection{},
	}
	_, _ = r.secretInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: r.enqueue,
		UpdateFunc: func(old, cur interface{}) {
			if old.(*corev1.Secret).ResourceVersion != cur.(*corev1.Secret).ResourceVersion {
				r.enqueue(cur)
			}
		},
		DeleteFunc: r.enqueue,
	})
	if opts.ClusterProfiles.enabled() {
		r.watchClusterProfiles()
	}
	return r
}

func defaultClients(watchExports bool) func(*rest.Config) (Clients, error) {
	return func(cfg *rest.Config) (Clients, error) { return newMemberClients(cfg, watchExports) }
}

func (r *Registry) enqueue(obj interface{}) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	r.queue.Add(key)
}

// Run watches Secrets until ctx ends, then stops every member. Stopping keeps
// the hub's state: only an unregistered member is withdrawn.
func (r *Registry) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	defer r.queue.ShutDown()
	go r.secretInformer.RunWithContext(ctx)
	synced := []cache.InformerSynced{r.secretInformer.HasSynced}
	for _, inf := range r.profileInformers {
		go inf.RunWithContext(ctx)
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	for name, cfg := range r.opts.Static {
		if err := r.addStatic(name, cfg); err != nil {
			klog.ErrorS(err, "Registering static member failed", "cluster", name)
		}
	}
	// Process the Secrets and ClusterProfiles present at start before
	// saying so: until then a registered member would look unregistered,
	// and its hub objects would be garbage collected.
	for _, cl := range r.claims() {
		if err := r.sync(cl.key); err != nil {
			if !errors.Is(err, errNotConnected) {
				utilruntime.HandleError(fmt.Errorf("syncing member registration %s: %w", cl.key, err))
			}
			r.queue.AddRateLimited(cl.key)
		}
	}
	r.initialized.Store(true)
	klog.InfoS("Member registry started", "namespace", r.opts.Namespace, "members", len(r.Names()))
	// One worker: Secret changes are rare and ordering them keeps name
	// ownership simple. Member syncs run in their own goroutines.
	var worker sync.WaitGroup
	worker.Go(func() {
		wait.UntilWithContext(ctx, func(ctx context.Context) {
			for r.processNext(ctx) {
			}
		}, time.Second)
	})
	<-ctx.Done()
	// The worker may be adding a member: wait for it, so that every member
	// it started is stopped below and none starts after.
	r.queue.ShutDown()
	worker.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.members {
		m.shutdown()
	}
}

// SecretsSynced reports whether the Secrets (and ClusterProfiles) present at
// start have been processed: from then on a cluster name that is not
// registered really is gone.
func (r *Registry) SecretsSynced() bool { return r.initialized.Load() }

// Ready reports whether Secrets synced and every member wanted here synced
// or timed out.
func (r *Registry) Ready() bool {
	if !r.SecretsSynced() || r.queue.Len() > 0 {
		return false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for name, m := range r.members {
		switch {
		case m.active != nil:
			if !m.active.HasSynced() && !m.timedOut {
				return false
			}
		case m.unconnected != "":
			// It waits for its registration to be fixed, not for a sync.
		case r.wanted(name):
			return false // wanted here since, and not connected yet
		}
	}
	return true
}

// Lookup returns a member's lifecycle state and its active connection, nil
// unless the state is Connected or Synced.
func (r *Registry) Lookup(name string) (lifecycle.State, *Cluster) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	m, ok := r.members[name]
	if !ok {
		return lifecycle.State{}, nil
	}
	return m.state(), m.active
}

// Get returns the active connection of a member, or nil.
func (r *Registry) Get(name string) *Cluster {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if m, ok := r.members[name]; ok && m.active != nil {
		return m.active
	}
	return nil
}

// Names returns the registered member names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.namesLocked()
}

func (r *Registry) namesLocked() []string {
	out := make([]string, 0, len(r.members))
	for n := range r.members {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (r *Registry) processNext(ctx context.Context) bool {
	key, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(key)
	if ctx.Err() != nil {
		return false // shutting down: leave the rest of the queue
	}
	if err := r.sync(key); err != nil {
		if !errors.Is(err, errNotConnected) { // said in its Event and log already
			utilruntime.HandleError(fmt.Errorf("syncing member registration %s: %w", key, err))
		}
		r.queue.AddRateLimited(key)
		return true
	}
	r.queue.Forget(key)
	return true
}

// leading reports whether this replica's Events are recorded.
func (r *Registry) leading() bool { return r.opts.Leading == nil || r.opts.Leading() }
