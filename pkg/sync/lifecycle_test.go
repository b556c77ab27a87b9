package sync

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	stdsync "sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

// asyncClock is a fake clock whose timers run their functions on their own
// goroutine, as the real clock's do: the fake runs them under its lock.
type asyncClock struct{ *clocktesting.FakeClock }

func (c asyncClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return c.FakeClock.AfterFunc(d, func() { go f() })
}

// disconnect turns a fixture member into one that is registered but has
// no connection (its registration cannot be turned into one), since since.
func (f *fixture) disconnect(name string, since time.Time) {
	delete(f.members.members, name)
	if f.members.unconnected == nil {
		f.members.unconnected = map[string]lifecycle.State{}
	}
	f.members.unconnected[name] = lifecycle.State{Phase: lifecycle.Registered, Owned: true, Unreachable: true, Since: since, Reason: "kubeconfig does not parse"}
}

// drain works off the queue as the workers would, until nothing is
// pending.
func (f *fixture) drain() {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for f.ctrl.Pending() > 0 {
		if time.Now().After(deadline) {
			f.t.Fatalf("%d keys still pending after 10s", f.ctrl.Pending())
		}
		if f.ctrl.queue.wq.Len() == 0 {
			time.Sleep(5 * time.Millisecond) // a delayed add
			continue
		}
		f.ctrl.processNext(f.ctx)
		f.settle()
	}
}

func (f *fixture) importClusters() []string {
	f.t.Helper()
	imp, err := f.hubMCS.MulticlusterV1beta1().ServiceImports("shop").Get(f.ctx, "cart", metav1.GetOptions{})
	if err != nil {
		return nil
	}
	var out []string
	for _, c := range imp.Status.Clusters {
		out = append(out, c.Cluster)
	}
	return out
}

// A member that is registered but cannot be connected (as after a failover
// whose Secret no longer parses) is not gone: its hub objects and its place
// in the ServiceImport stay, until the unreachable policy withdraws them,
// timed by the member's one policy timer.
func TestRegisteredMemberWithoutConnectionIsKeptUntilThePolicyWithdrawsIt(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	f := newFixture(t, Options{UnreachableWithdraw: time.Hour, Clock: asyncClock{clk}}, nil, nil)
	for _, name := range []string{"c1", "c2"} {
		m := f.member(name)
		_ = m.services.Add(service("shop", "cart"))
		m.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-"+name, 0, 2, true)}
		f.sync(Key{Cluster: name, Namespace: "shop", Name: "cart"})
	}
	f.sync(cartC1.ClusterSet())
	if got := f.importClusters(); len(got) != 2 {
		t.Fatalf("import clusters %v, want c1 and c2", got)
	}

	f.disconnect("c1", clk.Now())
	f.ctrl.ClusterHealthChanged("c1", false)
	f.resetActions()
	f.sync(cartC1)
	f.sync(cartC1.ClusterSet())
	if got := f.writes(); len(got) != 0 {
		t.Fatalf("a registered member without a connection had its hub objects rewritten: %q", got)
	}
	if got := f.importClusters(); len(got) != 2 {
		t.Fatalf("import clusters %v after c1 lost its connection, want c1 and c2 still", got)
	}
	if _, err := f.hub.DiscoveryV1().EndpointSlices("shop").Get(f.ctx, sliceName(0), metav1.GetOptions{}); err != nil {
		t.Fatalf("c1's slice: %v", err)
	}
	if n := f.ctrl.policy.len(); n != 1 {
		t.Fatalf("%d policy timers, want 1 for c1", n)
	}

	// The withdraw period passes: the timer queues c1's keys, whose sync
	// withdraws them. (What the import's events queued goes first.)
	f.drain()
	queued := f.ctrl.queue.wq.Len()
	clk.Step(time.Hour + time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for f.ctrl.queue.wq.Len() == queued && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if f.ctrl.queue.wq.Len() == queued {
		t.Fatal("the withdraw step queued nothing")
	}
	f.drain()
	if _, err := f.hub.DiscoveryV1().EndpointSlices("shop").Get(f.ctx, sliceName(0), metav1.GetOptions{}); err == nil {
		t.Fatal("c1's slice is still there after the withdraw period")
	}
	if got := f.importClusters(); len(got) != 1 || got[0] != "c2" {
		t.Fatalf("import clusters %v after the withdraw period, want only c2", got)
	}
	if n := f.ctrl.policy.len(); n != 0 {
		t.Errorf("%d policy timers after the last step, want 0", n)
	}
}

// A member whose health flaps holds one policy timer at most, and none once
// it answers again; no goroutine is left per flip.
func TestHealthFlappingHoldsOnePolicyTimer(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	f := newFixture(t, Options{UnreachableGrace: time.Minute, UnreachableWithdraw: time.Hour, Clock: asyncClock{clk}}, nil, nil)
	m := f.member("c1")
	before := runtime.NumGoroutine()
	for i := 0; i < 200; i++ {
		m.downSince = clk.Now()
		f.ctrl.ClusterHealthChanged("c1", false)
		if n := f.ctrl.policy.len(); n != 1 {
			t.Fatalf("flip %d: %d policy timers, want 1", i, n)
		}
		m.downSince = time.Time{}
		f.ctrl.ClusterHealthChanged("c1", true)
	}
	if n := f.ctrl.policy.len(); n != 0 {
		t.Errorf("%d policy timers after recovery, want 0", n)
	}
	if after := runtime.NumGoroutine(); after > before+10 {
		t.Errorf("goroutines grew from %d to %d over 200 flips", before, after)
	}
}

// A member that answers again before any step of its unreachable policy
// was due (a probe that flaps under load) is not queued again: its hub
// objects are those of a reachable member. One that answers after a step
// was due is.
func TestRecoveryResyncsOnlyAMemberAPolicyStepChanged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		down   time.Duration // how long before the recovery the outage began
		resync bool
	}{
		{"within the grace period", 30 * time.Second, false},
		{"past the grace period", 2 * time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Now())
			f := newFixture(t, Options{UnreachableGrace: time.Minute, UnreachableWithdraw: time.Hour, Clock: asyncClock{clk}}, nil, nil)
			m := f.member("c1")
			_ = m.services.Add(service("shop", "cart"))
			m.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-c1", 0, 2, true)}
			f.sync(Key{Cluster: "c1", Namespace: "shop", Name: "cart"})
			f.drain()
			f.queuedWhenQuiet() // what the hub's events of those writes queued

			m.downSince = clk.Now()
			f.ctrl.ClusterHealthChanged("c1", false)
			if keys := f.queuedWhenQuiet(); len(keys) != 0 {
				t.Fatalf("the outage queued %v, want nothing (Keep)", keys)
			}
			clk.SetTime(m.downSince.Add(tc.down))
			if tc.resync {
				// The grace step's timer fires on its own goroutine.
				if !f.waitQueued() {
					t.Fatal("the grace step queued nothing")
				}
				f.drain()
				f.queuedWhenQuiet()
			}
			m.downSince = time.Time{}
			f.ctrl.ClusterHealthChanged("c1", true)
			keys := f.queuedWhenQuiet()
			if got := slices.Contains(keys, Key{Cluster: "c1", Namespace: "shop", Name: "cart"}); got != tc.resync {
				t.Errorf("recovery queued %v; the member's service again: %v, want %v", keys, got, tc.resync)
			}
		})
	}
}

