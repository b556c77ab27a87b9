package clusters

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	cpinformers "sigs.k8s.io/cluster-inventory-api/client/informers/externalversions/apis/v1alpha1"
	cplisters "sigs.k8s.io/cluster-inventory-api/client/listers/apis/v1alpha1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

// Registration Secret contract.
const (
	// LabelMemberCluster marks a Secret as a member registration.
	LabelMemberCluster = "endpoint-aggregator.io/member-cluster"
	// AnnotationClusterName names the member; the Secret's name is the default.
	AnnotationClusterName = "endpoint-aggregator.io/cluster-name"
	// KubeconfigKey is the Secret data key that holds the kubeconfig.
	KubeconfigKey = "kubeconfig"
)

// Event reasons on registration Secrets.
const (
	ReasonConnected        = "MemberConnected"
	ReasonRotated          = "MemberCredentialsRotated"
	ReasonSyncTimeout      = "MemberSyncTimeout"
	ReasonInvalidName      = "InvalidClusterName"
	ReasonDuplicateName    = "DuplicateClusterName"
	ReasonInvalidConfig    = "InvalidKubeconfig"
	ReasonRefusedConfig    = "KubeconfigRefused"
	ReasonClientFailed     = "MemberClientFailed"
	ReasonMemberRemoved    = "MemberRemoved"
	ReasonRotationRejected = "RotationRejected"
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

// member is the registry's state for one cluster name.
type member struct {
	secret string                  // queue key of the owning Secret or ClusterProfile
	ref    *corev1.ObjectReference // its Event reference; nil for static members
	// active is the connection the sync reads from; nil while the
	// registration could not be turned into one (see unconnected).
	active   *Cluster
	pending  *Cluster // a rotated connection waiting to sync
	timedOut bool
	// unconnected is why a member without an active connection has none,
	// since unconnectedSince; policy is its registration's unreachable
	// policy, which applies meanwhile.
	unconnected      string
	unconnectedClass ErrorClass
	unconnectedSince time.Time
	policy           lifecycle.Policy
	// registered is the creationTimestamp of the registration that owns
	// the name, by the hub's clock; zero for static members.
	registered time.Time
	// elsewhere: the member is not wanted here (another replica owns it),
	// so it has no connection here; static is a static member's config.
	elsewhere bool
	static    *rest.Config
}

// state is the member's lifecycle state.
func (m *member) state() lifecycle.State {
	st := lifecycle.State{Phase: lifecycle.Registered, Owned: !m.elsewhere, Policy: m.policy, RegisteredAt: m.registered}
	c := m.active
	if m.elsewhere {
		return st
	}
	if c == nil {
		st.Unreachable, st.Since, st.Reason = true, m.unconnectedSince, m.unconnected
		st.Cause = string(m.unconnectedClass)
		return st
	}
	st.Phase = lifecycle.Connected
	st.AboutID = c.Identity().ClusterID
	if c.HasSynced() {
		st.Phase = lifecycle.Synced
	}
	st.Policy = c.policy
	f := c.Failure()
	if f != nil {
		st.Cause, st.Reason = string(f.Class), f.Message
	}
	if since, down := c.UnreachableSince(); down {
		st.Unreachable, st.Since = true, since
		if f == nil {
			st.Reason = "does not answer its health probe"
		}
	}
	return st
}

// unreachableWhy says why an unreachable member is, for its Event: the
// cluster manager's report, or the class of the probe's failure, what it
// usually means, and the error.
func unreachableWhy(c *Cluster) (ErrorClass, string) {
	if reported := c.reported.Load(); reported != nil && *reported != "" {
		return ClassUnhealthy, "is unhealthy: " + *reported
	}
	f := c.Failure()
	if f == nil {
		return ClassOther, "does not answer its health probe"
	}
	return f.Class, fmt.Sprintf("is unreachable: %s, %s: %s", f.Class, f.Class.Hint(), f.Message)
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

// watchClusterProfiles sets up one ClusterProfile informer per namespace.
func (r *Registry) watchClusterProfiles() {
	o := r.opts.ClusterProfiles
	r.profiles = map[string]cplisters.ClusterProfileNamespaceLister{}
	for _, ns := range o.Namespaces {
		inf := cpinformers.NewFilteredClusterProfileInformer(o.Client, ns, 0, claimIndexers(),
			func(lo *metav1.ListOptions) {
				if o.ClusterManager != "" {
					lo.LabelSelector = labels.Set{cpv1alpha1.LabelClusterManagerKey: o.ClusterManager}.String()
				}
			})
		enqueue := func(obj interface{}) {
			key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
			if err != nil {
				utilruntime.HandleError(err)
				return
			}
			r.queue.Add(profileKeyPrefix + key)
		}
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: enqueue,
			UpdateFunc: func(old, cur interface{}) {
				if old.(*cpv1alpha1.ClusterProfile).ResourceVersion != cur.(*cpv1alpha1.ClusterProfile).ResourceVersion {
					enqueue(cur)
				}
			},
			DeleteFunc: enqueue,
		})
		r.profileInformers = append(r.profileInformers, inf)
		r.profiles[ns] = cplisters.NewClusterProfileLister(inf.GetIndexer()).ClusterProfiles(ns)
	}
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

// shutdown stops the member's connections.
func (m *member) shutdown() {
	if m.active != nil {
		m.active.shutdown()
	}
	if m.pending != nil {
		m.pending.shutdown()
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

// registration is what one registering object, a Secret or a
// ClusterProfile, asks for.
type registration struct {
	claim
	hash      string
	policy    PolicyOverride
	policyErr error
	// compress is the registration's choice of gzip, nil for the
	// daemon's; compressErr says why an annotation could not be read.
	compress    *bool
	compressErr error
	// config builds the member's client config; invalid is the Event
	// reason when it fails for another reason than a refused feature.
	config  func() (*rest.Config, error)
	invalid string
	// unhealthy is why the cluster manager says the member's control plane
	// is unhealthy, or "".
	unhealthy string
}

// sync brings the member registered by one Secret or ClusterProfile in line
// with it.
func (r *Registry) sync(key string) error {
	var reg *registration
	var err error
	if pkey, ok := strings.CutPrefix(key, profileKeyPrefix); ok {
		reg, err = r.profileRegistration(pkey)
	} else {
		reg, err = r.secretRegistration(key)
	}
	if err != nil {
		return err
	}
	if reg == nil {
		r.mu.Lock()
		delete(r.rejections, refKey(refForKey(key)))
		r.mu.Unlock()
		r.remove(key, nil)
		return nil
	}
	return r.register(reg)
}

// secretRegistration reads a registration Secret; nil when it is gone.
func (r *Registry) secretRegistration(key string) (*registration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, err
	}
	secret, err := r.secrets.Secrets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cluster := ClusterName(secret)
	policy, policyErr := ParsePolicyOverride(secret.Annotations)
	compress, compressErr := ParseMemberCompression(secret.Annotations)
	data, found := secret.Data[KubeconfigKey]
	config := func() (*rest.Config, error) { return RESTConfig(data, r.opts.Policy) }
	if !found {
		keys := slices.Sorted(maps.Keys(secret.Data))
		config = func() (*rest.Config, error) {
			if len(keys) == 0 {
				return nil, fmt.Errorf("the Secret has no data; the kubeconfig belongs under key %q", KubeconfigKey)
			}
			return nil, fmt.Errorf("the Secret has no key %q for the kubeconfig; its keys are %s", KubeconfigKey, strings.Join(keys, ", "))
		}
	}
	return &registration{
		claim:       claim{key: key, cluster: cluster, created: secret.CreationTimestamp, ref: secretRef(secret)},
		hash:        hashOf(cluster, data, settingAnnotations(secret.Annotations)...),
		policy:      policy,
		policyErr:   policyErr,
		compress:    compress,
		compressErr: compressErr,
		config:      config,
		invalid:     ReasonInvalidConfig,
	}, nil
}

// profileRegistration reads a ClusterProfile (key without its prefix); nil
// when it is gone or filtered out. The member is named after it.
func (r *Registry) profileRegistration(key string) (*registration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, err
	}
	lister, ok := r.profiles[ns]
	if !ok {
		return nil, nil
	}
	cp, err := lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	providers := r.opts.ClusterProfiles.Providers
	policy, policyErr := ParsePolicyOverride(cp.Annotations)
	compress, compressErr := ParseMemberCompression(cp.Annotations)
	reg := &registration{
		claim:       claim{key: profileKeyPrefix + key, cluster: cp.Name, created: cp.CreationTimestamp, ref: profileRef(cp)},
		hash:        providers.profileHash(cp),
		policy:      policy,
		policyErr:   policyErr,
		compress:    compress,
		compressErr: compressErr,
		config:      func() (*rest.Config, error) { return providers.RESTConfig(cp, r.opts.Policy) },
		invalid:     ReasonInvalidAccessProvider,
		unhealthy:   ControlPlaneUnhealthy(cp),
	}
	if p, _ := providers.choose(cp); p == nil {
		reg.invalid = ReasonNoAccessProvider
	}
	return reg, nil
}

// register brings the member a registration names in line with it. Bad
// content keeps whatever already runs for the object and says why in an
// Event: a broken update must not take a working member down. A
// registration with no connection to keep registers its member as not
// connected, and is retried (see unconnected).
func (r *Registry) register(reg *registration) error {
	key, cluster, ref := reg.key, reg.cluster, reg.ref
	r.mu.Lock()
	delete(r.rejections, refKey(ref)) // what this sync warns about replaces them
	r.mu.Unlock()
	if errs := validation.IsDNS1123Label(cluster); len(errs) > 0 {
		r.warn(ref, ReasonInvalidName, "cluster name %q is not a DNS-1123 label: %s", cluster, errs[0])
		return nil
	}
	if _, static := r.opts.Static[cluster]; static {
		r.warn(ref, ReasonDuplicateName, "cluster name %q is taken by a member the daemon registers itself (--hub-is-member); this %s is ignored", cluster, ref.Kind)
		return nil
	}
	if owner := r.nameOwner(cluster); owner != nil && owner.key != key {
		r.warn(ref, ReasonDuplicateName, "cluster name %q is already registered by the older %s %s/%s; this %s is ignored", cluster, owner.ref.Kind, owner.ref.Namespace, owner.ref.Name, ref.Kind)
		r.remove(key, ref)
		return nil
	}

	for _, err := range []error{reg.policyErr, reg.compressErr} {
		if err != nil {
			r.warn(ref, ReasonInvalidConfig, "%v", err)
		}
	}
	r.mu.RLock()
	prevName, hadPrev := r.bySecret[key]
	r.mu.RUnlock()
	if hadPrev && prevName != cluster {
		// The object now names another cluster: withdraw the old name
		// first, also when the new name's connection is kept as it is.
		r.remove(key, ref)
	}
	r.mu.Lock()
	m := r.members[cluster]
	if m != nil && m.secret != key && m.ref != nil {
		// This registration owns the name now (the older claim wins):
		// the member's connection is its previous one, to replace
		// make-before-break, and is no longer the other object's.
		delete(r.bySecret, m.secret)
		m.secret = key
		r.bySecret[key] = cluster
	}
	if m != nil && m.secret == key {
		m.registered = reg.created.Time
	}
	r.mu.Unlock()
	r.mu.RLock()
	upToDate := m != nil && m.secret == key && ((m.active != nil && m.active.hash == reg.hash) || (m.pending != nil && m.pending.hash == reg.hash))
	if upToDate {
		for _, c := range []*Cluster{m.active, m.pending} {
			if c != nil {
				c.reportUnhealthy(reg.unhealthy)
			}
		}
	}
	r.mu.RUnlock()
	wanted := r.wanted(cluster)
	if upToDate && wanted {
		return nil
	}
	if !wanted {
		r.elsewhere(reg)
		return nil
	}

	cfg, err := reg.config()
	if err != nil {
		reason := reg.invalid
		if isRefused(err) {
			reason = ReasonRefusedConfig
		}
		return r.unconnected(reg, m, reason, ClassInvalidRegistration, fmt.Sprintf("%v", err))
	}
	r.configure(cfg, cluster, reg.compress)
	clients, err := r.opts.NewClients(cfg)
	if err != nil {
		class := Classify(err)
		if class == ClassOther {
			class = ClassInvalidRegistration
		}
		return r.unconnected(reg, m, ReasonClientFailed, class, fmt.Sprintf("building client for member %q: %v", cluster, err))
	}
	svcH, sliceH, exportH := r.handler.EventHandlers(cluster)
	c, err := newCluster(cluster, reg.hash, key, clients, EventHandlers{Services: svcH, EndpointSlices: sliceH, ServiceExports: exportH})
	if err != nil {
		return err
	}
	c.policy = reg.policy
	c.reportUnhealthy(reg.unhealthy)

	r.mu.Lock()
	m = r.members[cluster]
	switch {
	case m == nil:
		r.members[cluster] = &member{secret: key, ref: ref, active: c, policy: reg.policy, registered: reg.created.Time}
	case m.active == nil:
		// Registered without a connection until now: nothing to keep.
		m.ref, m.active, m.policy, m.unconnected, m.unconnectedSince = ref, c, reg.policy, "", time.Time{}
		m.elsewhere = false
	default:
		m.ref = ref
		if m.pending != nil {
			m.pending.shutdown()
		}
		m.pending = c
	}
	r.bySecret[key] = cluster
	r.mu.Unlock()

	go r.run(c, ref)
	return nil
}

// wanted reports whether this replica runs a connection to a member.
func (r *Registry) wanted(cluster string) bool { return r.opts.Wanted == nil || r.opts.Wanted(cluster) }

// elsewhere registers a member that another replica owns: no connection
// here, nothing unreachable about it. A connection it had is stopped; the
// controller no longer writes its objects, as it owns them no more.
func (r *Registry) elsewhere(reg *registration) {
	r.mu.Lock()
	m := r.members[reg.cluster]
	if m == nil {
		m = &member{secret: reg.key}
		r.members[reg.cluster] = m
	}
	stop := []*Cluster{m.active, m.pending}
	had := m.active != nil
	m.ref, m.policy, m.registered = reg.ref, reg.policy, reg.created.Time
	m.active, m.pending, m.timedOut, m.unconnected, m.unconnectedSince, m.elsewhere = nil, nil, false, "", time.Time{}, true
	r.bySecret[reg.key] = reg.cluster
	r.mu.Unlock()
	for _, c := range stop {
		if c != nil {
			c.shutdown()
		}
	}
	if had {
		klog.InfoS("Member owned by another replica now; stopped its connection", "cluster", reg.cluster)
	}
}

// Reconsider brings a member's connection in line with Wanted: it starts
// one the member now wants here, and stops one it no longer does.
func (r *Registry) Reconsider(cluster string) {
	r.mu.RLock()
	m := r.members[cluster]
	r.mu.RUnlock()
	if m != nil && m.static != nil {
		if err := r.addStatic(cluster, m.static); err != nil {
			klog.ErrorS(err, "Registering static member failed", "cluster", cluster)
		}
		return
	}
	for _, cl := range r.claimsOf(cluster) {
		r.queue.Add(cl.key)
	}
}

// Warm reports whether this replica's view of a member is as good as it
// gets: its connection synced or missed its sync timeout, or its
// registration cannot be connected.
func (r *Registry) Warm(cluster string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	m := r.members[cluster]
	switch {
	case m == nil || m.elsewhere:
		return false
	case m.active == nil:
		return m.unconnected != ""
	}
	return m.active.HasSynced() || m.timedOut
}

// errNotConnected asks the registry's queue to retry, with backoff, a
// registration that could not be turned into a connection.
var errNotConnected = errors.New("member not connected")

// unconnected handles a registration that could not be turned into a
// connection. A member that has one keeps it: a broken update must not take
// a working member down. One that has none stays registered, without a
// connection: its hub objects are kept as the hub holds them, subject to
// the unreachable policy, and the registration is retried with backoff.
// Only unregistering withdraws a member.
func (r *Registry) unconnected(reg *registration, m *member, reason string, class ErrorClass, why string) error {
	cluster, ref := reg.cluster, reg.ref
	if m != nil && m.active != nil {
		r.warn(ref, reason, "%s; keeping the previous connection to member %q", why, cluster)
		return nil
	}
	if reason == ReasonNoAccessProvider {
		// Not a registration this daemon can ever serve (another cluster
		// manager's, perhaps): said, not retried.
		r.warn(ref, reason, "%s; member %q not registered", why, cluster)
		return nil
	}
	msg := fmt.Sprintf("%s; member %q is registered but not connected: its hub objects are kept unless the unreachable policy withdraws them, and the daemon retries", why, cluster)
	r.mu.Lock()
	again := m != nil && m.unconnected == why
	r.mu.Unlock()
	if again {
		// A retry that failed the same way: said already.
		r.reject(ref, reason, msg)
		klog.V(2).InfoS("Member still not connected", "cluster", cluster, "reason", reason, "message", why)
	} else {
		r.warn(ref, reason, "%s", msg)
	}
	r.mu.Lock()
	m = r.members[cluster]
	if m == nil {
		m = &member{secret: reg.key, unconnectedSince: time.Now()}
		r.members[cluster] = m
	}
	m.ref, m.policy, m.unconnected, m.unconnectedClass, m.registered = ref, reg.policy, why, class, reg.created.Time
	if m.elsewhere {
		// Wanted here now, and cannot be connected: unreachable from now.
		m.elsewhere, m.unconnectedSince = false, time.Now()
	}
	r.bySecret[reg.key] = cluster
	r.mu.Unlock()
	r.handler.ClusterHealthChanged(cluster, false)
	return fmt.Errorf("%w: %s", errNotConnected, why)
}

// configure applies the daemon's client settings to cluster's config, and
// the registration's choice of compression (nil: the daemon's).
func (r *Registry) configure(cfg *rest.Config, cluster string, compress *bool) {
	cfg.QPS, cfg.Burst = r.opts.QPS, r.opts.Burst
	cfg.UserAgent = r.opts.UserAgent
	if r.opts.WarningHandler != nil {
		cfg.WarningHandler = r.opts.WarningHandler(cluster)
	}
	applyCompression(cfg, r.opts.DisableCompression, compress)
}

// addStatic registers a member that has no Secret, and runs its connection
// while it is wanted here.
func (r *Registry) addStatic(name string, orig *rest.Config) error {
	r.staticMu.Lock()
	defer r.staticMu.Unlock()
	r.mu.Lock()
	m := r.members[name]
	if m == nil {
		m = &member{static: orig}
		r.members[name] = m
	}
	running := m.active != nil
	wanted := r.wanted(name)
	var stop *Cluster
	if !wanted {
		stop, m.active, m.elsewhere = m.active, nil, true
	}
	r.mu.Unlock()
	if stop != nil {
		stop.shutdown()
	}
	if !wanted || running {
		return nil
	}
	cfg := rest.CopyConfig(orig)
	r.configure(cfg, name, nil)
	clients, err := r.opts.NewClients(cfg)
	if err != nil {
		return err
	}
	svcH, sliceH, exportH := r.handler.EventHandlers(name)
	c, err := newCluster(name, "static", "", clients, EventHandlers{Services: svcH, EndpointSlices: sliceH, ServiceExports: exportH})
	if err != nil {
		return err
	}
	r.mu.Lock()
	m.active, m.elsewhere = c, false
	r.mu.Unlock()
	go r.run(c, nil)
	return nil
}

// run starts a connection and reports a sync timeout. A rotated connection
// replaces the active one only once it has synced (make-before-break).
func (r *Registry) run(c *Cluster, ref *corev1.ObjectReference) {
	c.started = time.Now()
	c.onWatchFailure = func(f Failure) { r.onWatchFailure(c, ref, f) }
	c.clusterSet = r.opts.ClusterSet
	go c.probeLoop(r.opts.ProbeInterval, r.opts.ProbeTimeout, func(healthy bool) { r.onHealthChanged(c, ref, healthy) })
	synced := c.start(r.opts.SyncTimeout, func() { r.onSynced(c, ref) }, func() { r.onReconnected(c) })
	if synced {
		return
	}
	select {
	case <-c.stop: // stopped before it synced, not timed out
		return
	default:
	}
	c.timedOut.Store(true)
	r.mu.Lock()
	m := r.members[c.name]
	current := m != nil && (m.active == c || m.pending == c)
	active := current && m.active == c
	if active {
		m.timedOut = true
	}
	r.mu.Unlock()
	if !current {
		return
	}
	cause := ""
	if f := c.Failure(); f != nil {
		cause = fmt.Sprintf(" (%s: %s)", f.Class, f.Message)
	}
	if active {
		r.connEventf(ref, corev1.EventTypeWarning, ReasonSyncTimeout,
			"member %q did not sync within %s%s; still trying, its last-known hub objects are kept", c.name, r.opts.SyncTimeout, cause)
		r.handler.ClusterSyncTimedOut(c.name)
	} else {
		r.connEventf(ref, corev1.EventTypeWarning, ReasonRotationRejected,
			"new kubeconfig for member %q did not sync within %s%s; keeping the previous connection while it keeps trying", c.name, r.opts.SyncTimeout, cause)
	}
	klog.InfoS("Member did not sync in time", "cluster", c.name, "timeout", r.opts.SyncTimeout, "cause", strings.TrimSpace(cause))
}

func (r *Registry) onSynced(c *Cluster, ref *corev1.ObjectReference) {
	r.mu.Lock()
	m := r.members[c.name]
	var old *Cluster
	switch {
	case m == nil:
		r.mu.Unlock()
		return
	case m.pending == c:
		old, m.active, m.pending = m.active, c, nil
	case m.active != c:
		r.mu.Unlock()
		return
	}
	m.timedOut = false
	r.mu.Unlock()

	if old != nil {
		old.shutdown()
		r.connEventf(ref, corev1.EventTypeNormal, ReasonRotated, "member %q switched to the new kubeconfig after it synced", c.name)
		klog.InfoS("Member connection rotated", "cluster", c.name)
	} else {
		r.connEventf(ref, corev1.EventTypeNormal, ReasonConnected, "member %q connected and synced in %s", c.name, time.Since(c.started).Round(time.Millisecond))
		klog.InfoS("Member synced", "cluster", c.name, "duration", time.Since(c.started))
	}
	r.handler.ClusterSynced(c.name)
}

// onReconnected tells the handler that fresh informers of the active
// connection synced after an outage (see runInformers): like after a
// rotation, every key of the member is synced again.
func (r *Registry) onReconnected(c *Cluster) {
	r.mu.RLock()
	m := r.members[c.name]
	active := m != nil && m.active == c
	r.mu.RUnlock()
	if active {
		r.handler.ClusterSynced(c.name)
	}
}

// ReasonUnreachable and ReasonReachable are Events on a member's Secret when
// its health probe starts failing or recovers.
const (
	ReasonUnreachable = "MemberUnreachable"
	ReasonReachable   = "MemberReachable"
)

func (r *Registry) onHealthChanged(c *Cluster, ref *corev1.ObjectReference, healthy bool) {
	r.mu.RLock()
	m := r.members[c.name]
	active := m != nil && m.active == c
	r.mu.RUnlock()
	if !active {
		return
	}
	switch {
	case healthy:
		r.connEventf(ref, corev1.EventTypeNormal, ReasonReachable, "member %q answers again", c.name)
		klog.InfoS("Member health changed", "cluster", c.name, "healthy", healthy)
	default:
		class, why := unreachableWhy(c)
		r.connEventf(ref, corev1.EventTypeWarning, class.Reason(), "member %q %s; its last-known endpoints are kept unless an unreachable policy applies", c.name, why)
		klog.InfoS("Member health changed", "cluster", c.name, "healthy", healthy, "cause", class, "message", why)
	}
	r.handler.ClusterHealthChanged(c.name, healthy)
}

// onWatchFailure reports a member whose informers fail to list or watch
// for a new cause. While its probe fails, the probe's Event said why.
func (r *Registry) onWatchFailure(c *Cluster, ref *corev1.ObjectReference, f Failure) {
	r.mu.RLock()
	m := r.members[c.name]
	current := m != nil && (m.active == c || m.pending == c)
	r.mu.RUnlock()
	if !current {
		return
	}
	klog.InfoS("Member informers cannot list or watch", "cluster", c.name, "cause", f.Class, "err", f.Message)
	if _, down := c.UnreachableSince(); down {
		return
	}
	r.connEventf(ref, corev1.EventTypeWarning, f.Class.Reason(), "member %q cannot be listed or watched: %s, %s: %s; retrying", c.name, f.Class, f.Class.Hint(), f.Message)
}

// remove stops the member registered by a Secret or ClusterProfile and tells
// the handler, which withdraws the member's hub objects. ref is nil when the
// object was deleted.
func (r *Registry) remove(key string, ref *corev1.ObjectReference) {
	r.mu.Lock()
	name, ok := r.bySecret[key]
	if !ok {
		r.mu.Unlock()
		return
	}
	delete(r.bySecret, key)
	m := r.members[name]
	if m == nil || m.secret != key {
		r.mu.Unlock()
		return
	}
	delete(r.members, name)
	r.mu.Unlock()

	m.shutdown()
	if ref == nil {
		ref = refForKey(key)
	}
	r.eventf(ref, corev1.EventTypeNormal, ReasonMemberRemoved, "member %q unregistered; its hub objects are withdrawn", name)
	klog.InfoS("Member removed", "cluster", name, "registration", key)
	r.handler.ClusterRemoved(name)
	// Another Secret or ClusterProfile may have been waiting for this name.
	for _, cl := range r.claimsOf(name) {
		if cl.key != key {
			r.queue.Add(cl.key)
		}
	}
}

// claim is one Secret or ClusterProfile claiming a cluster name.
type claim struct {
	key     string // queue key
	cluster string
	created metav1.Time
	ref     *corev1.ObjectReference
}

// claimIndex indexes registration Secrets and ClusterProfiles by the
// cluster name they claim, valid or not.
const claimIndex = "claim"

// claimIndexers are the indexes of the Secret and ClusterProfile informers.
func claimIndexers() cache.Indexers {
	return cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, claimIndex: claimedName}
}

