package clusters

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"
	mcslisters "sigs.k8s.io/mcs-api/pkg/client/listers/apis/v1beta1"
)

// informerSet is one generation of a member's informers and their listers,
// built on the Cluster's clients with its event handlers.
type informerSet struct {
	services     cache.SharedIndexInformer
	slices       cache.SharedIndexInformer
	exports      cache.SharedIndexInformer // nil unless watched
	serviceList  corelisters.ServiceLister
	exportLister mcslisters.ServiceExportLister

	stopOnce sync.Once
	stop     chan struct{}
	// ctx ends with stop; its logger names the member, so that what the
	// informers log (a failed watch, say) says which member it is about.
	ctx context.Context
}

// memberLogger is the logger member informers log through, with the
// member's name added; a variable for tests.
var memberLogger = klog.Background

// onError, when not nil, handles the informers' failed lists and watches
// (and logs them: see cache.DefaultWatchErrorHandler).
func newInformerSet(cluster string, clients Clients, handlers EventHandlers, onError cache.WatchErrorHandlerWithContext) (*informerSet, error) {
	s := &informerSet{stop: make(chan struct{})}
	s.ctx = klog.NewContext(wait.ContextForChannel(s.stop), klog.LoggerWithValues(memberLogger(), "cluster", cluster))
	// No resync: the controller is level-triggered from events alone.
	kf := informers.NewSharedInformerFactoryWithOptions(clients.Kube, 0, informers.WithTransform(stripMemberObject))
	s.services = kf.Core().V1().Services().Informer()
	s.serviceList = kf.Core().V1().Services().Lister()
	s.slices = kf.Discovery().V1().EndpointSlices().Informer()
	if err := s.slices.AddIndexers(cache.Indexers{sliceServiceIndex: sliceService}); err != nil {
		return nil, err
	}
	if clients.MCS != nil {
		mf := mcsinformers.NewSharedInformerFactoryWithOptions(clients.MCS, 0, mcsinformers.WithTransform(stripMemberObject))
		s.exports = mf.Multicluster().V1beta1().ServiceExports().Informer()
		s.exportLister = mf.Multicluster().V1beta1().ServiceExports().Lister()
	}
	for _, inf := range []cache.SharedIndexInformer{s.services, s.slices, s.exports} {
		if inf == nil || onError == nil {
			continue
		}
		if err := inf.SetWatchErrorHandlerWithContext(onError); err != nil {
			return nil, fmt.Errorf("setting watch error handler: %w", err)
		}
	}
	for _, h := range []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{{s.services, handlers.Services}, {s.slices, handlers.EndpointSlices}, {s.exports, handlers.ServiceExports}} {
		if h.inf == nil || h.h == nil {
			continue
		}
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return nil, fmt.Errorf("adding event handler: %w", err)
		}
	}
	return s, nil
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

func (s *informerSet) shutdown() { s.stopOnce.Do(func() { close(s.stop) }) }

// Reconnecting. client-go's reflectors retry a failed list or watch after an
// exponential backoff that grows to 30 s, up to twice that with jitter, and
// that nothing outside an informer can reset: a member unreachable for a
// while stayed stale for up to a minute after it answered again. So when the
// health probe sees the member answer after it failed (probeLoop calls
// askReconnect), runInformers replaces the informers with a fresh set on the
// same clients, which lists at once:
//
//   - before the first sync nothing reads the informers (HasSynced is false),
//     so the old set is stopped and the fresh one started in its place;
//   - after it, make-before-break as for a rotated kubeconfig: the old set
//     keeps serving the last-known state while the fresh one lists; once
//     that has synced it becomes the set the listers read, the old one is
//     stopped, and onReconnected re-queues the member, whose caches may have
//     changed in ways no event told (deletes during the outage). HasSynced
//     stays true throughout, so nothing of the member is withdrawn.
//
// The price is one relist of the member per outage the probe saw, as a
// reflector whose resourceVersion expired would do anyway. The sync timeout
// and the health state belong to the Cluster and are not reset.

// askReconnect asks runInformers for a fresh informer set.
func (c *Cluster) askReconnect() {
	select {
	case c.reconnect <- struct{}{}:
	default:
	}
}

// runInformers runs the member's informers until the Cluster stops, closing
// firstSync and calling onSynced when they first sync, and replacing them
// when asked to reconnect, as described above.
func (c *Cluster) runInformers(firstSync chan<- struct{}, onSynced, onReconnected func()) {
	cur := c.informers.Load()
	defer func() { cur.shutdown() }()
	// Nothing of a member is read before the About API lets it in.
	select {
	case <-c.identity.admitted():
	case <-c.stop:
		return
	}
	cur.run()
	for synced := false; !synced; {
		switch c.waitSynced(cur) {
		case clusterStopped:
			return
		case reconnectAsked:
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

	for {
		select {
		case <-c.stop:
			return
		case <-c.reconnect:
		}
		next := c.freshInformers()
		for next != nil {
			next.run()
			switch c.waitSynced(next) {
			case clusterStopped:
				next.shutdown()
				return
			case reconnectAsked: // it went away and came back meanwhile
				next.shutdown()
				next = c.freshInformers()
			case setSynced:
				c.watchErr.Store(nil)
				c.informers.Store(next)
				cur.shutdown()
				cur, next = next, nil
				klog.InfoS("Member informers reconnected", "cluster", c.name)
				onReconnected()
			}
		}
	}
}

// freshInformers builds a new informer set, or returns nil (and logs) if
// that fails; the current set then keeps retrying on its own.
func (c *Cluster) freshInformers() *informerSet {
	klog.InfoS("Restarting member informers: the member answers again", "cluster", c.name, "synced", c.synced.Load())
	s, err := newInformerSet(c.name, c.clients, c.handlers, c.watchFailed)
	if err != nil {
		klog.ErrorS(err, "Building fresh member informers failed", "cluster", c.name)
		return nil
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
