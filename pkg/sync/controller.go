package sync

import (
	"context"
	"errors"
	"fmt"
	stdsync "sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/addresses"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// Options configure the controller.
type Options struct {
	Workers            int
	Export             ExportPolicy
	PerClusterServices endpoints.PerClusterMode
	CreateNamespaces   bool
	// UnreachableGrace marks an unreachable member's endpoints not ready
	// after this long; UnreachableWithdraw withdraws them. Zero: never.
	UnreachableGrace, UnreachableWithdraw time.Duration
	// LeaseNamespace holds the member liveness Leases; LeaseDuration is
	// their duration (renewed every quarter of it). Empty namespace: none.
	LeaseNamespace string
	LeaseDuration  time.Duration
	// HubMetadata reads the metadata of our hub EndpointSlices and
	// Endpoints, which feeds their caches (see hubdigests.go). Required.
	HubMetadata metadata.Interface
	// LeaseClient reads and writes the member liveness Leases; the daemon
	// gives it a rate limiter of its own, so that renewals neither wait
	// behind the aggregated writes nor delay them. Nil: the hub client.
	LeaseClient kubernetes.Interface
	// WriteExportStatus writes Valid/Ready/Conflict conditions to member
	// ServiceExports (serviceexport mode only).
	WriteExportStatus bool
	Recorder          record.EventRecorder
	Metrics           *Metrics
	// Clock times the unreachable policy; nil is the real clock.
	Clock Clock
	// Addresses is the daemon's policy for member endpoint addresses (see
	// package addresses). Its HubServiceRanges are fixed ones; with
	// WatchServiceCIDRs, the hub's ServiceCIDRs are read too.
	Addresses         addresses.Policy
	WatchServiceCIDRs bool
	// MaxMemberServices and MaxMemberEndpoints bound what one member may
	// export (see bounds); zero: no bound.
	MaxMemberServices, MaxMemberEndpoints int
	// Sharding, when replicas share the members, says which keys this
	// one writes; nil: all of them.
	Sharding Sharding
	// HubCluster is the hub's own member name where the hub is a member
	// (--hub-is-member); "" otherwise. Then the hub's Nodes are read for
	// their zones, which "this cluster first" hints for.
	HubCluster string
	// PreferLocal is "this cluster first" for the imports whose exports
	// do not say (endpoints.AnnotationPreferLocal).
	PreferLocal bool
	// AliasDomain is the hub's cluster domain when every import gets an
	// alias, "<service>-clusterset" (endpoints.AliasService); "" for none.
	AliasDomain string
}

// Clock is the time the controller reads and the timers it sets:
// clock.RealClock, or a fake in tests. AfterFunc must not hold a lock of
// its own while the function runs: the function reads the clock.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) clock.Timer
}

// Controller keeps the hub's aggregated objects in line with the members.
type Controller struct {
	opts     Options
	members  Members // the registry; through leaseMembers with member Leases
	hub      kubernetes.Interface
	hubMCS   mcsclientset.Interface
	leases   kubernetes.Interface // of the member Leases (Options.LeaseClient)
	recorder record.EventRecorder
	metrics  *Metrics

	queue *keyQueue
	// written holds our writes the hub caches have not seen yet.
	written *written
	// waits holds the keys whose last sync waits for a condition.
	waits *waits
	// taken holds the names objects not ours were found to hold.
	taken taken
	// policy times the steps of unreachable members' policies.
	policy *policyTimers
	// read and write are the read and apply steps of a sync: one has
	// listers and no client that writes, the other clients and no listers.
	read  *hubReader
	write *hubWriter

	// caches are the hub informers; read reads through them.
	caches *hubCaches
	// zones are the zones of the hub's Nodes, where the hub is a member.
	zones *hubZones

	// failures decides which sync failures are logged loud.
	failures *failureLog

	// state is what the syncs keep of their keys, by member: export
	// ledgers, refusals, invalid exports, export conflicts.
	state     *memberStates
	report    reporter // the per-cluster gauges, read off state
	startTime time.Time

	// leaseWake asks runMemberLeases to publish members' health now.
	leaseWake chan struct{}
	// stopped is closed when Run returns; timers end with it.
	stopped  chan struct{}
	stopOnce stdsync.Once
}