// claimedName is the index function of claimIndex.
func claimedName(obj interface{}) ([]string, error) {
	switch o := obj.(type) {
	case *corev1.Secret:
		return []string{ClusterName(o)}, nil
	case *cpv1alpha1.ClusterProfile:
		return []string{o.Name}, nil
	}
	return nil, nil
}

func secretClaim(s *corev1.Secret) claim {
	return claim{key: s.Namespace + "/" + s.Name, cluster: ClusterName(s), created: s.CreationTimestamp, ref: secretRef(s)}
}

func profileClaim(cp *cpv1alpha1.ClusterProfile) claim {
	return claim{key: profileKeyPrefix + cp.Namespace + "/" + cp.Name, cluster: cp.Name, created: cp.CreationTimestamp, ref: profileRef(cp)}
}

// claims lists every registration Secret and watched ClusterProfile.
func (r *Registry) claims() []claim {
	var out []claim
	if all, err := r.secrets.List(labels.Everything()); err == nil {
		for _, s := range all {
			out = append(out, secretClaim(s))
		}
	}
	for _, l := range r.profiles {
		if all, err := l.List(labels.Everything()); err == nil {
			for _, cp := range all {
				out = append(out, profileClaim(cp))
			}
		}
	}
	return out
}

// claimsOf lists the registration Secrets and watched ClusterProfiles that
// claim a cluster name, from claimIndex.
func (r *Registry) claimsOf(cluster string) []claim {
	objs, err := r.secretInformer.GetIndexer().ByIndex(claimIndex, cluster)
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("looking up the registrations of cluster %q: %w", cluster, err))
	}
	for _, inf := range r.profileInformers {
		more, err := inf.GetIndexer().ByIndex(claimIndex, cluster)
		if err != nil {
			utilruntime.HandleError(fmt.Errorf("looking up the ClusterProfiles of cluster %q: %w", cluster, err))
		}
		objs = append(objs, more...)
	}
	out := make([]claim, 0, len(objs))
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Secret:
			out = append(out, secretClaim(o))
		case *cpv1alpha1.ClusterProfile:
			out = append(out, profileClaim(o))
		}
	}
	return out
}