// stillClock is a clock whose time moves without firing its timers.
type stillClock struct {
	*clocktesting.FakeClock
	now time.Time
}

func (c *stillClock) Now() time.Time { return c.now }

// A recovery stops the member's policy timer and says whether a step other
// than Keep applied, or was due: a sync plans the step due when it runs,
// which may be before the step's timer fired.
func TestPolicyStopReportsAStepDueBeforeItsTimerFired(t *testing.T) {
	t0 := time.Now()
	clk := &stillClock{FakeClock: clocktesting.NewFakeClock(t0), now: t0}
	p := newPolicyTimers(clk)
	set := func() { p.set("c1", t0.Add(time.Minute), func() { t.Error("a still clock's timer fired") }) }

	set()
	clk.now = t0.Add(30 * time.Second)
	if p.stop("c1") {
		t.Error("stop reports a step before any was due")
	}
	set()
	clk.now = t0.Add(time.Minute)
	if !p.stop("c1") {
		t.Error("stop does not report the step due when its timer had not fired yet")
	}
	if p.stop("c1") {
		t.Error("a second stop reports the step again")
	}
	p.applied("c1", lifecycle.MarkNotReady)
	if !p.stop("c1") {
		t.Error("stop does not report the step applied")
	}
	if n := p.len(); n != 0 {
		t.Errorf("%d timers after stop, want 0", n)
	}
}

