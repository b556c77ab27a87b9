package shard

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
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
	// deadline is until when this replica may write: its last peer Lease
	// renewal that succeeded, as sent, plus the renew budget. epoch
	// counts the renewals that came after the deadline had passed.
	deadline time.Time
	epoch    int
	// held are the fences this replica holds, with the epoch in which
	// it last wrote them; releasing those it is handing over.
	held      map[string]int
	releasing map[string]bool
	wanted    map[string]bool
	draining  bool
	giveUp    bool
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
		held:      map[string]int{},
		releasing: map[string]bool{},
		wanted:    map[string]bool{},
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

// Wants reports whether this replica should run a connection to a member:
// it is assigned here, or held here.
func (c *Coordinator) Wants(cluster string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wanted[cluster]
}

// Owns reports whether this replica may write a member's hub objects now,
// and until when.
func (c *Coordinator) Owns(cluster string) (bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.held[cluster]
	if !ok || e != c.epoch || c.releasing[cluster] || !c.opts.Now().Before(c.deadline) {
		return false, time.Time{}
	}
	return true, c.deadline
}

// Free reports whether nobody may write a member's objects: it has no
// fence, or its fence is free, or its holder is dead as the API server
// itself showed (deadAtSource), not only as a watch that may lag shows.
// The leader withdraws the objects of an unregistered member only then.
func (c *Coordinator) Free(cluster string) bool {
	l := c.fenceLease(cluster)
	if l == nil {
		return true
	}
	f := fenceOf(l)
	return f.holder == "" || (f.holder != c.opts.Identity && c.peers.confirmedDead(f.holder))
}

// Owner returns the holder of a member's fence, "" when none.
func (c *Coordinator) Owner(cluster string) string {
	if l := c.fenceLease(cluster); l != nil {
		return fenceOf(l).holder
	}
	return ""
}

// fenceLease is a member's fence as the cache shows it, or as this replica
// wrote it while the cache does not show that write yet: deciding from a
// cache behind our own write would undo it. Nil: none.
func (c *Coordinator) fenceLease(cluster string) *coordinationv1.Lease {
	cached, err := c.leases.Get(FenceName(cluster))
	if err != nil {
		cached = nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.wrote[cluster]
	switch {
	case !ok:
		return cached
	case cached == nil && w.prev == "", cached != nil && cached.ResourceVersion == w.prev:
		return w.obj // not seen yet
	}
	delete(c.wrote, cluster) // seen, or overtaken by another write
	return cached
}

// writeFence creates or updates a fence, conditionally on its
// resourceVersion, and remembers what it wrote.
func (c *Coordinator) writeFence(ctx context.Context, cluster string, l *coordinationv1.Lease) error {
	api := c.hub.CoordinationV1().Leases(c.opts.Namespace)
	prev := l.ResourceVersion
	var out *coordinationv1.Lease
	var err error
	if prev == "" {
		out, err = api.Create(ctx, l, metav1.CreateOptions{})
	} else {
		out, err = api.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err == nil {
		c.mu.Lock()
		c.wrote[cluster] = wroteFence{prev: prev, obj: out}
		c.mu.Unlock()
	}
	return err
}

// Deadline is until when this replica may write, as its peer Lease says.
func (c *Coordinator) Deadline() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline
}

// HasSynced reports whether the Lease cache has synced.
func (c *Coordinator) HasSynced() bool { return c.informer == nil || c.informer.HasSynced() }

// Settled reports whether this replica knows its share: a reconcile found
// every registered member assigned to a live replica, and asked the
// registry to connect those assigned here; or SettleTimeout passed since
// the first reconcile (a member whose fence cannot be written must not
// keep every replica unready).
func (c *Coordinator) Settled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.firstReconcile.IsZero() {
		return false
	}
	return c.assigned || c.opts.Now().Sub(c.firstReconcile) >= c.opts.SettleTimeout
}

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

