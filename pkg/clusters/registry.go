package clusters

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
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
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
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
	// starts or stops succeeding.
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
	// compressor in the member's API server.
	DisableCompression bool
	// WatchServiceExports adds a ServiceExport informer per member.
	WatchServiceExports bool
	Policy              KubeconfigPolicy
	// NewClients builds a member's clients; tests inject fakes. The default
	// builds real clientsets from the config.
	NewClients func(cfg *rest.Config) (Clients, error)
	// UserAgent is set on member clients.
	UserAgent string
	// WarningHandler handles API warnings of member clients.
	WarningHandler rest.WarningHandler
	// ProbeInterval and ProbeTimeout pace the health probe of each member
	// (DefaultProbeInterval, DefaultProbeTimeout): an unreachable member is
	// noticed within their sum.
	ProbeInterval, ProbeTimeout time.Duration
	// Static members are registered without a Secret, e.g. the hub itself
	// with --hub-is-member. A Secret cannot claim their names.
	Static map[string]*rest.Config
}

// member is the registry's state for one cluster name.
type member struct {
	secret   string   // namespace/name of the owning Secret
	active   *Cluster // the connection the sync reads from
	pending  *Cluster // a rotated connection waiting to sync
	timedOut bool
}

// Registry runs one Cluster per registration Secret.
type Registry struct {
	opts     Options
	handler  Handler
	recorder record.EventRecorder

	secretInformer cache.SharedIndexInformer
	secrets        corelisters.SecretLister
	queue          workqueue.TypedRateLimitingInterface[string]

	// initialized is set once every Secret present at start was processed.
	initialized atomic.Bool

	mu       sync.RWMutex
	members  map[string]*member // by cluster name
	bySecret map[string]string  // secret key → cluster name
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
	f := informers.NewSharedInformerFactoryWithOptions(hub, 0,
		informers.WithNamespace(opts.Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.LabelSelector = labels.Set{LabelMemberCluster: MemberClusterValue}.String()
		}))
	r := &Registry{
		opts:           opts,
		handler:        handler,
		recorder:       recorder,
		secretInformer: f.Core().V1().Secrets().Informer(),
		secrets:        f.Core().V1().Secrets().Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "member_secrets"}),
		members:  map[string]*member{},
		bySecret: map[string]string{},
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
	if !cache.WaitForCacheSync(ctx.Done(), r.secretInformer.HasSynced) {
		return
	}
	for name, cfg := range r.opts.Static {
		if err := r.addStatic(name, cfg); err != nil {
			utilruntime.HandleError(fmt.Errorf("registering static member %q: %w", name, err))
		}
	}
	// Process the Secrets present at start before saying so: until then a
	// registered member would look unregistered, and its hub objects would
	// be garbage collected.
	if all, err := r.secrets.List(labels.Everything()); err == nil {
		for _, s := range all {
			key := s.Namespace + "/" + s.Name
			if err := r.syncSecret(key); err != nil {
				utilruntime.HandleError(fmt.Errorf("syncing member Secret %s: %w", key, err))
			}
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
		m.active.shutdown()
		if m.pending != nil {
			m.pending.shutdown()
		}
	}
}

// SecretsSynced reports whether the Secrets present at start have been
// processed: from then on a cluster name that is not registered really is gone.
func (r *Registry) SecretsSynced() bool { return r.initialized.Load() }

// Ready reports whether Secrets synced and every member synced or timed out.
func (r *Registry) Ready() bool {
	if !r.SecretsSynced() || r.queue.Len() > 0 {
		return false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, m := range r.members {
		if !m.active.HasSynced() && !m.timedOut {
			return false
		}
	}
	return true
}

// Get returns the active connection of a member, or nil.
func (r *Registry) Get(name string) *Cluster {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if m, ok := r.members[name]; ok {
		return m.active
	}
	return nil
}

// Names returns the registered member names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
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
	if err := r.syncSecret(key); err != nil {
		utilruntime.HandleError(fmt.Errorf("syncing member Secret %s: %w", key, err))
		r.queue.AddRateLimited(key)
		return true
	}
	r.queue.Forget(key)
	return true
}

