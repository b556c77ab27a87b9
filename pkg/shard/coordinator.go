package shard

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
)

// fenceWriters is how many fence writes a replica has in flight at once.
const fenceWriters = 16

// Members is the registry's side of the members.
type Members interface {
	// Names lists the registered members.
	Names() []string
	// SecretsSynced reports whether Names holds every registration that
	// existed when the registry started: until then it may miss some.
	SecretsSynced() bool
	// Warm reports whether this replica's connection to a member synced,
	// missed its sync timeout, or cannot be made.
	Warm(cluster string) bool
	// Reconsider connects or disconnects a member after Wants changed.
	Reconsider(cluster string)
}

// Syncer is the controller's side.
type Syncer interface {
	// Busy reports whether a sync of one of the member's keys runs.
	Busy(cluster string) bool
	// OwnershipChanged is told when Owns or Free of a member may have
	// changed, and when the replica starts or stops merging.
	OwnershipChanged(cluster string)
	// Weight is the number of endpoints the hub holds of a member.
	Weight(cluster string) int
}

// Options configure a Coordinator.
type Options struct {
	Namespace string
	Identity  string
	// LeaseDuration, RenewDeadline and RetryPeriod time the peer Lease as
	// those of leader election time the leader Lease.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Leading reports whether this replica holds the leader Lease and
	// may write now.
	Leading func() bool
	// Bound is the load bound of Assign; zero: DefaultBound.
	Bound float64
	// SettleTimeout bounds how long Settled waits, from the first
	// reconcile, for every member to be assigned to a live replica.
	SettleTimeout time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time

	// For a caller that drives the coordinator itself (Reconcile, Renew,
	// Observe) instead of Run, and owns the order of its events:
	// Cache, when set, is where Leases are read, in place of an informer
	// of the coordinator's own, and the caller delivers each change it
	// shows with Observe; Go starts a handover's wait for the member's
	// syncs in flight (nil: a goroutine); Sleep is that wait's pause
	// between two looks (nil: time.Sleep).
	Cache coordinationlisters.LeaseNamespaceLister
	Go    func(func())
	Sleep func(time.Duration)
}

// Coordinator runs one replica's side of sharding: its peer Lease, the
// fences it takes and frees, and, on the leader, the assignment.
type Coordinator struct {
	opts    Options
	hub     kubernetes.Interface
	members Members
	syncer  Syncer
	peers   *peers

	informer cache.SharedIndexInformer
	leases   coordinationlisters.LeaseNamespaceLister
	kick     chan struct{}

	mu sync.Mutex
	ownership
	draining bool
	giveUp   bool
	// peerLease is our peer Lease as last written.
	peerLease *coordinationv1.Lease
	// wrote holds the fences this replica wrote that the cache may not
	// show yet (see fenceLease).
	wrote map[string]wroteFence
	// assignedAt is when this replica first saw each member it does not
	// hold assigned to it; unownedSince, on the leader, since when each
	// registered member has had no live holder.
	assignedAt   map[string]time.Time
	unownedSince map[string]time.Time
	metrics      metrics
	// dead holds, for one reconcile, what deadAtSource found of each
	// holder: the fences of a dead replica cost one read, not one each.
	dead map[string]bool
	// firstReconcile is when the first reconcile ended; assigned whether
	// every registered member then had a live assignee.
	firstReconcile time.Time
	assigned       bool
}

// wroteFence is a fence as this replica wrote it, and the resourceVersion
// the write replaced ("" for a create).
type wroteFence struct {
	prev string
	obj  *coordinationv1.Lease
}

// New builds a coordinator. Start its informer with Run.
func New(hub kubernetes.Interface, members Members, syncer Syncer, opts Options) *Coordinator {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Bound == 0 {
		opts.Bound = DefaultBound
	}
	if opts.Go == nil {
		opts.Go = func(f func()) { go f() }
	}
	if opts.Sleep == nil {
		opts.Sleep = time.Sleep
	}
	c := &Coordinator{
		opts: opts, hub: hub, members: members, syncer: syncer,
		peers:     newPeers(opts.LeaseDuration, opts.Now),
		leases:    opts.Cache,
		kick:      make(chan struct{}, 1),
		ownership: newOwnership(),
		wrote:     map[string]wroteFence{},

		assignedAt:   map[string]time.Time{},
		unownedSince: map[string]time.Time{},
		metrics:      newMetrics(),
	}
	if c.leases != nil {
		return c
	}
	req, _ := labels.NewRequirement(LabelRole, selection.Exists, nil)
	f := informers.NewSharedInformerFactoryWithOptions(hub, 0, informers.WithNamespace(opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = req.String() }))
	c.informer = f.Coordination().V1().Leases().Informer()
	c.leases = f.Coordination().V1().Leases().Lister().Leases(opts.Namespace)
	_, _ = c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { c.leaseEvent(obj, false) },
		UpdateFunc: func(_, obj interface{}) { c.leaseEvent(obj, false) },
		DeleteFunc: func(obj interface{}) { c.leaseEvent(obj, true) },
	})
	return c
}

func (c *Coordinator) leaseEvent(obj interface{}, gone bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if l, ok := obj.(*coordinationv1.Lease); ok {
		c.Observe(l, gone)
	}
}

// Observe takes one Lease change the cache now shows (gone: a delete).
// Run's informer calls it; a caller with Options.Cache calls it itself.
func (c *Coordinator) Observe(l *coordinationv1.Lease, gone bool) {
	if l.Labels[LabelRole] == RolePeer {
		if gone {
			c.peers.deleted(l)
		} else {
			c.peers.observe(l)
		}
	}
	c.Kick()
}

// Kick asks for a reconcile soon: a lease, a registration or a member's
// sync changed.
func (c *Coordinator) Kick() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Identity is this replica's identity, the holder of its fences.
func (c *Coordinator) Identity() string { return c.opts.Identity }

// HasSynced reports whether the Lease cache has synced.
func (c *Coordinator) HasSynced() bool { return c.informer == nil || c.informer.HasSynced() }

// Run renews the peer Lease and reconciles fences until ctx ends. It does
// not free what it holds: Drain does, before.
func (c *Coordinator) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	go c.informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced) {
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { c.renewLoop(ctx) })
	defer wg.Wait()
	t := time.NewTicker(c.opts.RetryPeriod)
	defer t.Stop()
	// Also reconcile the moment a peer would count dead: its members are
	// reassigned and taken then, not up to a retry period later.
	death := time.NewTimer(time.Hour)
	defer death.Stop()
	for {
		c.Reconcile(ctx)
		if next, ok := c.peers.nextDeath(); ok {
			death.Reset(next.Sub(c.opts.Now()) + 10*time.Millisecond)
		} else {
			death.Reset(time.Hour)
		}
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		case <-t.C:
		case <-death.C:
		}
	}
}

// String describes the coordinator for logs.
func (c *Coordinator) String() string { return fmt.Sprintf("shard coordinator %s", c.opts.Identity) }