// nameOwner returns the oldest Secret or ClusterProfile claiming a cluster
// name; the queue key breaks ties so every replica agrees.
func (r *Registry) nameOwner(cluster string) *claim {
	var owner *claim
	for _, cl := range r.claimsOf(cluster) {
		if owner == nil || cl.olderThan(owner) {
			owner = &cl
		}
	}
	return owner
}

func (a *claim) olderThan(b *claim) bool {
	if !a.created.Equal(&b.created) {
		return a.created.Before(&b.created)
	}
	return a.key < b.key
}

// refForKey is the Event reference of a deleted Secret or ClusterProfile.
func refForKey(key string) *corev1.ObjectReference {
	if pkey, ok := strings.CutPrefix(key, profileKeyPrefix); ok {
		ns, n, _ := cache.SplitMetaNamespaceKey(pkey)
		return &corev1.ObjectReference{Kind: "ClusterProfile", APIVersion: cpv1alpha1.GroupVersion.String(), Namespace: ns, Name: n}
	}
	ns, n, _ := cache.SplitMetaNamespaceKey(key)
	return &corev1.ObjectReference{Kind: "Secret", APIVersion: "v1", Namespace: ns, Name: n}
}

// ClusterName is the member name a registration Secret claims.
func ClusterName(s *corev1.Secret) string {
	if n, ok := s.Annotations[AnnotationClusterName]; ok {
		return n
	}
	return s.Name
}