// New builds a controller writing to the hub through hub and hubMCS.
func New(hub kubernetes.Interface, hubMCS mcsclientset.Interface, members Members, opts Options) (*Controller, error) {
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.PerClusterServices == "" {
		opts.PerClusterServices = endpoints.PerClusterMirror
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.Recorder == nil {
		opts.Recorder = &record.FakeRecorder{}
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.LeaseClient == nil {
		opts.LeaseClient = hub
	}
	queue := newKeyQueue()
	state := newMemberStates(opts.MaxMemberServices, opts.MaxMemberEndpoints)
	written, waits := newWritten(), newWaits(queue)
	c := &Controller{
		opts:      opts,
		members:   members,
		hub:       hub,
		hubMCS:    hubMCS,
		leases:    opts.LeaseClient,
		recorder:  opts.Recorder,
		metrics:   opts.Metrics,
		queue:     queue,
		written:   written,
		waits:     waits,
		leaseWake: make(chan struct{}, 1),
		stopped:   make(chan struct{}),
		failures:  newFailureLog(opts.Clock.Now),
		policy:    newPolicyTimers(opts.Clock),

		state:     state,
		report:    reporter{state: state, waits: waits, written: written, sharding: opts.Sharding},
		startTime: time.Now(),
	}

	caches, err := newHubCaches(hub, hubMCS, opts)
	if err != nil {
		return nil, err
	}
	c.caches = caches
	c.zones = &hubZones{}
	c.report.imports, c.report.preferLocal = caches.imports, opts.PreferLocal
	if opts.HubCluster != "" {
		c.report.hubCluster, c.report.zones = opts.HubCluster, c.zones
	}
	if opts.LeaseNamespace != "" && opts.LeaseDuration > 0 {
		c.members = leaseMembers{Members: members, c: c}
	}
	c.read = newHubReader(caches, c.written, &c.taken, localityOptions{preferLocal: opts.PreferLocal, hubCluster: opts.HubCluster, zones: c.zones.get},
		func(ctx context.Context, namespace, name string) (*corev1.Service, error) {
			return hub.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
		},
		func(ctx context.Context, namespace, name string) (*mcsv1beta1.ServiceImport, error) {
			return hubMCS.MulticlusterV1beta1().ServiceImports(namespace).Get(ctx, name, metav1.GetOptions{})
		})
	c.write = &hubWriter{hub: hub, hubMCS: hubMCS, written: c.written, taken: &c.taken, metrics: c.metrics}

	for resource, inf := range caches.ours() {
		if _, err := inf.AddEventHandler(c.hubHandler(resource)); err != nil {
			return nil, err
		}
	}
	if _, err := caches.nsInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: c.namespaceAdded}); err != nil {
		return nil, err
	}
	if caches.cidrInf != nil {
		if _, err := caches.cidrInf.AddEventHandler(changeHandler(c.serviceRangesChanged)); err != nil {
			return nil, err
		}
	}
	if caches.nodeInf != nil {
		// The zones are counted by the handler: the caches have synced
		// only once it has seen the first list.
		reg, err := caches.nodeInf.AddEventHandler(c.nodeHandler())
		if err != nil {
			return nil, err
		}
		caches.nodesCounted = reg.HasSynced
	}
	return c, nil
}

// Describe implements prometheus.Collector: the per-cluster gauges
// (reporter).
func (c *Controller) Describe(ch chan<- *prometheus.Desc) { c.report.Describe(ch) }

// Collect implements prometheus.Collector.
func (c *Controller) Collect(ch chan<- prometheus.Metric) { c.report.Collect(ch) }

// HasStarted reports whether Run got past startup and runs workers.
func (c *Controller) HasStarted() bool { return c.queue.hasStarted() }

// HubSynced reports whether the hub caches have synced.
func (c *Controller) HubSynced() bool { return c.caches.hasSynced() }

// StartInformers starts the hub informers. Standby replicas call it to keep
// warm caches; Run calls it too.
func (c *Controller) StartInformers(ctx context.Context) { c.caches.start(ctx.Done()) }

// Run waits for the hub caches and the member registrations, queues every hub
// object for garbage collection, and runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	defer c.queue.shutDown()
	defer c.stopOnce.Do(func() { close(c.stopped) })
	defer c.policy.stopAll()
	c.StartInformers(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.HubSynced) {
		return errors.New("hub caches did not sync")
	}
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return c.members.SecretsSynced(), nil
	}); err != nil {
		return fmt.Errorf("waiting for member registrations: %w", err)
	}
	c.begin()

	klog.InfoS("Starting workers", "count", c.opts.Workers)
	var wg stdsync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.runMemberLeases(ctx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		wait.UntilWithContext(ctx, func(context.Context) { c.expireWrites() }, writtenTTL/4)
	}()
	for i := 0; i < c.opts.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait.UntilWithContext(ctx, c.worker, time.Second)
		}()
	}
	<-ctx.Done()
	c.queue.shutDown()
	wg.Wait()
	return nil
}