// syncSecret brings the member registered by one Secret in line with it.
// Bad content keeps whatever already runs for the Secret and says why in an
// Event: a broken update must not take a working member down.
func (r *Registry) syncSecret(key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	secret, err := r.secrets.Secrets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		r.removeSecret(key, nil)
		return nil
	}
	if err != nil {
		return err
	}

	cluster := ClusterName(secret)
	if errs := validation.IsDNS1123Label(cluster); len(errs) > 0 {
		r.warn(secret, ReasonInvalidName, "cluster name %q is not a DNS-1123 label: %s", cluster, errs[0])
		return nil
	}
	if _, static := r.opts.Static[cluster]; static {
		r.warn(secret, ReasonDuplicateName, "cluster name %q is taken by a member the daemon registers itself (--hub-is-member); this Secret is ignored", cluster)
		return nil
	}
	if owner := r.nameOwner(cluster); owner != nil && owner.UID != secret.UID {
		r.warn(secret, ReasonDuplicateName, "cluster name %q is already registered by the older Secret %s/%s; this Secret is ignored", cluster, owner.Namespace, owner.Name)
		r.removeSecret(key, secret)
		return nil
	}

	policy, err := ParsePolicyOverride(secret.Annotations)
	if err != nil {
		r.warn(secret, ReasonInvalidConfig, "%v; the daemon's unreachable policy applies", err)
	}
	data := secret.Data[KubeconfigKey]
	hash := hashOf(cluster, data, secret.Annotations[AnnotationUnreachableGrace], secret.Annotations[AnnotationUnreachableWithdraw])
	r.mu.RLock()
	m := r.members[cluster]
	prevName, hadPrev := r.bySecret[key]
	upToDate := m != nil && m.secret == key && (m.active.hash == hash || (m.pending != nil && m.pending.hash == hash))
	r.mu.RUnlock()
	if upToDate {
		return nil
	}

	cfg, err := RESTConfig(data, r.opts.Policy)
	if err != nil {
		reason := ReasonInvalidConfig
		if isRefused(err) {
			reason = ReasonRefusedConfig
		}
		if m != nil {
			r.warn(secret, reason, "%v; keeping the previous connection to member %q", err, cluster)
		} else {
			r.warn(secret, reason, "%v; member %q not connected", err, cluster)
		}
		return nil
	}
	if hadPrev && prevName != cluster {
		// The Secret now names another cluster: withdraw the old name.
		r.removeSecret(key, secret)
	}
	r.configure(cfg)
	clients, err := r.opts.NewClients(cfg)
	if err != nil {
		r.warn(secret, ReasonClientFailed, "building client for member %q: %v", cluster, err)
		return nil
	}
	svcH, sliceH, exportH := r.handler.EventHandlers(cluster)
	c, err := newCluster(cluster, hash, key, clients, EventHandlers{Services: svcH, EndpointSlices: sliceH, ServiceExports: exportH})
	if err != nil {
		return err
	}
	c.policy = policy

	r.mu.Lock()
	m = r.members[cluster]
	if m == nil {
		r.members[cluster] = &member{secret: key, active: c}
	} else {
		if m.pending != nil {
			m.pending.shutdown()
		}
		m.pending = c
	}
	r.bySecret[key] = cluster
	r.mu.Unlock()

	ref := secretRef(secret)
	go r.run(c, ref)
	return nil
}

// configure applies the daemon's client settings to a member's config.
func (r *Registry) configure(cfg *rest.Config) {
	cfg.QPS, cfg.Burst = r.opts.QPS, r.opts.Burst
	cfg.UserAgent = r.opts.UserAgent
	cfg.WarningHandler = r.opts.WarningHandler
	if r.opts.DisableCompression {
		cfg.DisableCompression = true
	}
}

// addStatic registers a member that has no Secret.
func (r *Registry) addStatic(name string, cfg *rest.Config) error {
	cfg = rest.CopyConfig(cfg)
	r.configure(cfg)
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
	r.members[name] = &member{active: c}
	r.mu.Unlock()
	go r.run(c, nil)
	return nil
}