// A key waits only for what its last sync found missing: a key that waited
// for a hub namespace leaves the record once its service is gone, and the
// keys of a removed member leave it with the member.
func TestWaitsHoldOnlyKeysThatWaitNow(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil)
	m := f.member("c1")
	for _, name := range []string{"a", "b"} {
		_ = m.services.Add(service("missing", name))
		m.slices = append(m.slices, memberSlice("missing", name, name+"-x", 0, 1, true))
	}
	a, b := Key{Cluster: "c1", Namespace: "missing", Name: "a"}, Key{Cluster: "c1", Namespace: "missing", Name: "b"}
	f.sync(a)
	f.sync(b)
	if n := f.ctrl.waits.len(); n != 2 {
		t.Fatalf("%d keys wait, want 2 (for hub namespace missing)", n)
	}
	// a's service is deleted: its next sync does not wait.
	_ = m.services.Delete(service("missing", "a"))
	m.slices = m.slices[1:]
	f.ctrl.waits.drop(a) // as processNext does before each sync
	f.sync(a)
	if n := f.ctrl.waits.len(); n != 1 {
		t.Fatalf("%d keys wait after a's service was deleted, want 1", n)
	}
	// c1 is unregistered: b leaves with it.
	delete(f.members.members, "c1")
	f.ctrl.ClusterRemoved("c1")
	if n := f.ctrl.waits.len(); n != 0 {
		t.Fatalf("%d keys wait after their member was removed, want 0", n)
	}
}

// A standby (a controller whose workers have not started) queues what it
// sees in bulk: at its takeover, a live change goes before the leader's
// writes it watched while standing by.
func TestStandbyQueuesInBulk(t *testing.T) {
	c, err := New(nil, nil, &fakeMembers{members: map[string]*fakeMember{}, synced: true}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	seen := Key{Cluster: "c1", Namespace: "shop", Name: "seen-as-standby"}
	c.queue.add(seen, aChange)
	c.queue.start()
	live := Key{Cluster: "c1", Namespace: "shop", Name: "changed-after-takeover"}
	c.queue.add(live, aChange)
	if got, _ := c.queue.wq.Get(); got != live {
		t.Errorf("first key after takeover = %v, want the live change %v", got, live)
	}
}

// exportedCart gives the fixture a member exporting shop/cart with two
// ready endpoints, synced into the hub.
func (f *fixture) exportedCart(name string) *fakeMember {
	f.t.Helper()
	m := f.member(name)
	_ = m.services.Add(service("shop", "cart"))
	m.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-"+name, 0, 2, true)}
	f.sync(Key{Cluster: name, Namespace: "shop", Name: "cart"})
	return m
}

// drainQueue empties the queue without syncing.
func (f *fixture) drainQueue() {
	for f.ctrl.queue.wq.Len() > 0 {
		k, _ := f.ctrl.queue.wq.Get()
		f.ctrl.queue.wq.Done(k)
	}
}

// waitQueued waits until something is queued.
func (f *fixture) waitQueued() bool {
	deadline := time.Now().Add(5 * time.Second)
	for f.ctrl.queue.wq.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	return f.ctrl.queue.wq.Len() > 0
}

// An outage is reported a probe or more after it began: a step of the
// policy that is due already when it is reported is applied at once.
func TestPolicyStepDueWhenTheOutageIsReportedIsApplied(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	f := newFixture(t, Options{UnreachableGrace: 5 * time.Second, UnreachableWithdraw: time.Hour, Clock: asyncClock{clk}}, nil, nil)
	m := f.exportedCart("c1")
	f.drainQueue()
	m.downSince = clk.Now().Add(-10 * time.Second)
	f.ctrl.ClusterHealthChanged("c1", false)
	if f.ctrl.queue.wq.Len() == 0 {
		t.Fatal("grace had passed when the outage was reported, but nothing was queued")
	}
	f.drainQueue()
	// The same outage reported again applies nothing new.
	f.ctrl.ClusterHealthChanged("c1", false)
	if n := f.ctrl.queue.wq.Len(); n != 0 {
		t.Errorf("the same step applied twice: %d keys queued", n)
	}
}

// A registration retried with a shorter withdraw period than the outage's
// age withdraws at once: its waiting keys are not left behind.
func TestShortenedWithdrawPeriodWithdrawsAtOnce(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	f := newFixture(t, Options{UnreachableWithdraw: time.Hour, Clock: asyncClock{clk}}, nil, nil)
	f.exportedCart("c1")
	f.disconnect("c1", clk.Now().Add(-10*time.Minute))
	f.ctrl.ClusterHealthChanged("c1", false)
	f.sync(cartC1) // waits for c1
	if f.ctrl.waits.len() == 0 {
		t.Fatal("setup: cartC1 does not wait")
	}
	f.drainQueue()
	st := f.members.unconnected["c1"]
	one := time.Minute
	st.Policy.Withdraw = &one
	f.members.unconnected["c1"] = st
	f.ctrl.ClusterHealthChanged("c1", false)
	if !f.waitQueued() {
		t.Fatalf("withdraw is due but nothing was queued; %d keys wait, %d policy timers", f.ctrl.waits.len(), f.ctrl.policy.len())
	}
	f.drain()
	if _, err := f.hub.DiscoveryV1().EndpointSlices("shop").Get(f.ctx, sliceName(0), metav1.GetOptions{}); err == nil {
		t.Fatal("c1's slice is still there although its withdraw period passed")
	}
}

// A member that is dark when the daemon starts (connected, never synced,
// failing its probes) is subject to the withdraw period too.
func TestUnsyncedUnreachableMemberIsWithdrawnAfterThePeriod(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	f := newFixture(t, Options{UnreachableWithdraw: time.Minute, Clock: asyncClock{clk}}, nil, nil)
	m := f.exportedCart("c1")
	f.sync(cartC1.ClusterSet())
	// A restart: c1 connects but does not answer.
	m.synced, m.downSince = false, clk.Now()
	f.ctrl.ClusterHealthChanged("c1", false)
	f.resetActions()
	f.sync(cartC1)
	if got := f.writes(); len(got) != 0 {
		t.Fatalf("within the withdraw period: writes %q", got)
	}
	f.drainQueue()
	clk.Step(time.Minute + time.Second)
	if !f.waitQueued() {
		t.Fatal("the withdraw step queued nothing")
	}
	f.drain()
	if _, err := f.hub.DiscoveryV1().EndpointSlices("shop").Get(f.ctx, sliceName(0), metav1.GetOptions{}); err == nil {
		t.Fatal("c1's slice is still there after the withdraw period")
	}
	if got := f.importClusters(); len(got) != 0 {
		t.Errorf("import clusters %v after the withdraw period, want none", got)
	}
}

// A member unregistered while a sync of one of its keys is writing: the
// removal queues what the hub held of it then, not what that sync is about
// to create. The sync, seeing its member change phase, queues its key
// again, which withdraws what it wrote.
func TestMemberRemovedDuringASyncOfItsKeyLeavesNothing(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil)
	m := f.member("c1")
	_ = m.services.Add(service("shop", "cart"))
	m.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-c1", 0, 2, true)}
	removed := false
	f.ctrl.write.beforeCall = func() {
		if !removed {
			removed = true
			delete(f.members.members, "c1")
			f.ctrl.ClusterRemoved("c1")
		}
	}
	f.ctrl.queue.add(cartC1, aChange)
	f.ctrl.processNext(f.ctx)
	f.ctrl.write.beforeCall = nil
	if !removed {
		t.Fatal("setup: the sync made no hub call")
	}
	f.settle()
	f.drain()
	if sl, _ := f.hub.DiscoveryV1().EndpointSlices("shop").List(f.ctx, metav1.ListOptions{}); len(sl.Items) != 0 {
		t.Errorf("%d slices of the removed member are left", len(sl.Items))
	}
	if _, err := f.hub.CoreV1().Services("shop").Get(f.ctx, "cart-c1", metav1.GetOptions{}); err == nil {
		t.Error("the removed member's per-cluster Service is left")
	}
}