// Drain hands over every fence this replica holds: it marks its peer Lease
// draining, so that the leader assigns its members elsewhere, and frees each
// fence once its assignee is warm. When ctx is about to end it frees what
// is left regardless. Run must still run. It returns once nothing is held.
func (c *Coordinator) Drain(ctx context.Context) {
	c.BeginDrain(ctx)
	giveUp := time.Duration(0)
	if d, ok := ctx.Deadline(); ok {
		giveUp = time.Until(d) / 2
	}
	timer := time.NewTimer(giveUp)
	defer timer.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		c.mu.Lock()
		n := len(c.held)
		c.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			klog.InfoS("Handing over the rest of this replica's members before the shutdown timeout", "held", n)
			c.GiveUp()
		case <-tick.C:
			c.giveUpWhenAlone()
		}
	}
	c.Leave(ctx)
}

// BeginDrain marks this replica draining, on its peer Lease too: the leader
// assigns it nothing more and moves its members elsewhere.
func (c *Coordinator) BeginDrain(ctx context.Context) {
	c.mu.Lock()
	c.draining = true
	c.mu.Unlock()
	c.Renew(ctx)
	c.Kick()
}

// GiveUp frees what a draining replica holds at once, even to assignees
// that have not synced: its shutdown timeout is near.
func (c *Coordinator) GiveUp() {
	c.mu.Lock()
	c.giveUp = true
	c.mu.Unlock()
	c.Kick()
}

// Holding is how many fences this replica holds.
func (c *Coordinator) Holding() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.held)
}

// giveUpWhenAlone gives up when no other replica is alive to hand over to:
// what is held is freed now, for the replicas that come next.
func (c *Coordinator) giveUpWhenAlone() {
	if others := slices.DeleteFunc(c.peers.live(), func(id string) bool { return id == c.opts.Identity }); len(others) > 0 {
		return
	}
	c.mu.Lock()
	alone := !c.giveUp
	c.mu.Unlock()
	if alone {
		klog.InfoS("No other replica to hand this replica's members to; freeing their fences")
		c.GiveUp()
	}
}

// Leave deletes this replica's peer Lease once it holds nothing, so that
// peers stop counting on it.
func (c *Coordinator) Leave(ctx context.Context) {
	c.mu.Lock()
	l := c.peerLease
	c.mu.Unlock()
	if l != nil {
		err := c.hub.CoordinationV1().Leases(l.Namespace).Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &l.ResourceVersion}})
		if err != nil && !apierrors.IsNotFound(err) {
			klog.InfoS("Could not delete this replica's peer Lease; it expires on its own", "lease", l.Name, "err", err)
		}
	}
}

// RenewBudget is how long after sending its last successful renewal of a
// Lease a replica may still write: the renew deadline, cut by as much as
// peers lose when the lease duration is written in whole seconds, so that
// the margin LeaseDuration - RenewDeadline stays. A lease under a second
// is written as 0 seconds, and no budget protects anything: then the renew
// deadline.
func RenewBudget(leaseDuration, renewDeadline time.Duration) time.Duration {
	budget := renewDeadline - (leaseDuration - leaseDuration.Truncate(time.Second))
	if budget <= 0 {
		return renewDeadline
	}
	return budget
}

