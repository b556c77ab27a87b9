package app

import (
	"context"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
)

const testLease = "endpoint-aggregator"

// heldLease is the Lease as holder writes it now; the fake API server does
// not bump resourceVersions, rv stands in.
func heldLease(holder string, seconds int32, rv int) *coordinationv1.Lease {
	now := metav1.NewMicroTime(time.Now())
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: defaultNamespace, Name: testLease, ResourceVersion: strconv.Itoa(rv)},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(seconds),
			AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To[int32](3),
		},
	}
}

// startCandidate runs a candidate named "me" on a fake hub holding objs; it
// reports on the returned channel when it took the Lease.
func startCandidate(t *testing.T, hub *fake.Clientset, leaseDuration, retryPeriod time.Duration) <-chan time.Time {
	return startCandidateWarm(t, hub, leaseDuration, retryPeriod, func() bool { return true })
}

// startCandidateWarm is startCandidate whose caches are warm when warm says so.
func startCandidateWarm(t *testing.T, hub *fake.Clientset, leaseDuration, retryPeriod time.Duration, warm func() bool) <-chan time.Time {
	t.Helper()
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, defaultNamespace, testLease,
		hub.CoreV1(), hub.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: "me"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := newCandidate(lock, leaseDuration, retryPeriod)
	synced := c.watch(ctx, hub, defaultNamespace, testLease)
	for !synced() {
		time.Sleep(10 * time.Millisecond)
	}
	won := make(chan time.Time, 1)
	go func() {
		if c.run(ctx, warm) {
			won <- time.Now()
		}
	}()
	return won
}

func liveLease(t *testing.T, hub *fake.Clientset) *coordinationv1.Lease {
	t.Helper()
	l, err := hub.CoordinationV1().Leases(defaultNamespace).Get(context.Background(), testLease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestCandidateTakesAReleasedLeaseAtOnceNotAtItsNextPoll(t *testing.T) {
	hub := fake.NewClientset(heldLease("other", 60, 1))
	won := startCandidate(t, hub, 60*time.Second, 30*time.Second)
	select {
	case <-won:
		t.Fatal("took a Lease another replica holds")
	case <-time.After(300 * time.Millisecond):
	}
	released := heldLease("", 1, 2) // what ReleaseOnCancel writes
	released.Spec.HolderIdentity = nil
	t0 := time.Now()
	if _, err := hub.CoordinationV1().Leases(defaultNamespace).Update(context.Background(), released, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-won:
		t.Logf("took the released Lease after %s", at.Sub(t0))
	case <-time.After(5 * time.Second):
		t.Fatal("did not take the released Lease within 5s (retry period 30s)")
	}
	l := liveLease(t, hub)
	if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "me" {
		t.Errorf("holder %q, want me", h)
	}
	if n := ptr.Deref(l.Spec.LeaseTransitions, 0); n != 4 {
		t.Errorf("leaseTransitions %d, want 4", n)
	}
}

func TestCandidateTakesADeletedLeaseAtOnce(t *testing.T) {
	hub := fake.NewClientset(heldLease("other", 60, 1))
	won := startCandidate(t, hub, 60*time.Second, 30*time.Second)
	if err := hub.CoordinationV1().Leases(defaultNamespace).Delete(context.Background(), testLease, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-won:
	case <-time.After(5 * time.Second):
		t.Fatal("did not create the deleted Lease within 5s (retry period 30s)")
	}
	if h := ptr.Deref(liveLease(t, hub).Spec.HolderIdentity, ""); h != "me" {
		t.Errorf("holder %q, want me", h)
	}
}

// A holder that stops renewing keeps the Lease for the duration it wrote in
// it (not the candidate's own) after its last renewal the candidate saw,
// and not a poll longer.
func TestCandidateTakesAnUnrenewedLeaseWhenItExpires(t *testing.T) {
	const leaseDuration = 2 * time.Second
	hub := fake.NewClientset(heldLease("other", 2, 1))
	won := startCandidate(t, hub, 30*time.Second, 30*time.Second)
	var last time.Time
	for i := 0; i < 8; i++ { // the holder renews for 2.4s, longer than a lease
		time.Sleep(300 * time.Millisecond)
		if _, err := hub.CoordinationV1().Leases(defaultNamespace).Update(context.Background(), heldLease("other", 2, i+2), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		last = time.Now()
	}
	select {
	case <-won:
		t.Fatal("took a Lease its holder renews")
	default:
	}
	select {
	case at := <-won:
		d := at.Sub(last)
		t.Logf("took the Lease %s after its last renewal (lease duration %s)", d, leaseDuration)
		if d < leaseDuration || d > leaseDuration+time.Second {
			t.Errorf("took the Lease %s after its last renewal, want just after the lease duration %s", d, leaseDuration)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not take the expired Lease")
	}
}

// A replica whose caches still sync takes only a Lease that nobody took for
// a retry period: a warm standby would have.
func TestCandidateStillSyncingTakesOnlyALeaseFreeForARetryPeriod(t *testing.T) {
	const retryPeriod = time.Second
	hub := fake.NewClientset(heldLease("other", 60, 1))
	t0 := time.Now()
	won := startCandidateWarm(t, hub, 60*time.Second, retryPeriod, func() bool { return false })
	released := heldLease("", 1, 2)
	released.Spec.HolderIdentity = nil
	if _, err := hub.CoordinationV1().Leases(defaultNamespace).Update(context.Background(), released, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	select {
	case at := <-won:
		if d := at.Sub(freed); d < retryPeriod || d > retryPeriod+time.Second {
			t.Errorf("took the released Lease %s after its release, want just after the retry period %s", d, retryPeriod)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("did not take a Lease free for %s", time.Since(t0))
	}
}
