package sync

import (
	"context"
	"slices"
	"strings"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
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
// its Lease cache lists again, and the registered member's Lease kept
// renewed meanwhile.
func TestMemberLeasesFailedInitialListStillDeletesStaleLease(t *testing.T) {
	leaseClient := kubefake.NewClientset(memberLease("gone"))
	var lists, failures atomic.Int32
	leaseClient.PrependReactor("list", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		if lists.Add(1) <= 1 {
			failures.Add(1)
			return true, nil, apierrors.NewServiceUnavailable("hub API server restarting")
		}
		return false, nil, nil
	})
	f := newFixture(t, Options{LeaseNamespace: leaseTestNS, LeaseDuration: 100 * time.Millisecond, LeaseClient: leaseClient}, nil, nil)
	f.member("alpha")

	ctx, cancel := context.WithCancel(f.ctx)
	var wg stdsync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		f.ctrl.runMemberLeases(ctx)
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })

	leases := leaseClient.CoordinationV1().Leases(leaseTestNS)
	deadline := time.Now().Add(10 * time.Second)
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
	if failures.Load() != 1 {
		t.Errorf("%d Lease lists failed, want 1 (the reactor fails the first)", failures.Load())
	}
}

// TestMemberLeasesOfNamesNotKnownYetStayUntilRegistrationsSynced: a
// replica that starts merging before its registry has read every
// registration must not take a member it has not read yet for an
// unregistered one and delete its Lease (its owner would then create it
// again); once the registrations are known, a Lease of a name still not
// registered goes.
func TestMemberLeasesOfNamesNotKnownYetStayUntilRegistrationsSynced(t *testing.T) {
	f := newFixture(t, Options{LeaseNamespace: leaseTestNS, LeaseDuration: 100 * time.Millisecond},
		[]runtime.Object{memberLease("east")}, nil)
	f.members.synced = false
	run := func(d time.Duration) {
		ctx, cancel := context.WithTimeout(f.ctx, d)
		defer cancel()
		f.ctrl.runMemberLeases(ctx)
	}
	leases := f.hub.CoordinationV1().Leases(leaseTestNS)

	run(300 * time.Millisecond) // a dozen renewal periods
	if _, err := leases.Get(f.ctx, MemberLeasePrefix+"east", metav1.GetOptions{}); err != nil {
		t.Fatalf("east's Lease before the registrations synced: %v, want it kept", err)
	}
	for _, a := range f.hub.Actions() {
		if a.GetVerb() == "delete" {
			t.Fatalf("a %s of %s before the registrations synced", a.GetVerb(), a.GetResource().Resource)
		}
	}

	f.members.synced = true
	deadline := time.Now().Add(5 * time.Second)
	for {
		run(100 * time.Millisecond)
		if _, err := leases.Get(f.ctx, MemberLeasePrefix+"east", metav1.GetOptions{}); apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("east is not registered once the registrations synced, and its Lease is still there")
		}
	}
}