func (c *Coordinator) renewLoop(ctx context.Context) {
	t := time.NewTicker(c.opts.RetryPeriod)
	defer t.Stop()
	for {
		c.Renew(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Renew writes the peer Lease once, and moves the deadline on success. A
// success that comes after the deadline passed starts a new epoch: fences
// held before must be confirmed before they are written under again.
func (c *Coordinator) Renew(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, c.opts.RenewDeadline)
	defer cancel()
	sent := c.opts.Now()
	c.mu.Lock()
	last, draining := c.peerLease, c.draining
	c.mu.Unlock()
	l, err := c.writePeerLease(rctx, last, draining, sent)
	if err != nil {
		c.mu.Lock()
		c.peerLease = nil // read it again next time
		c.mu.Unlock()
		klog.V(2).InfoS("Renewing the peer Lease failed", "err", err)
		return
	}
	c.mu.Lock()
	lapsed := !c.opts.Now().Before(c.deadline)
	if lapsed {
		c.epoch++
	}
	if d := sent.Add(RenewBudget(c.opts.LeaseDuration, c.opts.RenewDeadline)); d.After(c.deadline) {
		c.deadline = d
	}
	c.peerLease = l
	stale := lapsed && len(c.held) > 0
	c.mu.Unlock()
	if stale {
		klog.InfoS("Peer Lease renewed after this replica's deadline; confirming its fences before writing again")
		c.Kick()
	}
}

func (c *Coordinator) writePeerLease(ctx context.Context, last *coordinationv1.Lease, draining bool, now time.Time) (*coordinationv1.Lease, error) {
	api := c.hub.CoordinationV1().Leases(c.opts.Namespace)
	name := PeerName(c.opts.Identity)
	if last == nil {
		got, err := api.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return api.Create(ctx, c.peerLeaseFor(&coordinationv1.Lease{}, name, draining, now), metav1.CreateOptions{})
		case err != nil:
			return nil, err
		}
		last = got
	}
	return api.Update(ctx, c.peerLeaseFor(last.DeepCopy(), name, draining, now), metav1.UpdateOptions{})
}

func (c *Coordinator) peerLeaseFor(l *coordinationv1.Lease, name string, draining bool, now time.Time) *coordinationv1.Lease {
	l.Name, l.Namespace = name, c.opts.Namespace
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[LabelRole] = RolePeer
	if draining {
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[AnnotationDraining] = "true"
	}
	t := metav1.NewMicroTime(now)
	l.Spec.HolderIdentity = ptr.To(c.opts.Identity)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(c.opts.LeaseDuration / time.Second))
	if l.Spec.AcquireTime == nil {
		l.Spec.AcquireTime = &t
	}
	l.Spec.RenewTime = &t
	return l
}

// Reconcile decides about every fence once, and on the leader assigns.
// Run calls it on every Lease change and retry period.
func (c *Coordinator) Reconcile(ctx context.Context) {
	c.mu.Lock()
	c.dead = map[string]bool{}
	c.mu.Unlock()
	// Registrations read before the registry read its Secrets may miss
	// some: every member assigned among them says nothing of the others.
	complete := c.members.SecretsSynced()
	names := c.members.Names()
	registered := make(map[string]bool, len(names))
	for _, n := range names {
		registered[n] = true
	}
	fences := map[string]fence{}
	seen := map[string]bool{}
	if all, err := c.leases.List(labels.SelectorFromSet(labels.Set{LabelRole: RoleFence})); err == nil {
		for _, l := range all {
			seen[l.Labels[LabelFenceCluster]] = true
		}
	}
	c.mu.Lock()
	for n := range c.wrote {
		seen[n] = true
	}
	c.mu.Unlock()
	for n := range seen {
		if l := c.fenceLease(n); l != nil && n != "" {
			fences[n] = fenceOf(l)
		}
	}
	if c.opts.Leading != nil && c.opts.Leading() {
		c.assign(ctx, names, fences)
	}
	clusters := map[string]bool{}
	for n := range registered {
		clusters[n] = true
	}
	for n := range fences {
		clusters[n] = true
	}
	c.mu.Lock()
	for n := range c.held {
		clusters[n] = true
	}
	c.mu.Unlock()
	type step struct {
		act action
		f   fence
	}
	steps := make([]step, 0, len(clusters))
	for cluster := range clusters {
		f, ok := fences[cluster]
		if !ok {
			f = fence{cluster: cluster}
		}
		c.mu.Lock()
		e, held := c.held[cluster]
		v := view{
			me: c.opts.Identity, registered: registered[cluster],
			held: held && e == c.epoch, stale: held && e != c.epoch,
			draining: c.draining, giveUp: c.giveUp, alive: c.alive,
		}
		releasing := c.releasing[cluster]
		c.mu.Unlock()
		v.warm = v.registered && c.members.Warm(cluster)
		c.note(cluster, f, v)
		act := decide(v, f)
		if releasing {
			act = none // in hand: free decides
		}
		if act == none && !ok && held && !releasing {
			act = forget // the fence was deleted
		}
		steps = append(steps, step{act, f})
	}
	// The fences' writes are independent, each conditional on the fence
	// as read: they go in parallel, so that taking over a dead replica's
	// hundreds of members is not hundreds of round trips in a row. Whether
	// a holder is dead is read once per holder, first.
	for _, st := range steps {
		if st.act == acquire && st.f.holder != "" {
			c.deadAtSource(ctx, st.f.holder)
		}
	}
	workqueue.ParallelizeUntil(ctx, fenceWriters, len(steps), func(i int) { c.do(ctx, steps[i].act, steps[i].f) })
	var changed []string
	for _, st := range steps {
		cluster, f := st.f.cluster, st.f
		want := registered[cluster] && (f.assignedTo == c.opts.Identity || f.holder == c.opts.Identity)
		c.mu.Lock()
		if _, h := c.held[cluster]; h {
			want = registered[cluster]
		}
		if c.wanted[cluster] != want {
			if want {
				c.wanted[cluster] = true
			} else {
				delete(c.wanted, cluster)
			}
			changed = append(changed, cluster)
		}
		c.mu.Unlock()
	}
	c.mu.Lock()
	for cluster := range c.unownedSince {
		if !clusters[cluster] {
			delete(c.unownedSince, cluster)
		}
	}
	c.mu.Unlock()
	for _, cluster := range changed {
		c.members.Reconsider(cluster)
	}
	assigned := complete
	for n := range registered {
		f, ok := fences[n]
		if !ok || f.assignedTo == "" || (f.assignedTo != c.opts.Identity && !c.alive(f.assignedTo)) {
			assigned = false
			break
		}
	}
	c.mu.Lock()
	if c.firstReconcile.IsZero() {
		c.firstReconcile = c.opts.Now()
	}
	c.assigned = assigned
	c.mu.Unlock()
}

