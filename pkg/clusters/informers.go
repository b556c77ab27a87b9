package clusters

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcslisters "sigs.k8s.io/mcs-api/pkg/client/listers/apis/v1beta1"
)

// informerSet is one generation of a member's informers and their listers,
// built on the Cluster's clients with its event handlers.
//
// They are plain informers (cache.NewInformerWithOptions), not shared ones:
// each has exactly one handler, which only maps objects to queue keys and
// never blocks, so the controller's process loop calls it directly. A
// shared informer would add, per handler, a listener with a 1024-slot ring
// buffer and two goroutines, and a processor goroutine: about 18 KB and
// three goroutines per member watch, for nothing.
type informerSet struct {
	services     cache.Controller
	slices       cache.Controller
	exports      cache.Controller // nil unless watched
	serviceList  corelisters.ServiceLister
	sliceIndex   cache.Indexer
	exportLister mcslisters.ServiceExportLister
	exportSrc    *exportSource // nil unless watched

	// ctx ends with cancel, or with the Cluster's; its logger names the
	// member, so that what the informers log (a failed watch, say) says
	// which member it is about.
	ctx    context.Context
	cancel context.CancelFunc
	// onError, when not nil, is told of the failed lists and watches a
	// reflector reports to its watch error handler (see memberListWatch).
	onError func(error)
	// failed is set once a list or watch of this set failed, for any
	// reason but a watch's normal end; lastFailure is when it last did
	// (Unix nanoseconds).
	failed      atomic.Bool
	lastFailure atomic.Int64
	// bounds bound what the informers read (readbounds.go); over, when not
	// nil, is told which of them is over its bound now, or back within it.
	bounds ReadBounds
	over   func(what string, err error)
}

// memberLogger is the logger member informers log through, with the
// member's name added; a variable for tests.
var memberLogger = klog.Background

// newInformerSet builds a member's informers; they stop when parent ends
// or the set is shut down. onError, when not nil, is told of their failed
// lists and watches (which client-go's reflector logs, with the member's
// name).
func newInformerSet(parent context.Context, cluster string, clients Clients, handlers EventHandlers, onError func(error), bounds ReadBounds, over func(string, error)) (*informerSet, error) {
	s := &informerSet{onError: onError, bounds: bounds, over: over}
	logger := klog.LoggerWithValues(memberLogger(), "cluster", cluster)
	s.ctx, s.cancel = context.WithCancel(klog.NewContext(parent, logger))
	// No resync: the controller is level-triggered from events alone.
	core, discovery := clients.Kube.CoreV1(), clients.Kube.DiscoveryV1()
	services := s.informer(&logger, "Services", clients.Kube, &corev1.Service{}, handlers.Services,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return core.Services(metav1.NamespaceAll).List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return core.Services(metav1.NamespaceAll).Watch(ctx, o)
		})
	s.services, s.serviceList = services.ctl, corelisters.NewServiceLister(services.index)
	slices := s.informer(&logger, "EndpointSlices", clients.Kube, &discoveryv1.EndpointSlice{}, handlers.EndpointSlices,
		cache.Indexers{sliceServiceIndex: sliceService},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return discovery.EndpointSlices(metav1.NamespaceAll).List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return discovery.EndpointSlices(metav1.NamespaceAll).Watch(ctx, o)
		})
	s.slices, s.sliceIndex = slices.ctl, slices.index
	if clients.MCS != nil {
		s.exportSrc = &exportSource{mcs: clients.MCS, disco: clients.Discovery, every: exportRediscover}
		// Always listed, never streamed: a list is where the served
		// version is looked up, and a member serving none has no watch.
		exports := s.informer(&logger, "ServiceExports", nil, &mcsv1beta1.ServiceExport{}, handlers.ServiceExports,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, s.exportSrc.list, s.exportSrc.watch)
		s.exports, s.exportLister = exports.ctl, mcslisters.NewServiceExportLister(exports.index)
		s.exportSrc.store = exports.index
	}
	return s, nil
}

// informer is one plain informer of the set and its indexer.
type informer struct {
	ctl   cache.Controller
	index cache.Indexer
}

// informer builds one informer of the set on list and watch; client tells
// whether the reflector may stream its initial list (see
// watchlist.DoesClientNotSupportWatchListSemantics; nil: it may not).
func (s *informerSet) informer(logger *klog.Logger, what string, client any, obj runtime.Object, h cache.ResourceEventHandler, indexers cache.Indexers,
	list cache.ListWithContextFunc, watchFunc cache.WatchFuncWithContext) informer {
	if h == nil {
		h = cache.ResourceEventHandlerFuncs{}
	}
	bound := newReadBound(what, s.bounds)
	bound.strip = stripMemberObject
	store, ctl := cache.NewInformerWithOptions(cache.InformerOptions{
		Logger: logger,
		ListerWatcher: &memberListWatch{
			ListWatch:   &cache.ListWatch{ListWithContextFunc: list, WatchFuncWithContext: watchFunc},
			what:        what,
			noWatchList: client == nil || watchlist.DoesClientNotSupportWatchListSemantics(client),
			set:         s,
			bound:       bound,
		},
		ObjectType: obj,
		Handler:    countingHandler{bound: bound, h: h},
		Indexers:   indexers,
		Transform:  stripMemberObject,
	})
	return informer{ctl: ctl, index: store.(cache.Indexer)}
}