// errLister is a Service lister that fails, as one with a broken selector.
type errLister struct{ corelisters.ServiceLister }

func (errLister) List(labels.Selector) ([]*corev1.Service, error) {
	return nil, errors.New("injected lister failure")
}

// brokenMember is a member whose caches cannot be listed.
type brokenMember struct{ *fakeMember }

func (m brokenMember) ServiceLister() corelisters.ServiceLister { return errLister{} }
func (m brokenMember) ServiceExports() ([]*mcsv1beta1.ServiceExport, error) {
	return nil, errors.New("injected export lister failure")
}

// A member's resync that cannot list its caches says so, naming the
// member, instead of queueing nothing in silence.
func TestResyncReportsListErrors(t *testing.T) {
	var mu stdsync.Mutex
	var reported []string
	saved := utilruntime.ErrorHandlers
	utilruntime.ErrorHandlers = append(slices.Clone(saved), func(_ context.Context, err error, _ string, _ ...interface{}) {
		mu.Lock()
		defer mu.Unlock()
		reported = append(reported, err.Error())
	})
	t.Cleanup(func() { utilruntime.ErrorHandlers = saved })
	members := &memberSet[brokenMember]{members: map[string]brokenMember{"c1": {newFakeMember()}}, synced: true}
	hub := kubefake.NewClientset()
	c, err := New(hub, mcsfake.NewSimpleClientset(), members, Options{HubMetadata: metadataOf(hub)})
	if err != nil {
		t.Fatal(err)
	}
	c.ClusterSynced("c1")
	mu.Lock()
	defer mu.Unlock()
	got := strings.Join(reported, "\n")
	for _, want := range []string{`listing the Services of member "c1"`, `listing the ServiceExports of member "c1"`} {
		if !strings.Contains(got, want) {
			t.Errorf("no error %q reported; reported:\n%s", want, got)
		}
	}
}