// leading reports whether this replica's Events are recorded.
func (r *Registry) leading() bool { return r.opts.Leading == nil || r.opts.Leading() }

// eventf records an Event on a registration Secret or ClusterProfile while
// this replica leads; static members have none.
func (r *Registry) eventf(ref *corev1.ObjectReference, eventType, reason, format string, args ...interface{}) {
	if ref != nil && r.leading() {
		r.recorder.Eventf(ref, eventType, reason, format, args...)
	}
}

// connEventf records an Event about a member's connection. With sharding,
// the replica that runs the connection records it, leader or not.
func (r *Registry) connEventf(ref *corev1.ObjectReference, eventType, reason, format string, args ...interface{}) {
	if ref != nil && (r.opts.Wanted != nil || r.leading()) {
		r.recorder.Eventf(ref, eventType, reason, format, args...)
	}
}

// warn logs a problem with a registration and records it as a warning
// Event while this replica leads; ReportState repeats it when a standby
// starts leading.
func (r *Registry) warn(ref *corev1.ObjectReference, reason, format string, args ...interface{}) {
	msg := fmt.Sprintf(format, args...)
	r.reject(ref, reason, msg)
	r.eventf(ref, corev1.EventTypeWarning, reason, "%s", msg)
	klog.InfoS("Member registration rejected", "kind", ref.Kind, "object", klog.KRef(ref.Namespace, ref.Name), "reason", reason, "message", msg)
}