// memberListWatch lists and watches for one member informer, and tells its
// set of failures. A plain informer takes no watch error handler, so this
// is where the set learns what a shared informer's reflector passed to
// one: a failed list, or a watch that failed to start, except when the
// reflector retries by itself (connection refused, 429 Too Many Requests)
// or lists instead (a streaming list request). Any failure but a watch's
// normal end marks the set failed.
type memberListWatch struct {
	*cache.ListWatch
	what        string
	noWatchList bool
	set         *informerSet
	bound       *readBound
}

// IsWatchListSemanticsUnSupported keeps the reflector from streaming its
// initial list from a client that cannot (the fake clientsets of tests).
func (lw *memberListWatch) IsWatchListSemanticsUnSupported() bool { return lw.noWatchList }

func (lw *memberListWatch) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	obj, done, err := lw.bound.list(ctx, o, lw.ListWatch.ListWithContext)
	if err != nil {
		if errors.Is(err, errOverBounds) {
			lw.set.overBound(lw.what, err)
		}
		lw.set.failure(ctx, fmt.Errorf("listing %s: %w", lw.what, err), true)
		return nil, err
	}
	if done {
		lw.set.overBound(lw.what, nil)
	}
	return obj, nil
}

func (lw *memberListWatch) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	w, err := lw.ListWatch.WatchWithContext(ctx, o)
	streaming := o.SendInitialEvents != nil && *o.SendInitialEvents
	if err != nil {
		retried := utilnet.IsConnectionRefused(err) || apierrors.IsTooManyRequests(err)
		lw.set.failure(ctx, fmt.Errorf("watching %s: %w", lw.what, err), !streaming && !retried)
		return w, err
	}
	return lw.bound.watch(w, streaming, func(err error) {
		lw.set.overBound(lw.what, err)
		lw.set.failure(ctx, fmt.Errorf("watching %s: %w", lw.what, err), true)
	}, func() { lw.set.overBound(lw.what, nil) }), nil
}

// failure records a failed list or watch, and passes it on to onError
// when report is set. Errors of a set being stopped, and a watch's normal
// end, are no failure.
func (s *informerSet) failure(ctx context.Context, err error, report bool) {
	if ctx.Err() != nil || watchClosed(err) {
		return
	}
	s.failed.Store(true)
	s.lastFailure.Store(time.Now().UnixNano())
	if report && s.onError != nil {
		s.onError(err)
	}
}

// overBound tells that informer what read past its bound (err), or a
// complete list within it (nil).
func (s *informerSet) overBound(what string, err error) {
	if s.over != nil && s.ctx.Err() == nil {
		s.over(what, err)
	}
}

// failedSince reports whether a list or watch of the set failed at t or
// later.
func (s *informerSet) failedSince(t time.Time) bool {
	return s.failed.Load() && s.lastFailure.Load() >= t.UnixNano()
}

func (s *informerSet) run() {
	go s.services.RunWithContext(s.ctx)
	go s.slices.RunWithContext(s.ctx)
	if s.exports != nil {
		go s.exports.RunWithContext(s.ctx)
	}
}

func (s *informerSet) hasSynced() bool {
	return s.services.HasSynced() && s.slices.HasSynced() && (s.exports == nil || s.exports.HasSynced())
}

func (s *informerSet) shutdown() { s.cancel() }

// Reconnecting. client-go's reflectors retry a failed list or watch after an
// exponential backoff that grows to 30 s, up to twice that with jitter, and
// that nothing outside an informer can reset: a member unreachable for a
// while stayed stale for up to a minute after it answered again. So when the
// health probe sees the member answer after it failed (probeLoop calls
// askReconnect), the informers are replaced with a fresh set on the same
// clients, which lists at once:
//
//   - before the first sync nothing reads the informers (HasSynced is false),
//     so the old set is stopped and the fresh one started in its place; but
//     only if a list or watch of the old set failed: one that is still
//     listing (a probe that timed out under the load of a cold start, say)
//     has no backoff to skip, and replacing it would only list again;
//   - after it, make-before-break as for a rotated kubeconfig: the old set
//     keeps serving the last-known state while the fresh one lists; once
//     that has synced it becomes the set the listers read, the old one is
//     stopped, and onReconnected re-queues the member, whose caches may have
//     changed in ways no event told (deletes during the outage). HasSynced
//     stays true throughout, so nothing of the member is withdrawn.
//
// After the first sync, an outage asks for fresh informers only when it
// was one for the informers too: probeFailureThreshold failed probes in a
// row (one slow probe is none), and a list or watch of the set failed
// during the outage. Informers whose watches held while the probe timed
// out (an API server slow to answer, under load) missed no event and have
// no backoff to skip: relisting them would only add to the load, and a
// thousand members did so over and over in the benchmark at a million
// endpoints. The price is one relist of the member per outage of its
// informers, as a reflector whose resourceVersion expired would do anyway.
// The sync timeout and the health state belong to the Cluster and are not
// reset.
//
// One goroutine serves the requests at a time (informerLoop): runInformers
// until the first sync, then one that askReconnect starts when a request
// comes and that ends when none is left. A synced member that answers its
// probes has none.

