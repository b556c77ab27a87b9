package shard

import (
	"context"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// assign, on the leader, gives each registered member to a live replica
// and writes the choice on its fence; it deletes the fences of unregistered
// members nobody holds, and the peer Leases of replicas long dead.
func (c *Coordinator) assign(ctx context.Context, names []string, fences map[string]fence) {
	live := c.peers.live()
	c.mu.Lock()
	meLive := !c.draining && c.opts.Now().Before(c.deadline)
	unrenewed := !c.draining && c.deadline.IsZero()
	c.mu.Unlock()
	if unrenewed {
		// Its own peer Lease is not written yet: assigning now would leave
		// this replica out, and move a share of the members to it a moment
		// later, each a handover. Renew kicks a Reconcile when it is.
		return
	}
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