// reject records a warning about a registration for ReportState.
func (r *Registry) reject(ref *corev1.ObjectReference, reason, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := refKey(ref)
	r.rejections[k] = append(r.rejections[k], rejection{ref: ref, reason: reason, message: msg})
}

// ReportState records, once, the state of every registration as this
// replica sees it. The daemon calls it when the replica starts leading: as
// a standby it recorded nothing, and a replica contends only once its
// members synced, so without it the first leader would never say that its
// members connected. A synced member gets MemberConnected, one that missed
// its sync timeout MemberSyncTimeout, an unreachable one MemberUnreachable,
// and a Secret or ClusterProfile that was refused its warnings again. After
// a takeover these repeat what the previous leader said: each leader
// reports the connections it serves the hub from.
func (r *Registry) ReportState() {
	if !r.leading() {
		return
	}
	type event struct {
		ref                    *corev1.ObjectReference
		eventType, reason, msg string
	}
	var out []event
	r.mu.RLock()
	for _, name := range r.namesLocked() {
		m := r.members[name]
		if m.ref == nil {
			continue
		}
		c := m.active
		if c == nil {
			continue // its registration's warnings follow
		}
		switch {
		case c.HasSynced():
			out = append(out, event{m.ref, corev1.EventTypeNormal, ReasonConnected,
				fmt.Sprintf("member %q connected and synced; this replica now leads", name)})
		case m.timedOut:
			cause := ""
			if f := c.Failure(); f != nil {
				cause = fmt.Sprintf(" (%s: %s)", f.Class, f.Message)
			}
			out = append(out, event{m.ref, corev1.EventTypeWarning, ReasonSyncTimeout,
				fmt.Sprintf("member %q did not sync within %s%s; still trying, its last-known hub objects are kept", name, r.opts.SyncTimeout, cause)})
		}
		if _, down := c.UnreachableSince(); down {
			class, why := unreachableWhy(c)
			out = append(out, event{m.ref, corev1.EventTypeWarning, class.Reason(),
				fmt.Sprintf("member %q %s; its last-known endpoints are kept unless an unreachable policy applies", name, why)})
		}
	}
	keys := make([]string, 0, len(r.rejections))
	for k := range r.rejections {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, rj := range r.rejections[k] {
			out = append(out, event{rj.ref, corev1.EventTypeWarning, rj.reason, rj.message})
		}
	}
	r.mu.RUnlock()
	for _, e := range out {
		r.recorder.Event(e.ref, e.eventType, e.reason, e.msg)
	}
}

// refKey identifies the object an Event reference names.
func refKey(ref *corev1.ObjectReference) string {
	return ref.Kind + "/" + ref.Namespace + "/" + ref.Name
}

func secretRef(s *corev1.Secret) *corev1.ObjectReference {
	if s == nil {
		return nil
	}
	return &corev1.ObjectReference{Kind: "Secret", APIVersion: "v1", Namespace: s.Namespace, Name: s.Name, UID: s.UID, ResourceVersion: s.ResourceVersion}
}

// hashOf identifies what a connection was built from: a change rebuilds it.
func hashOf(cluster string, kubeconfig []byte, settings ...string) string {
	h := sha256.New()
	h.Write([]byte(cluster))
	h.Write([]byte{0})
	h.Write(kubeconfig)
	for _, s := range settings {
		h.Write([]byte{0})
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil))
}