// TestMemberLeasePublishesTheDaemonsViewWhenItChanges: a member's Lease
// carries whether the daemon reaches the member and, if not, why, written
// once when that changes, not on every pass; an unreachable member's Lease
// is not renewed; a member that was never read gets a Lease that says why
// and was never renewed; a member owned elsewhere gets nothing from here;
// and a daemon restarted on Leases that say what it sees writes nothing.
func TestMemberLeasePublishesTheDaemonsViewWhenItChanges(t *testing.T) {
	const period = time.Millisecond
	opts := Options{LeaseNamespace: leaseTestNS, LeaseDuration: 40 * time.Second}
	f := newFixture(t, opts, nil, nil)
	alpha := f.member("alpha")
	other := f.member("other")
	other.elsewhere = true
	known := map[string]*coordinationv1.Lease{}
	get := func(name string) *coordinationv1.Lease {
		t.Helper()
		l, err := f.hub.CoordinationV1().Leases(leaseTestNS).Get(f.ctx, MemberLeasePrefix+name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// on is the fixture whose hub wantWrites looks at.
	on := f
	leaseWrites := func() []string {
		var out []string
		for _, w := range on.writes() {
			if strings.Contains(w, " leases ") {
				out = append(out, w)
			}
		}
		on.hub.ClearActions()
		return out
	}
	wantWrites := func(step string, want ...string) {
		t.Helper()
		if got := leaseWrites(); !slices.Equal(got, want) {
			t.Errorf("%s: Lease writes %q, want %q", step, got, want)
		}
	}
	alphaLease := leaseTestNS + "/" + MemberLeasePrefix + "alpha"

	f.hub.ClearActions()
	f.ctrl.renewMemberLeases(f.ctx, known, period)
	wantWrites("first pass", "create leases "+alphaLease)
	if l := get("alpha"); l.Annotations[AnnotationReachable] != "true" || l.Spec.RenewTime == nil || l.Annotations[AnnotationErrorReason] != "" {
		t.Errorf("healthy member's Lease: annotations %v, renewTime %v", l.Annotations, l.Spec.RenewTime)
	}
	renewed := get("alpha").Spec.RenewTime.Time

	// Unreachable: published at once, without a renewal, and only once.
	down := time.Now().Add(-3 * time.Second).Truncate(time.Second)
	alpha.downSince, alpha.cause, alpha.why = down, "Timeout", "context deadline exceeded"
	f.ctrl.publishMemberHealth(f.ctx, known)
	wantWrites("member unreachable", "update leases "+alphaLease)
	l := get("alpha")
	if l.Annotations[AnnotationReachable] != "false" || l.Annotations[AnnotationErrorReason] != "Timeout" ||
		l.Annotations[AnnotationErrorMessage] != "context deadline exceeded" || l.Annotations[AnnotationReachableSince] != down.UTC().Format(time.RFC3339) {
		t.Errorf("unreachable member's Lease annotations %v", l.Annotations)
	}
	if !l.Spec.RenewTime.Time.Equal(renewed) {
		t.Errorf("an unreachable member's Lease was renewed: %v, was %v", l.Spec.RenewTime, renewed)
	}
	f.ctrl.publishMemberHealth(f.ctx, known)
	f.ctrl.renewMemberLeases(f.ctx, known, period)
	alpha.why = "context deadline exceeded (Client.Timeout exceeded)"
	f.ctrl.publishMemberHealth(f.ctx, known)
	wantWrites("nothing changed but the message")

	alpha.cause, alpha.why = "ConnectionRefused", "connect: connection refused"
	f.ctrl.publishMemberHealth(f.ctx, known)
	wantWrites("another cause", "update leases "+alphaLease)

	// A member that cannot be connected: a Lease that says why.
	beta := f.member("beta")
	beta.phase, beta.synced, beta.downSince = lifecycle.Registered, false, down
	beta.cause, beta.why = "InvalidRegistration", "kubeconfig does not parse"
	f.ctrl.publishMemberHealth(f.ctx, known)
	wantWrites("unconnected member", "create leases "+leaseTestNS+"/"+MemberLeasePrefix+"beta")
	if l := get("beta"); l.Spec.RenewTime != nil || l.Annotations[AnnotationErrorReason] != "InvalidRegistration" {
		t.Errorf("unconnected member's Lease: renewTime %v, annotations %v", l.Spec.RenewTime, l.Annotations)
	}

	// Restart: a new controller on these Leases, a third member still
	// connecting, writes nothing.
	leases, err := f.hub.CoordinationV1().Leases(leaseTestNS).List(f.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for i := range leases.Items {
		objs = append(objs, &leases.Items[i])
	}
	g := newFixture(t, opts, objs, nil)
	g.members = f.members
	g.ctrl.members = f.members
	gamma := g.member("gamma")
	gamma.synced = false
	g.hub.ClearActions()
	restartKnown := map[string]*coordinationv1.Lease{}
	g.ctrl.renewMemberLeases(g.ctx, restartKnown, period)
	g.ctrl.publishMemberHealth(g.ctx, restartKnown)
	on = g
	wantWrites("restart")

	// Healthy again: the renewal says so.
	alpha.downSince, alpha.cause, alpha.why = time.Time{}, "", ""
	g.ctrl.publishMemberHealth(g.ctx, restartKnown)
	wantWrites("member answers again", "update leases "+alphaLease)
	if l, _ := g.hub.CoordinationV1().Leases(leaseTestNS).Get(g.ctx, MemberLeasePrefix+"alpha", metav1.GetOptions{}); l.Annotations[AnnotationReachable] != "true" ||
		l.Annotations[AnnotationErrorReason] != "" || !l.Spec.RenewTime.After(renewed) {
		t.Errorf("recovered member's Lease: annotations %v, renewTime %v", l.Annotations, l.Spec.RenewTime)
	}
}

// TestMemberLeasesUseTheLeaseClient: with a client of their own, the
// member Leases are listed, read, written and deleted through it, and the
// hub client (whose rate limiter the aggregated writes use) sends none of
// those requests.
func TestMemberLeasesUseTheLeaseClient(t *testing.T) {
	leaseClient := kubefake.NewClientset(memberLease("gone"))
	f := newFixture(t, Options{LeaseNamespace: leaseTestNS, LeaseDuration: 40 * time.Second, LeaseClient: leaseClient}, nil, nil)
	f.member("alpha")
	f.hub.ClearActions()
	f.ctrl.renewMemberLeases(f.ctx, map[string]*coordinationv1.Lease{}, time.Millisecond)

	var got []string
	for _, a := range leaseClient.Actions() {
		if a.GetVerb() != "watch" { // the cache's, whenever it starts
			got = append(got, a.GetVerb()+" "+a.GetResource().Resource)
		}
	}
	if want := []string{"list leases", "get leases", "create leases", "delete leases"}; !slices.Equal(got, want) {
		t.Errorf("the lease client's requests %q, want %q", got, want)
	}
	for _, a := range f.hub.Actions() {
		if a.GetResource().Resource == resourceLease {
			t.Errorf("the hub client sent %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	if _, err := leaseClient.CoordinationV1().Leases(leaseTestNS).Get(f.ctx, MemberLeasePrefix+"alpha", metav1.GetOptions{}); err != nil {
		t.Errorf("alpha's Lease: %v", err)
	}
}

func TestIdentityMismatchMessagesAreWorthALeaseWrite(t *testing.T) {
	if reasonIdentityMismatch != string(clusters.ClassIdentityMismatch) {
		t.Fatalf("reasonIdentityMismatch %q is not the class %q", reasonIdentityMismatch, clusters.ClassIdentityMismatch)
	}
	l := &coordinationv1.Lease{}
	setHealth(l, leaseHealth{reason: "Timeout", message: "dial tcp: i/o timeout"}, time.Now())
	if healthChanged(l, leaseHealth{reason: "Timeout", message: "context deadline exceeded"}) {
		t.Error("a new message of a Timeout is worth a write")
	}
	setHealth(l, leaseHealth{reason: reasonIdentityMismatch, message: `its cluster id is "west"`}, time.Now())
	if !healthChanged(l, leaseHealth{reason: reasonIdentityMismatch, message: `its ClusterSet is "staging"`}) {
		t.Error("a new identity mismatch is not worth a write")
	}
	if healthChanged(l, leaseHealth{reason: reasonIdentityMismatch, message: `its cluster id is "west"`}) {
		t.Error("the same identity mismatch is worth a write")
	}
}

// The ServiceExport version a synced member is read in goes on its Lease,
// and a change of it is worth a write.
func TestLeaseSaysWhichServiceExportVersionTheMemberServes(t *testing.T) {
	st := lifecycle.State{Phase: lifecycle.Synced, Owned: true, ExportVersion: lifecycle.ExportNotServed}
	h, ok := desiredLeaseHealth(st)
	if !ok {
		t.Fatal("nothing to publish for a synced member")
	}
	l := &coordinationv1.Lease{}
	setHealth(l, h, time.Now())
	if got := l.Annotations[AnnotationServiceExportVersion]; got != lifecycle.ExportNotServed {
		t.Fatalf("%s = %q, want %q", AnnotationServiceExportVersion, got, lifecycle.ExportNotServed)
	}
	st.ExportVersion = "v1alpha1"
	h, _ = desiredLeaseHealth(st)
	if !healthChanged(l, h) {
		t.Fatal("a new ServiceExport version is not worth a write")
	}
	setHealth(l, h, time.Now())
	st.ExportVersion = ""
	h, _ = desiredLeaseHealth(st)
	setHealth(l, h, time.Now())
	if _, ok := l.Annotations[AnnotationServiceExportVersion]; ok {
		t.Fatalf("annotation kept for a member whose ServiceExports are not read: %v", l.Annotations)
	}
}

// TestLeaseOfAMemberRegisteredAfterTheMergerStartedIsDeleted: a member
// registered after the merging replica started, owned (and its Lease
// written) by another replica, then unregistered, must not leave its Lease
// behind.
func TestLeaseOfAMemberRegisteredAfterTheMergerStartedIsDeleted(t *testing.T) {
	f := newFixture(t, Options{LeaseNamespace: leaseTestNS, LeaseDuration: 40 * time.Second}, nil, nil)
	f.member("alpha")
	known := map[string]*coordinationv1.Lease{}
	f.ctrl.renewMemberLeases(f.ctx, known, time.Millisecond)

	late := f.member("late")
	late.elsewhere = true
	leases := f.hub.CoordinationV1().Leases(leaseTestNS)
	if _, err := leases.Create(f.ctx, memberLease("late"), metav1.CreateOptions{}); err != nil { // by its owner
		t.Fatal(err)
	}
	f.ctrl.renewMemberLeases(f.ctx, known, time.Millisecond)
	delete(f.members.members, "late")

	deadline := time.Now().Add(5 * time.Second)
	for passes := 1; ; passes++ {
		f.ctrl.renewMemberLeases(f.ctx, known, time.Millisecond)
		_, err := leases.Get(f.ctx, MemberLeasePrefix+"late", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d passes of the merging replica, the Lease of the unregistered member late: %v, want NotFound", passes, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := leases.Get(f.ctx, MemberLeasePrefix+"alpha", metav1.GetOptions{}); err != nil {
		t.Errorf("alpha's Lease: %v", err)
	}
}

// TestOutageStartTravelsWithTheMemberLease: a replica that takes over an
// unreachable member (or restarts) and finds its own connection down just
// now times the unreachable policy from the outage's start its Lease
// publishes, not from its own; and it does not move that start later.
func TestOutageStartTravelsWithTheMemberLease(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	began := clk.Now().Add(-2 * time.Hour).Truncate(time.Second)
	l := memberLease("c1")
	l.Annotations = map[string]string{AnnotationReachable: "false", AnnotationReachableSince: began.UTC().Format(time.RFC3339)}
	f := newFixture(t, Options{LeaseNamespace: leaseTestNS, LeaseDuration: 40 * time.Second, UnreachableWithdraw: time.Hour, Clock: asyncClock{clk}},
		[]runtime.Object{l}, nil)
	m := f.exportedCart("c1")
	f.drainQueue()
	m.downSince = clk.Now() // this replica's connection timed out just now

	c1Slices := func() int {
		list, err := f.hub.DiscoveryV1().EndpointSlices("shop").List(f.ctx, metav1.ListOptions{LabelSelector: mcsv1beta1.LabelSourceCluster + "=c1"})
		if err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	if c1Slices() == 0 {
		t.Fatal("c1 has no hub slices to begin with")
	}
	f.ctrl.ClusterHealthChanged("c1", false)
	f.drain()
	if n := c1Slices(); n > 0 {
		t.Fatalf("c1, unreachable since %s by its Lease, still has %d hub slices with a withdraw period of an hour: the policy timed the outage from this replica's own start", began, n)
	}

	f.ctrl.publishMemberHealth(f.ctx, map[string]*coordinationv1.Lease{})
	got, err := f.hub.CoordinationV1().Leases(leaseTestNS).Get(f.ctx, MemberLeasePrefix+"c1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if since := got.Annotations[AnnotationReachableSince]; since != began.UTC().Format(time.RFC3339) || got.Annotations[AnnotationReachable] != "false" {
		t.Errorf("c1's Lease says reachable=%s since %s, want false since %s", got.Annotations[AnnotationReachable], since, began.UTC().Format(time.RFC3339))
	}
}

// TestOutageStartIsTheEarlierOfOwnAndPublished: only a Lease that says its
// member unreachable since earlier than this replica's own start moves
// that start; one this replica wrote (its start, in whole seconds) does not;
// and no outage starts before the member's registration.
func TestOutageStartIsTheEarlierOfOwnAndPublished(t *testing.T) {
	own := time.Now().Add(-time.Minute)
	earlier := own.Add(-time.Hour).Truncate(time.Second)
	lease := func(name, reachable string, since time.Time) runtime.Object {
		l := memberLease(name)
		l.Annotations = map[string]string{AnnotationReachable: reachable, AnnotationReachableSince: since.UTC().Format(time.RFC3339)}
		return l
	}
	f := newFixture(t, Options{LeaseNamespace: leaseTestNS, LeaseDuration: 40 * time.Second}, []runtime.Object{
		lease("down", "false", earlier), lease("up", "true", earlier), lease("later", "false", own.Add(time.Hour)), lease("same", "false", own),
	}, nil)
	for name, want := range map[string]time.Time{"down": earlier, "up": own, "later": own, "same": own, "none": own} {
		if got := f.ctrl.outageStart(name, own, time.Time{}); !got.Equal(want) {
			t.Errorf("%s: outage start %v, want %v", name, got, want)
		}
	}
	registered := earlier.Add(time.Minute)
	if got := f.ctrl.outageStart("down", own, registered); !got.Equal(registered) {
		t.Errorf("outage start %v of a member registered at %v, want its registration", got, registered)
	}
}