// note keeps the times the metrics report: since when a member is assigned
// here and not held, and, on the leader, since when it has no live holder.
func (c *Coordinator) note(cluster string, f fence, v view) {
	now := c.opts.Now()
	leading := c.opts.Leading != nil && c.opts.Leading()
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.assignedTo == v.me && f.holder != v.me {
		if _, ok := c.assignedAt[cluster]; !ok {
			c.assignedAt[cluster] = now
		}
	} else if f.holder != v.me {
		delete(c.assignedAt, cluster)
	}
	if leading && v.registered && (f.holder == "" || !v.alive(f.holder)) {
		if _, ok := c.unownedSince[cluster]; !ok {
			c.unownedSince[cluster] = now
		}
	} else {
		delete(c.unownedSince, cluster)
	}
}

// alive is peers.alive, with this replica alive while its deadline holds.
func (c *Coordinator) alive(id string) bool {
	if id == c.opts.Identity {
		return true
	}
	return c.peers.alive(id)
}

// do carries out one action.
func (c *Coordinator) do(ctx context.Context, act action, f fence) {
	switch act {
	case none:
	case forget:
		c.mu.Lock()
		delete(c.held, f.cluster)
		delete(c.releasing, f.cluster)
		c.mu.Unlock()
		klog.InfoS("Lost a member's fence to another replica; no longer writing it", "cluster", f.cluster, "holder", f.holder)
		c.syncer.OwnershipChanged(f.cluster)
	case acquire:
		if f.holder != "" && !c.deadAtSource(ctx, f.holder) {
			return
		}
		c.take(ctx, f, "Took a member's fence", "previous", f.holder)
	case confirm:
		c.take(ctx, f, "Confirmed a member's fence after a lapse")
	case signalReady:
		l := f.lease.DeepCopy()
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[AnnotationReady] = c.opts.Identity
		if err := c.writeFence(ctx, f.cluster, l); err != nil {
			klog.V(2).InfoS("Could not mark a fence ready", "cluster", f.cluster, "err", err)
		}
	case release:
		c.mu.Lock()
		c.releasing[f.cluster] = true
		c.mu.Unlock()
		c.syncer.OwnershipChanged(f.cluster)
		c.opts.Go(func() { c.free(ctx, f.cluster) })
	}
}

