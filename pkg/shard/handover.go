package shard

import (
	"context"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

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
		if !refused(err) {
			c.mu.Lock()
			c.unsure[f.cluster] = true
			c.mu.Unlock()
		}
		return
	}
	c.mu.Lock()
	delete(c.unsure, f.cluster)
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
		if !c.stillFrees(fenceOf(l)) {
			klog.V(2).InfoS("Kept a member's fence: it was assigned anew during the handover", "cluster", cluster, "to", l.Annotations[AnnotationAssignedTo])
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
	delete(c.unsure, cluster)
	c.mu.Unlock()
}

// stillFrees reports whether a release decided earlier still holds for the
// fence as the API server shows it now: this replica gives up or no longer
// has the member registered, or the member's assignee, another replica,
// said it is ready. The leader may have assigned the member anew since.
func (c *Coordinator) stillFrees(f fence) bool {
	c.mu.Lock()
	giveUp := c.giveUp
	c.mu.Unlock()
	if giveUp || !slices.Contains(c.members.Names(), f.cluster) {
		return true
	}
	return f.assignedTo != c.opts.Identity && f.assignedTo != "" && f.ready == f.assignedTo
}

// refused: the API server answered a write and did not apply it.
func refused(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) ||
		apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err)
}

// resolveUnsure reads each fence whose take got no answer: one the API
// server shows held by another, or by nobody, or gone, is not held here.
// One it shows held here stays unsure until the cache shows it too, and
// decide confirms it.
func (c *Coordinator) resolveUnsure(ctx context.Context) {
	c.mu.Lock()
	names := make([]string, 0, len(c.unsure))
	for n := range c.unsure {
		names = append(names, n)
	}
	c.mu.Unlock()
	for _, n := range names {
		l, err := c.hub.CoordinationV1().Leases(c.opts.Namespace).Get(ctx, FenceName(n), metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			continue // asked again next time
		}
		if err == nil && fenceOf(l).holder == c.opts.Identity {
			continue
		}
		c.mu.Lock()
		delete(c.unsure, n)
		c.mu.Unlock()
	}
}
