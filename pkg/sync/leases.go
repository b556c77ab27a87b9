package sync

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

const (
	// MemberLeasePrefix names a member's liveness Lease: prefix + cluster.
	MemberLeasePrefix = "endpoint-aggregator-member-"
	// LabelLeaseCluster marks a member liveness Lease with its cluster.
	LabelLeaseCluster = "endpoint-aggregator.io/member-cluster"
	leaseHolder       = "endpoint-aggregator"
	resourceLease     = "leases"
)

// runMemberLeases publishes one Lease per member in the daemon's namespace,
// renewed every quarter of its duration (the renewals spread evenly over
// that time) while the member is synced and
// answers its health probe, so anyone can tell a live member from a dead one
// with `kubectl get leases`. Leases of unregistered members are deleted,
// among them those found by a List of our Leases at the start (retried each
// period until it succeeds).
func (c *Controller) runMemberLeases(ctx context.Context) {
	if c.opts.LeaseNamespace == "" || c.opts.LeaseDuration <= 0 {
		return
	}
	known := map[string]*coordinationv1.Lease{}
	listed := false
	period := c.opts.LeaseDuration / 4
	wait.NonSlidingUntilWithContext(ctx, func(ctx context.Context) {
		if !listed {
			listed = c.listMemberLeases(ctx, known)
		}
		registered := map[string]bool{}
		names := c.members.Names()
		// Spread the renewals over most of the period: a burst of one
		// write per member at once would stall the syncs' hub writes.
		pace := time.NewTicker(max(time.Millisecond, period*4/5/time.Duration(max(1, len(names)))))
		defer pace.Stop()
		for i, name := range names {
			registered[name] = true
			if i > 0 {
				select {
				case <-ctx.Done():
					return
				case <-pace.C:
				}
			}
			if st, _ := c.members.Lookup(name); st.Phase != lifecycle.Synced || st.Unreachable || !st.Owned {
				continue // not renewed here: by its owner, or it expires on its own
			}
			if l, err := c.renewLease(ctx, name, known[name]); err != nil {
				klog.V(2).InfoS("Renewing member Lease failed", "cluster", name, "err", err)
				delete(known, name)
			} else {
				known[name] = l
			}
		}
		if merging, _ := c.owns(Key{}, lifecycle.State{}); !merging {
			return // the merging replica deletes the Leases of unregistered members
		}
		for name, l := range known {
			if registered[name] {
				continue
			}
			err := c.hub.CoordinationV1().Leases(l.Namespace).Delete(ctx, l.Name, metav1.DeleteOptions{})
			c.write.countWrite(resourceLease, verbDelete, err)
			if err == nil || apierrors.IsNotFound(err) {
				delete(known, name)
			}
		}
	}, period)
}

// listMemberLeases adds to known the member Leases in the hub, among them
// those left behind by members unregistered while the daemon was down, so
// that they are deleted. It reports whether the List succeeded: until it
// does, runMemberLeases calls it again in each period, after which the
// renewals of that period go on as usual. A Lease already in known (one we
// wrote since) is newer than the listed one and is kept.
func (c *Controller) listMemberLeases(ctx context.Context, known map[string]*coordinationv1.Lease) bool {
	list, err := c.hub.CoordinationV1().Leases(c.opts.LeaseNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{endpoints.LabelManagedBy: endpoints.ManagedByValue}.String(),
	})
	if err != nil {
		klog.ErrorS(err, "Listing member Leases failed; retrying next renewal period (Leases of unregistered members stay until then)",
			"namespace", c.opts.LeaseNamespace)
		return false
	}
	for i := range list.Items {
		l := &list.Items[i]
		name := l.Labels[LabelLeaseCluster]
		if _, ok := known[name]; name != "" && !ok {
			known[name] = l
		}
	}
	return true
}

// renewLease creates or renews a member's Lease; last is what we last wrote
// (nil when unknown).
func (c *Controller) renewLease(ctx context.Context, cluster string, last *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	api := c.hub.CoordinationV1().Leases(c.opts.LeaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	if last == nil {
		got, err := api.Get(ctx, MemberLeasePrefix+cluster, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			l := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: c.opts.LeaseNamespace,
					Name:      MemberLeasePrefix + cluster,
					Labels:    map[string]string{endpoints.LabelManagedBy: endpoints.ManagedByValue, LabelLeaseCluster: cluster},
				},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity:       ptr.To(leaseHolder),
					LeaseDurationSeconds: ptr.To(int32(c.opts.LeaseDuration / time.Second)),
					AcquireTime:          &now,
					RenewTime:            &now,
				},
			}
			out, err := api.Create(ctx, l, metav1.CreateOptions{FieldManager: fieldManager})
			c.write.countWrite(resourceLease, verbCreate, err)
			return out, err
		case err != nil:
			return nil, err
		}
		last = got
	}
	l := last.DeepCopy()
	l.Spec.HolderIdentity = ptr.To(leaseHolder)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(c.opts.LeaseDuration / time.Second))
	l.Spec.RenewTime = &now
	out, err := api.Update(ctx, l, metav1.UpdateOptions{FieldManager: fieldManager})
	c.write.countWrite(resourceLease, verbUpdate, err)
	return out, err
}