// take writes this replica as the holder of fence f, conditionally on the
// fence being as cached.
func (c *Coordinator) take(ctx context.Context, f fence, msg string, kv ...interface{}) {
	c.mu.Lock()
	epoch := c.epoch
	ok := c.opts.Now().Before(c.deadline)
	c.mu.Unlock()
	if !ok {
		return // our own peer Lease is not renewed: no fence would hold
	}
	l := f.lease.DeepCopy()
	now := metav1.NewMicroTime(c.opts.Now())
	l.Spec.HolderIdentity = ptr.To(c.opts.Identity)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(c.opts.LeaseDuration / time.Second))
	if f.holder != c.opts.Identity {
		l.Spec.AcquireTime = &now
		l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
		// The readiness said to the previous holder is spent: left, it
		// would free this fence at once to an assignee that is ready no
		// more.
		delete(l.Annotations, AnnotationReady)
	}
	l.Spec.RenewTime = &now
	if err := c.writeFence(ctx, f.cluster, l); err != nil {
		klog.V(2).InfoS("Could not take a member's fence", "cluster", f.cluster, "err", err)
		return
	}
	c.mu.Lock()
	c.held[f.cluster] = epoch
	assigned, ok := c.assignedAt[f.cluster]
	delete(c.assignedAt, f.cluster)
	c.mu.Unlock()
	if f.holder != c.opts.Identity {
		kind := kindTakeover
		switch {
		case f.holder == "" && ptr.Deref(f.lease.Spec.LeaseTransitions, 0) == 0:
			kind = kindInitial
		case f.holder == "":
			kind = kindGraceful
		}
		c.metrics.handovers.WithLabelValues(kind).Inc()
		if ok {
			c.metrics.duration.WithLabelValues(kind).Observe(c.opts.Now().Sub(assigned).Seconds())
		}
	}
	klog.InfoS(msg, append([]interface{}{"cluster", f.cluster}, kv...)...)
	c.syncer.OwnershipChanged(f.cluster)
}

// deadAtSource reads the holder's peer Lease from the API server itself: a
// lagging watch must not let this replica take a fence from a live one. The
// holder is dead when its Lease is gone or holds what was seen a lease
// duration ago.
func (c *Coordinator) deadAtSource(ctx context.Context, holder string) bool {
	c.mu.Lock()
	dead, ok := c.dead[holder]
	c.mu.Unlock()
	if ok {
		return dead
	}
	l, err := c.hub.CoordinationV1().Leases(c.opts.Namespace).Get(ctx, PeerName(holder), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		// Someone deleted it; its replica may still write until its
		// deadline, and renews it again soon: absent is one more state
		// of the Lease, dead only once it stays so a lease duration.
		c.peers.absent(holder)
	case err != nil:
		return false // asked again next time
	default:
		c.peers.observe(l)
	}
	dead = c.peers.confirm(holder)
	c.mu.Lock()
	c.dead[holder] = dead
	c.mu.Unlock()
	return dead
}

// free waits for the member's syncs in flight, then frees its fence.
func (c *Coordinator) free(ctx context.Context, cluster string) {
	defer func() {
		c.mu.Lock()
		delete(c.releasing, cluster)
		c.mu.Unlock()
		c.syncer.OwnershipChanged(cluster)
		c.Kick()
	}()
	// Syncs in flight write until their deadline at most.
	for c.syncer.Busy(cluster) && ctx.Err() == nil {
		c.opts.Sleep(10 * time.Millisecond)
	}
	for range 3 {
		l, err := c.hub.CoordinationV1().Leases(c.opts.Namespace).Get(ctx, FenceName(cluster), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			c.dropHeld(cluster)
			return
		}
		if err != nil {
			klog.V(2).InfoS("Could not read a fence to free it", "cluster", cluster, "err", err)
			return
		}
		if f := fenceOf(l); f.holder != c.opts.Identity {
			c.dropHeld(cluster)
			return
		}
		l.Spec.HolderIdentity = ptr.To("")
		err = c.writeFence(ctx, cluster, l)
		if err == nil {
			c.dropHeld(cluster)
			if to := l.Annotations[AnnotationAssignedTo]; to != c.opts.Identity {
				klog.InfoS("Handed over a member's fence", "cluster", cluster, "to", to)
			} else {
				klog.InfoS("Freed a member's fence", "cluster", cluster)
			}
			return
		}
		if !apierrors.IsConflict(err) {
			klog.V(2).InfoS("Could not free a fence", "cluster", cluster, "err", err)
			return
		}
	}
}