// askReconnect asks for a fresh informer set.
func (c *Cluster) askReconnect() {
	select {
	case c.reconnect <- struct{}{}:
	default:
	}
	if c.informerLoop.CompareAndSwap(false, true) {
		go c.reconnectLoop()
	}
}

// runInformers runs the member's informers until they first sync, closing
// firstSync and calling onSynced then, and replacing them before that when
// asked to reconnect, as described above. The sets stop with the Cluster.
func (c *Cluster) runInformers(firstSync chan<- struct{}, onSynced func()) {
	cur := c.informers.Load()
	// Nothing of a member is read before the About API lets it in.
	if !c.admitByIdentity() {
		return
	}
	cur.run()
	for synced := false; !synced; {
		switch c.waitSynced(cur) {
		case clusterStopped:
			return
		case reconnectAsked:
			if !cur.failed.Load() {
				klog.V(2).InfoS("Member answers again; its informers, still listing, are kept", "cluster", c.name)
				continue
			}
			if next := c.freshInformers(); next != nil {
				cur.shutdown()
				cur = next
				c.informers.Store(cur)
				cur.run()
			}
		case setSynced:
			synced = true
		}
	}
	c.watchErr.Store(nil)
	c.synced.Store(true)
	select {
	case c.probeNow <- struct{}{}:
	default:
	}
	close(firstSync)
	onSynced()
	if c.loopDone() {
		c.reconnectLoop()
	}
}

// loopDone ends the turn of the goroutine serving reconnect requests, and
// reports whether it must go on: a request came that no other goroutine
// was started for.
func (c *Cluster) loopDone() bool {
	c.informerLoop.Store(false)
	return len(c.reconnect) > 0 && c.informerLoop.CompareAndSwap(false, true)
}

// reconnectLoop serves reconnect requests of a synced member, make-before-
// break, until none is left or the Cluster stops.
func (c *Cluster) reconnectLoop() {
	for {
		select {
		case <-c.reconnect: // served now
		default:
		}
		if !c.swapInformers() || !c.loopDone() {
			return
		}
	}
}

// swapInformers replaces the synced member's informers with a fresh set
// once that has synced; false when the Cluster stopped meanwhile.
func (c *Cluster) swapInformers() bool {
	next := c.freshInformers()
	for next != nil {
		next.run()
		switch c.waitSynced(next) {
		case clusterStopped:
			return false
		case reconnectAsked: // it went away and came back meanwhile
			next.shutdown()
			next = c.freshInformers()
		case setSynced:
			c.watchErr.Store(nil)
			old := c.informers.Swap(next)
			old.shutdown()
			klog.InfoS("Member informers reconnected", "cluster", c.name)
			c.onReconnected()
			return true
		}
	}
	return true
}

// freshInformers builds a new informer set, or returns nil (and logs) if
// that fails; the current set then keeps retrying on its own.
func (c *Cluster) freshInformers() *informerSet {
	klog.InfoS("Restarting member informers: the member answers again", "cluster", c.name, "synced", c.synced.Load())
	s, err := newInformerSet(c.ctx, c.name, c.clients, c.handlers, c.watchFailed, c.bounds, c.overBound)
	if err != nil {
		klog.ErrorS(err, "Building fresh member informers failed", "cluster", c.name)
		return nil
	}
	if cur := c.informers.Load(); cur != nil && cur.exportSrc != nil {
		s.exportSrc.inherit(cur.exportSrc)
	}
	return s
}

type waitResult int

const (
	setSynced waitResult = iota
	reconnectAsked
	clusterStopped
)

// syncPoll is how often waitSynced checks an informer set, as
// cache.WaitForCacheSync does.
const syncPoll = 100 * time.Millisecond

// waitSynced waits until s has synced, a reconnect is asked or the Cluster
// stops.
func (c *Cluster) waitSynced(s *informerSet) waitResult {
	t := time.NewTicker(syncPoll)
	defer t.Stop()
	for {
		if s.hasSynced() {
			return setSynced
		}
		select {
		case <-c.stop:
			return clusterStopped
		case <-c.reconnect:
			return reconnectAsked
		case <-t.C:
		}
	}
}
