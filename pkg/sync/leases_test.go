package sync

import (
	"context"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

const leaseTestNS = "ea-system"

func memberLease(cluster string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Namespace: leaseTestNS,
		Name:      MemberLeasePrefix + cluster,
		Labels:    map[string]string{endpoints.LabelManagedBy: endpoints.ManagedByValue, LabelLeaseCluster: cluster},
	}}
}

// A member unregistered while the daemon was down left its Lease; the
// daemon's first List of Leases fails. The Lease must still be deleted once
// a later List succeeds, and the registered member's Lease kept renewed
// meanwhile.
func TestMemberLeasesFailedInitialListStillDeletesStaleLease(t *testing.T) {
	f := newFixture(t, Options{LeaseNamespace: leaseTestNS, LeaseDuration: 100 * time.Millisecond},
		[]runtime.Object{memberLease("gone")}, nil)
	f.member("alpha")
	var lists, failures atomic.Int32
	f.hub.PrependReactor("list", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		if lists.Add(1) <= 2 {
			failures.Add(1)
			return true, nil, apierrors.NewServiceUnavailable("hub API server restarting")
		}
		return false, nil, nil
	})

	ctx, cancel := context.WithCancel(f.ctx)
	var wg stdsync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		f.ctrl.runMemberLeases(ctx)
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })

	leases := f.hub.CoordinationV1().Leases(leaseTestNS)
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, errGone := leases.Get(f.ctx, MemberLeasePrefix+"gone", metav1.GetOptions{})
		_, errAlpha := leases.Get(f.ctx, MemberLeasePrefix+"alpha", metav1.GetOptions{})
		if apierrors.IsNotFound(errGone) && errAlpha == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d Lease lists (%d failed): getting the stale Lease: %v (want NotFound); getting alpha's Lease: %v (want none)",
				lists.Load(), failures.Load(), errGone, errAlpha)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if failures.Load() != 2 {
		t.Errorf("%d Lease lists failed, want 2 (the reactor fails the first two)", failures.Load())
	}
}
