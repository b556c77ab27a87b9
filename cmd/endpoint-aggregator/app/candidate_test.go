package app

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/shard"
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
	return runCandidate(ctx, c, warm)
}

// runCandidate runs c until ctx ends; it reports on the returned channel
// when c took the Lease.
func runCandidate(ctx context.Context, c *candidate, warm func() bool) <-chan time.Time {
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

// A standby whose watch lags behind (here: it has none) sees renewals only
// in the Get before it takes the Lease. Renewals within one second look the
// same in the record's JSON, which has whole seconds; its exact renewTime
// tells them apart, so the standby waits while the holder renews.
func TestCandidateWhoseWatchLagsDoesNotTakeALeaseItsHolderStillRenews(t *testing.T) {
	base := metav1.NewMicroTime(time.Now().Truncate(time.Second))
	renewedAt := func(rv int, d time.Duration) *coordinationv1.Lease {
		l := heldLease("other", 1, rv)
		at := metav1.NewMicroTime(base.Add(d))
		l.Spec.AcquireTime, l.Spec.RenewTime = &base, &at
		return l
	}
	hub := fake.NewClientset(renewedAt(1, 0))
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, defaultNamespace, testLease,
		hub.CoreV1(), hub.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: "me"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	won := runCandidate(ctx, newCandidate(lock, 30*time.Second, 30*time.Second), func() bool { return true })
	var last time.Time
	for i := 1; i <= 12; i++ { // 2.4s of renewals, in one second of renewTime
		time.Sleep(200 * time.Millisecond)
		select {
		case <-won:
			t.Fatalf("took the Lease its holder renewed %s ago (lease 1s)", time.Since(last))
		default:
		}
		if _, err := hub.CoordinationV1().Leases(defaultNamespace).Update(ctx, renewedAt(i+1, time.Duration(i)*10*time.Millisecond), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		last = time.Now()
	}
	select {
	case at := <-won:
		// Seen at the latest a lease after the last renewal, then a lease.
		if d := at.Sub(last); d < time.Second || d > 2*time.Second+500*time.Millisecond {
			t.Errorf("took the Lease %s after its last renewal, want between one and two leases (1s)", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not take the Lease once its holder stopped renewing")
	}
}

// stubLock is a lock whose writes fail with err; it holds nothing.
type stubLock struct {
	resourcelock.Interface
	err error
}

func (s *stubLock) Identity() string { return "me" }
func (s *stubLock) Describe() string { return "stub" }
func (s *stubLock) Update(context.Context, resourcelock.LeaderElectionRecord) error {
	return s.err
}

// The leader's workers stop a renew deadline after the last renewal that
// succeeded was sent; a failed renewal or a release does not count.
func TestLeaderStopsItsWorkersTheRenewDeadlineAfterItsLastRenewalWasSent(t *testing.T) {
	const budget = 400 * time.Millisecond
	stub := &stubLock{}
	lock := &renewalClock{Interface: stub}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	mine := resourcelock.LeaderElectionRecord{HolderIdentity: "me"}
	_ = lock.Update(ctx, mine)
	stopped := make(chan time.Time, 1)
	go lock.stopAtDeadline(ctx, budget, func() { stopped <- time.Now() })
	time.Sleep(200 * time.Millisecond)
	renewed := time.Now()
	_ = lock.Update(ctx, mine)
	time.Sleep(100 * time.Millisecond)
	stub.err = errors.New("hub unreachable")
	_ = lock.Update(ctx, mine)
	stub.err = nil
	_ = lock.Update(ctx, resourcelock.LeaderElectionRecord{}) // a release
	select {
	case at := <-stopped:
		if d := at.Sub(renewed); d < budget || d > budget+200*time.Millisecond {
			t.Errorf("stopped the workers %s after the last renewal, want just after the renew deadline %s", d, budget)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("did not stop the workers")
	}
}

func TestRenewBudgetKeepsTheMarginAgainstTheLeaseInWholeSeconds(t *testing.T) {
	for _, c := range []struct{ lease, renew, want time.Duration }{
		{15 * time.Second, 10 * time.Second, 10 * time.Second},
		{4500 * time.Millisecond, 4 * time.Second, 3500 * time.Millisecond},
		{900 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond},
	} {
		if got := shard.RenewBudget(c.lease, c.renew); got != c.want {
			t.Errorf("renewBudget(%s, %s) = %s, want %s", c.lease, c.renew, got, c.want)
		}
	}
}

// Once its workers stopped, the leader frees the Lease for a standby, but
// only while the Lease still names it: one that another replica took after
// a failed renewal is left alone, and a deleted one is not recreated.
func TestReleaseFreesOnlyALeaseThatStillNamesThisReplica(t *testing.T) {
	for _, c := range []struct {
		name     string
		lease    []runtime.Object
		want     string // holder afterwards; "-" for no Lease
		seconds  int32
		mustEdit bool
	}{
		{"ours", []runtime.Object{heldLease("me", 60, 1)}, "", 1, true},
		{"taken by another replica", []runtime.Object{heldLease("other", 60, 1)}, "other", 60, false},
		{"deleted", nil, "-", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			hub := fake.NewClientset(c.lease...)
			lock, err := resourcelock.New(resourcelock.LeasesResourceLock, defaultNamespace, testLease,
				hub.CoreV1(), hub.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: "me"})
			if err != nil {
				t.Fatal(err)
			}
			hub.ClearActions()
			release(lock, time.Second)
			edited := false
			for _, a := range hub.Actions() {
				if a.GetVerb() != "get" {
					edited = true
				}
			}
			if edited != c.mustEdit {
				t.Errorf("wrote the Lease: %t, want %t (actions %v)", edited, c.mustEdit, hub.Actions())
			}
			l, err := hub.CoordinationV1().Leases(defaultNamespace).Get(context.Background(), testLease, metav1.GetOptions{})
			if c.want == "-" {
				if err == nil {
					t.Errorf("release created a Lease held by %q", ptr.Deref(l.Spec.HolderIdentity, ""))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h, s := ptr.Deref(l.Spec.HolderIdentity, ""), ptr.Deref(l.Spec.LeaseDurationSeconds, 0); h != c.want || s != c.seconds {
				t.Errorf("holder %q for %ds, want %q for %ds", h, s, c.want, c.seconds)
			}
			if n := ptr.Deref(l.Spec.LeaseTransitions, 0); n != 3 {
				t.Errorf("leaseTransitions %d, want 3 (a release is no transition)", n)
			}
		})
	}
}
