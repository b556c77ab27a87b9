package main

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// memberLeaseDuration is the daemon's default --member-lease-duration.
const memberLeaseDuration = 40 * time.Second

// memberLeaseQPS and memberLeaseBurst are the daemon's default
// --member-lease-qps and --member-lease-burst: its Leases' own limiter.
const (
	memberLeaseQPS   = 150
	memberLeaseBurst = 300
)

// keepLeases is the floor's share of the member liveness Leases, hub objects
// the daemon must write too: one Lease per member in the floor hub, created,
// then renewed every quarter of memberLeaseDuration with the renewals spread
// over that time, as the daemon does, until ctx ends. Its writes are counted
// apart, as the daemon's are, and go through a client and rate limiter of
// their own, as the daemon's do.
func (fl *floor) keepLeases(ctx context.Context) {
	if err := createNamespace(ctx, fl.hub, daemonNamespace); err != nil {
		logf("floor: leases: %v", err)
		return
	}
	api := fl.leases.CoordinationV1().Leases(daemonNamespace)
	leases := make([]*coordinationv1.Lease, len(fl.f.members))
	period := memberLeaseDuration / 4
	pace := time.NewTicker(period * 4 / 5 / time.Duration(max(1, len(leases))))
	defer pace.Stop()
	for {
		round := time.Now()
		for i, m := range fl.f.members {
			select {
			case <-ctx.Done():
				return
			case <-pace.C:
			}
			now := metav1.NewMicroTime(time.Now())
			var out *coordinationv1.Lease
			var err error
			if leases[i] == nil {
				out, err = api.Create(ctx, &coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Name: easync.MemberLeasePrefix + m},
					Spec: coordinationv1.LeaseSpec{
						HolderIdentity:       ptr.To("endpoint-aggregator-bench-floor"),
						LeaseDurationSeconds: ptr.To(int32(memberLeaseDuration / time.Second)),
						AcquireTime:          &now,
						RenewTime:            &now,
					},
				}, metav1.CreateOptions{})
			} else {
				l := leases[i].DeepCopy()
				l.Spec.RenewTime = &now
				out, err = api.Update(ctx, l, metav1.UpdateOptions{})
			}
			if err != nil {
				// Keep the last copy (the next round retries the update)
				// unless the Lease is gone.
				if apierrors.IsNotFound(err) {
					leases[i] = nil
				}
				if ctx.Err() == nil {
					logf("floor: lease %s: %v", m, err)
				}
				continue
			}
			leases[i] = out
			fl.leaseWrites.Add(1)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(round.Add(period))):
		}
	}
}