// run starts a connection and reports a sync timeout. A rotated connection
// replaces the active one only once it has synced (make-before-break).
func (r *Registry) run(c *Cluster, ref *corev1.ObjectReference) {
	c.started = time.Now()
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
	if current && m.active == c {
		m.timedOut = true
	}
	r.mu.Unlock()
	if !current {
		return
	}
	if m.active == c {
		r.eventf(ref, corev1.EventTypeWarning, ReasonSyncTimeout,
			"member %q did not sync within %s; still trying, its last-known hub objects are kept", c.name, r.opts.SyncTimeout)
		r.handler.ClusterSyncTimedOut(c.name)
	} else {
		r.eventf(ref, corev1.EventTypeWarning, ReasonRotationRejected,
			"new kubeconfig for member %q did not sync within %s; keeping the previous connection while it keeps trying", c.name, r.opts.SyncTimeout)
	}
	klog.InfoS("Member did not sync in time", "cluster", c.name, "timeout", r.opts.SyncTimeout)
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
		r.eventf(ref, corev1.EventTypeNormal, ReasonRotated, "member %q switched to the new kubeconfig after it synced", c.name)
		klog.InfoS("Member connection rotated", "cluster", c.name)
	} else {
		r.eventf(ref, corev1.EventTypeNormal, ReasonConnected, "member %q connected and synced in %s", c.name, time.Since(c.started).Round(time.Millisecond))
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
		r.eventf(ref, corev1.EventTypeNormal, ReasonReachable, "member %q answers again", c.name)
	default:
		r.eventf(ref, corev1.EventTypeWarning, ReasonUnreachable, "member %q does not answer its health probe; its last-known endpoints are kept unless an unreachable policy applies", c.name)
	}
	klog.InfoS("Member health changed", "cluster", c.name, "healthy", healthy)
	r.handler.ClusterHealthChanged(c.name, healthy)
}

// removeSecret stops the member registered by a Secret and tells the handler,
// which withdraws the member's hub objects. secret is nil when it was deleted.
func (r *Registry) removeSecret(key string, secret *corev1.Secret) {
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

	m.active.shutdown()
	if m.pending != nil {
		m.pending.shutdown()
	}
	ref := secretRef(secret)
	if secret == nil {
		ns, n, _ := cache.SplitMetaNamespaceKey(key)
		ref = &corev1.ObjectReference{Kind: "Secret", APIVersion: "v1", Namespace: ns, Name: n}
	}
	r.recorder.Eventf(ref, corev1.EventTypeNormal, ReasonMemberRemoved, "member %q unregistered; its hub objects are withdrawn", name)
	klog.InfoS("Member removed", "cluster", name, "secret", key)
	r.handler.ClusterRemoved(name)
	// Another Secret may have been waiting for this name.
	if all, err := r.secrets.List(labels.Everything()); err == nil {
		for _, s := range all {
			if ClusterName(s) == name && s.Namespace+"/"+s.Name != key {
				r.queue.Add(s.Namespace + "/" + s.Name)
			}
		}
	}
}

// nameOwner returns the oldest Secret claiming a cluster name; the Secret's
// namespace/name breaks ties so every replica agrees.
func (r *Registry) nameOwner(cluster string) *corev1.Secret {
	all, err := r.secrets.List(labels.Everything())
	if err != nil {
		return nil
	}
	var owner *corev1.Secret
	for _, s := range all {
		if ClusterName(s) != cluster {
			continue
		}
		if owner == nil || olderThan(s, owner) {
			owner = s
		}
	}
	return owner
}

func olderThan(a, b *corev1.Secret) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
}

// ClusterName is the member name a registration Secret claims.
func ClusterName(s *corev1.Secret) string {
	if n, ok := s.Annotations[AnnotationClusterName]; ok {
		return n
	}
	return s.Name
}

// eventf records an Event on a registration Secret; static members have none.
func (r *Registry) eventf(ref *corev1.ObjectReference, eventType, reason, format string, args ...interface{}) {
	if ref != nil {
		r.recorder.Eventf(ref, eventType, reason, format, args...)
	}
}

func (r *Registry) warn(secret *corev1.Secret, reason, format string, args ...interface{}) {
	msg := fmt.Sprintf(format, args...)
	r.recorder.Event(secretRef(secret), corev1.EventTypeWarning, reason, msg)
	klog.InfoS("Member Secret rejected", "secret", klog.KObj(secret), "reason", reason, "message", msg)
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
