package shard

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

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
	first := c.deadline.IsZero()
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
	switch {
	case stale:
		klog.InfoS("Peer Lease renewed after this replica's deadline; confirming its fences before writing again")
		c.Kick()
	case first:
		c.Kick() // a leader assigns only once its own Lease is written
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