func (c *Coordinator) dropHeld(cluster string) {
	c.mu.Lock()
	delete(c.held, cluster)
	c.mu.Unlock()
}

// assign, on the leader, gives each registered member to a live replica
// and writes the choice on its fence; it deletes the fences of unregistered
// members nobody holds, and the peer Leases of replicas long dead.
func (c *Coordinator) assign(ctx context.Context, names []string, fences map[string]fence) {
	live := c.peers.live()
	c.mu.Lock()
	meLive := !c.draining && c.opts.Now().Before(c.deadline)
	c.mu.Unlock()
	if meLive && !slices.Contains(live, c.opts.Identity) {
		live = append(live, c.opts.Identity)
	}
	if len(live) == 0 {
		return // nobody to assign to: keep what is written
	}
	want := Assign(Weigh(names, c.syncer.Weight), live, c.opts.Bound)
	api := c.hub.CoordinationV1().Leases(c.opts.Namespace)
	workqueue.ParallelizeUntil(ctx, fenceWriters, len(names), func(i int) {
		n := names[i]
		f, ok := fences[n]
		switch {
		case !ok:
			l := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{
					Name: FenceName(n), Namespace: c.opts.Namespace,
					Labels:      map[string]string{LabelRole: RoleFence, LabelFenceCluster: n},
					Annotations: map[string]string{AnnotationAssignedTo: want[n]},
				},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(""), LeaseDurationSeconds: ptr.To(int32(c.opts.LeaseDuration / time.Second))},
			}
			if err := c.writeFence(ctx, n, l); err != nil && !apierrors.IsAlreadyExists(err) {
				klog.V(2).InfoS("Could not create a member's fence", "cluster", n, "err", err)
			}
		case f.assignedTo != want[n]:
			l := f.lease.DeepCopy()
			if l.Annotations == nil {
				l.Annotations = map[string]string{}
			}
			l.Annotations[AnnotationAssignedTo] = want[n]
			// Readiness is said for one assignment: a new one starts
			// unready, or an old ready would free the fence to an
			// assignee that has not synced.
			delete(l.Annotations, AnnotationReady)
			if err := c.writeFence(ctx, n, l); err != nil {
				klog.V(2).InfoS("Could not assign a member", "cluster", n, "err", err)
			} else {
				klog.InfoS("Assigned a member", "cluster", n, "to", want[n], "from", f.assignedTo)
			}
		}
	})
	registered := map[string]bool{}
	for _, n := range names {
		registered[n] = true
	}
	for n, f := range fences {
		if registered[n] || (f.holder != "" && (f.holder == c.opts.Identity || c.alive(f.holder) || !c.deadAtSource(ctx, f.holder))) {
			continue
		}
		rv := f.lease.ResourceVersion
		err := api.Delete(ctx, f.lease.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		if err != nil && !apierrors.IsNotFound(err) {
			klog.V(2).InfoS("Could not delete the fence of an unregistered member", "cluster", n, "err", err)
			continue
		}
		c.mu.Lock()
		delete(c.wrote, n)
		c.mu.Unlock()
		c.syncer.OwnershipChanged(n)
	}
	for _, l := range c.peers.forgetDead(4 * c.opts.LeaseDuration) {
		// Only as last seen: a Lease renewed since, that this replica's
		// watch does not show yet, is a live replica's.
		err := api.Delete(ctx, l.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &l.resourceVersion}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			klog.V(2).InfoS("Could not delete a dead replica's peer Lease", "lease", l.name, "err", err)
		}
	}
}

// String describes the coordinator for logs.
func (c *Coordinator) String() string { return fmt.Sprintf("shard coordinator %s", c.opts.Identity) }