// begin queues every hub object once, now that the hub caches and the
// registrations are known: those of clusters without a Secret are withdrawn;
// those of registered clusters wait for the cluster to sync. It times the
// policies of unreachable members again, by the outages their Leases
// publish.
func (c *Controller) begin() {
	if c.caches.memberLeases != nil {
		// A policy timer set before the Lease cache synced went by this
		// replica's own outage start (see outageStart).
		for _, name := range c.members.Names() {
			if st, _ := c.members.Lookup(name); st.Unreachable {
				c.applyPolicy(name)
			}
		}
	}
	c.enqueueHubObjects(labels.Everything())
	c.queue.start()
	c.waits.wake(waitRegistrations(), true)
}

func (c *Controller) worker(ctx context.Context) {
	for c.processNext(ctx) {
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, drained, quit := c.queue.get()
	if quit {
		return false
	}
	defer c.queue.done(key)
	for _, k := range drained {
		c.waits.wake(waitSourcesSwept(k), true)
	}
	// What the key waited for is asked again by its sync.
	c.waits.drop(key)

	start := time.Now()
	err := c.sync(ctx, key)
	c.queue.finish(key)
	c.metrics.SyncDuration.Observe(time.Since(start).Seconds())
	// sync settled its outcome; what is left is how the key is queued
	// again.
	conflicts := conflictsIn(err)
	switch {
	case err == nil:
		c.metrics.Syncs.WithLabelValues(resultSuccess).Inc()
		c.reportRecovery(key)
		c.queue.succeeded(key)
	case errors.Is(err, errStaleCache):
		// The watch event that refreshes the cache queues the key; the
		// delayed add is a safety net should that event never come.
		c.metrics.Syncs.WithLabelValues(resultStale).Inc()
		c.queue.retryAfter(key, staleRetry, true) // pending until a sync of it succeeds
	case len(conflicts) > 0:
		// Someone else's object holds our name: nothing we can do but look
		// again later, without hammering the API server.
		c.metrics.Syncs.WithLabelValues(resultConflict).Inc()
		c.queue.retryAfter(key, conflictRetry, false)
	default:
		c.metrics.Syncs.WithLabelValues(resultError).Inc()
		c.reportFailure(key, err)
		c.queue.retry(key)
	}
	return true
}

// sync brings the hub objects owned by key in line with the members, and
// settles its outcome.
func (c *Controller) sync(ctx context.Context, key Key) error {
	var out outcome
	var err error
	if key.IsClusterSet() {
		err = c.syncClusterSet(ctx, key, &out)
	} else {
		err = c.syncMemberService(ctx, key, &out)
	}
	c.settle(key, &out, err)
	return err
}

// sourcesSwept reports whether no member key of a clusterset key's service
// waits in the bulk lane (waitSourcesSwept).
func (c *Controller) sourcesSwept(key Key) bool { return c.queue.bulkPending(key) == 0 }

// Queued returns how many keys wait in this controller's queue (not in
// flight, not waiting out a retry). Unlike the workqueue depth metric,
// which client-go keeps per process and name, it counts this controller
// only.
func (c *Controller) Queued() int { return c.queue.len() }

// Pending is the number of keys queued, being synced, waiting to retry
// after an error, or to merge after mergeCoalesce. Keys parked after a name conflict are not counted: they
// wait for a person.
func (c *Controller) Pending() int { return c.queue.pending() }

// reportFailure says a new failure of key where an operator looks: the log
// at the default verbosity and a Warning Event on the service's
// ServiceImport, with the hub's own answer. Repeats of the same failure go
// to V(2) until failureRepeat has passed.
func (c *Controller) reportFailure(key Key, err error) {
	if !c.failures.loud(key, err) {
		klog.V(2).InfoS("Sync failed, will retry", "cluster", key.Cluster, "key", key.String(), "retries", c.queue.retries(key), "err", err)
		return
	}
	klog.InfoS("Sync failed, will retry", "cluster", key.Cluster, "key", key.String(), "retries", c.queue.retries(key), "err", err)
	c.recorder.Event(importRef(key), corev1.EventTypeWarning, ReasonSyncFailed, failureSubject(key)+" fails, retrying: "+err.Error())
}

// reportRecovery says that key, whose failure was said, synced.
func (c *Controller) reportRecovery(key Key) {
	if !c.failures.forget(key) {
		return
	}
	klog.InfoS("Sync succeeded again", "cluster", key.Cluster, "key", key.String())
	c.recorder.Event(importRef(key), corev1.EventTypeNormal, ReasonSyncRecovered, failureSubject(key)+" succeeds again")
}
