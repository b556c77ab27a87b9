package shard

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/leasehub"
)

// A driven replica set: real coordinators over one in-memory Lease hub,
// each with its own cache that shows the hub's changes only when the test
// says, on one virtual clock. Nothing runs unless the test calls it.

const drivenNS = "ns"

type driven struct {
	t      *testing.T
	hub    *leasehub.Hub
	now    time.Time
	leader string
	byID   map[string]*drivenReplica
}

type drivenReplica struct {
	c       *Coordinator
	cache   *leasehub.Cache
	members *fakeMembers
	frees   []func() // handovers started, run by the test
}

func newDriven(t *testing.T) *driven {
	return &driven{t: t, hub: leasehub.New(), now: time.Unix(1_000_000, 0), byID: map[string]*drivenReplica{}}
}

func (d *driven) clock() time.Time { return d.now }

// advance moves the clock on.
func (d *driven) advance(by time.Duration) { d.now = d.now.Add(by) }

// add starts a replica registered with names; its cache shows nothing yet.
func (d *driven) add(id string, names ...string) *drivenReplica {
	r := &drivenReplica{cache: d.hub.NewCache(), members: &fakeMembers{names: names, reconsiders: map[string]int{}, cold: map[string]bool{}}}
	r.c = New(d.hub.Client(), r.members, fakeSyncer{}, Options{
		Namespace: drivenNS, Identity: id,
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Leading:       func() bool { return d.leader == id },
		SettleTimeout: time.Minute,
		Now:           d.clock,
		Cache:         r.cache.Lister(drivenNS),
		Go:            func(f func()) { r.frees = append(r.frees, f) },
		Sleep:         func(time.Duration) { d.t.Fatal("a handover waited for a sync, and no sync runs") },
	})
	r.cache.Deliver = r.c.Observe
	d.byID[id] = r
	return r
}

// step renews the named replicas' peer Leases, lets their caches catch up
// and reconciles each, in that order, running the handovers they start.
func (d *driven) step(ids ...string) {
	ctx := context.Background()
	for _, id := range ids {
		d.byID[id].c.Renew(ctx)
	}
	for _, id := range ids {
		r := d.byID[id]
		r.cache.Catch(-1)
		r.c.Reconcile(ctx)
		for len(r.frees) > 0 {
			f := r.frees[0]
			r.frees = r.frees[1:]
			f()
		}
	}
}

func (d *driven) fence(cluster string) fence {
	l := d.hub.Get(FenceName(cluster))
	if l == nil {
		d.t.Fatalf("%s has no fence", cluster)
	}
	return fenceOf(l)
}

// memberFor finds a member name that Assign gives to want among live.
func memberFor(want string, live ...string) string {
	for i := range 1000 {
		n := fmt.Sprintf("m%d", i)
		if Assign([]Member{{Name: n, Weight: 1}}, live, DefaultBound)[n] == want {
			return n
		}
	}
	panic("no member name hashes to " + want)
}

// TestStaleReadyDoesNotFreeToAnUnsyncedAssignee is defect 1 of the
// sharding issue: B takes X gracefully, pauses past its lease, C takes X;
// B comes back, X is assigned to B again while B's connection relists. C
// must keep X until B says it synced, not free it on the readiness B said
// for the first handover.
func TestStaleReadyDoesNotFreeToAnUnsyncedAssignee(t *testing.T) {
	d := newDriven(t)
	x := memberFor("b", "b", "c")
	d.leader = "l"
	l := d.add("l", x)
	d.step("l")
	l.c.BeginDrain(context.Background()) // leads, takes nothing
	d.add("c", x)
	d.step("l", "c")
	d.step("l", "c")
	if f := d.fence(x); f.holder != "c" {
		t.Fatalf("setup: %s held by %q, want c", x, f.holder)
	}
	b := d.add("b", x)
	for range 4 {
		d.step("l", "b", "c")
	}
	if f := d.fence(x); f.holder != "b" || f.assignedTo != "b" {
		t.Fatalf("setup: %s held by %q, assigned to %q; want a graceful handover to b", x, f.holder, f.assignedTo)
	}
	// B pauses past its lease: C takes X back.
	for range 9 {
		d.advance(2 * time.Second)
		d.step("l", "c")
	}
	if f := d.fence(x); f.holder != "c" {
		t.Fatalf("setup: %s held by %q after b paused past its lease, want c", x, f.holder)
	}
	// B resumes; its connection to X relists.
	b.members.mu.Lock()
	b.members.cold[x] = true
	b.members.mu.Unlock()
	for range 3 {
		d.advance(time.Second)
		d.step("b", "l", "c")
	}
	f := d.fence(x)
	if f.assignedTo != "b" {
		t.Fatalf("%s assigned to %q once b is back, want b", x, f.assignedTo)
	}
	if f.holder != "c" {
		t.Fatalf("%s held by %q while b has not synced it (ready %q): c freed it on a stale readiness", x, f.holder, f.ready)
	}
	// Once B synced, the handover goes on.
	b.members.mu.Lock()
	b.members.cold[x] = false
	b.members.mu.Unlock()
	for range 3 {
		d.step("b", "l", "c")
	}
	if f := d.fence(x); f.holder != "b" {
		t.Fatalf("%s held by %q after b synced, want b", x, f.holder)
	}
}

// TestLeaderFreesOnlyWhatTheServerShowsDead is defect 5: the leader's
// watch lags more than a lease duration behind a holder that renews. It
// must not count the holder's member free, nor delete its peer Lease.
func TestLeaderFreesOnlyWhatTheServerShowsDead(t *testing.T) {
	d := newDriven(t)
	x := memberFor("h", "h")
	d.leader = "l"
	l := d.add("l", x)
	d.step("l")
	l.c.BeginDrain(context.Background())
	h := d.add("h", x)
	d.step("l", "h")
	d.step("l", "h")
	if f := d.fence(x); f.holder != "h" {
		t.Fatalf("setup: %s held by %q, want h", x, f.holder)
	}
	// X is unregistered at the leader; h's registry does not know yet.
	l.members.mu.Lock()
	l.members.names = nil
	l.members.mu.Unlock()
	// The leader's watch stalls; h renews at the hub.
	for range 40 {
		d.advance(2 * time.Second)
		h.c.Renew(context.Background())
		l.c.Renew(context.Background())
		l.c.Reconcile(context.Background())
		if l.c.Free(x) {
			t.Fatalf("the leader counts %s free %s after its watch stalled, while its holder renews", x, d.now.Sub(time.Unix(1_000_000, 0)))
		}
	}
	if d.hub.Get(PeerName("h")) == nil {
		t.Fatal("the leader deleted the peer Lease of a replica that renews, from a stalled watch")
	}
	if d.hub.Get(FenceName(x)) == nil {
		t.Fatal("the leader deleted the fence of a live holder")
	}
}

// TestAbsentPeerLeaseIsNotDeadAtOnce is defect 5's last part: a holder
// whose peer Lease someone deleted may still write until its deadline; a
// replica whose cache never showed that Lease must not take its fence the
// moment it finds the Lease gone.
func TestAbsentPeerLeaseIsNotDeadAtOnce(t *testing.T) {
	d := newDriven(t)
	c := d.add("c", "x")
	d.hub.Put(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: FenceName("x"), Namespace: drivenNS,
			Labels:      map[string]string{LabelRole: RoleFence, LabelFenceCluster: "x"},
			Annotations: map[string]string{AnnotationAssignedTo: "c"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("h")},
	})
	c.cache.Catch(-1) // the fence, and nothing of h
	h := d.add("h", "x")
	start := d.now
	for d.now.Sub(start) < 14*time.Second {
		d.advance(time.Second)
		h.c.Renew(context.Background())
	}
	hDeadline := h.c.Deadline()
	d.hub.Delete(PeerName("h"))
	for d.now.Before(hDeadline.Add(time.Second)) {
		d.advance(time.Second)
		c.c.Renew(context.Background())
		c.c.Reconcile(context.Background())
		if f := d.fence("x"); f.holder == "c" && d.now.Before(hDeadline) {
			t.Fatalf("c took x %s before h's deadline: a peer Lease not found counted dead at once", hDeadline.Sub(d.now))
		}
	}
}

// TestNotSettledBeforeRegistrationsAreRead is defect 8: before the
// registry read its Secrets, the members it lists say nothing of the
// others, and a replica must not count itself settled on them.
func TestNotSettledBeforeRegistrationsAreRead(t *testing.T) {
	d := newDriven(t)
	d.leader = "a"
	a := d.add("a")
	a.members.unsynced = true
	d.step("a")
	d.step("a")
	if a.c.Settled() {
		t.Fatal("settled before the registry read its Secrets")
	}
	a.members.mu.Lock()
	a.members.unsynced, a.members.names = false, []string{"x"}
	a.members.mu.Unlock()
	d.step("a")
	d.step("a")
	if !a.c.Settled() {
		t.Fatal("not settled once every registration is read and assigned")
	}
}

// TestNotSettledOnAFenceAssignedToAReplicaNeverSeen: after a restart the
// fences still name the replica that stopped, whose peer Lease is gone. A
// replica must not count itself settled on them (and say it is ready)
// before the leader has assigned them to replicas that live.
func TestNotSettledOnAFenceAssignedToAReplicaNeverSeen(t *testing.T) {
	d := newDriven(t)
	d.hub.Put(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: FenceName("x"), Namespace: drivenNS,
			Labels:      map[string]string{LabelRole: RoleFence, LabelFenceCluster: "x"},
			Annotations: map[string]string{AnnotationAssignedTo: "old"}},
	})
	a := d.add("a", "x")
	d.step("a")
	d.step("a")
	if a.c.Settled() {
		t.Fatal("settled while x is assigned to a replica whose Lease was never seen")
	}
	d.leader = "a"
	d.step("a")
	d.step("a")
	if f := d.fence("x"); f.assignedTo != "a" {
		t.Fatalf("the leader left x assigned to %q, want a", f.assignedTo)
	}
	if !a.c.Settled() {
		t.Fatal("not settled once the leader assigned x to itself")
	}
}

// TestLeaderDeletesAPeerLeaseOnlyAsSeen is defect 5's second part: the
// leader deletes the peer Leases of replicas dead for long, and a watch
// that stalled shows a live one so; the delete must be conditional on the
// Lease as the leader saw it.
func TestLeaderDeletesAPeerLeaseOnlyAsSeen(t *testing.T) {
	d := newDriven(t)
	d.leader = "l"
	l := d.add("l")
	h := d.add("h")
	d.step("l", "h")
	for range 40 {
		d.advance(2 * time.Second)
		h.c.Renew(context.Background())
		l.c.Renew(context.Background())
		l.c.Reconcile(context.Background()) // its cache shows nothing new
		if d.hub.Get(PeerName("h")) == nil {
			t.Fatal("the leader deleted the peer Lease of a replica that renews, from a stalled watch")
		}
	}
}

// A leader that has not written its own peer Lease yet assigns nothing:
// assigning then would leave itself out, and move its share to it a moment
// later, each member a handover (the 3-replica cold start of the sharding
// issue). Once its Lease is written, it assigns itself its share at once.
func TestTheLeaderAssignsOnlyOnceItsOwnLeaseIsWritten(t *testing.T) {
	d := newDriven(t)
	var names []string
	for i := range 30 {
		names = append(names, fmt.Sprintf("m%d", i))
	}
	d.leader = "a"
	a := d.add("a", names...)
	d.add("b", names...)
	d.add("c", names...)
	d.step("b", "c")
	a.cache.Catch(-1)
	a.c.Reconcile(context.Background()) // before a's first renewal
	for _, n := range names {
		if l := d.hub.Get(FenceName(n)); l != nil {
			t.Fatalf("%s assigned to %q before the leader's own Lease was written", n, fenceOf(l).assignedTo)
		}
	}
	d.step("a", "b", "c")
	d.step("a", "b", "c")
	mine := 0
	for _, n := range names {
		f := d.fence(n)
		if f.assignedTo == "a" {
			mine++
		}
		if f.holder != f.assignedTo {
			t.Errorf("%s held by %q, assigned to %q: a handover where none was needed", n, f.holder, f.assignedTo)
		}
	}
	if mine == 0 {
		t.Errorf("the leader assigned itself none of %d members", len(names))
	}
}

// TestFreeKeepsAFenceReassignedMeanwhile: a holder decided to hand X over
// to B, which said it synced; before its free wrote, the leader gave X to
// E, which has not. The free must read whom X is assigned to now, and keep
// the fence rather than free it to an assignee that is not ready.
func TestFreeKeepsAFenceReassignedMeanwhile(t *testing.T) {
	ctx := context.Background()
	d := newDriven(t)
	x := memberFor("b", "b", "c")
	d.leader = "l"
	l := d.add("l", x)
	d.step("l")
	l.c.BeginDrain(ctx) // leads, takes nothing
	c := d.add("c", x)
	d.step("l", "c")
	d.step("l", "c")
	if f := d.fence(x); f.holder != "c" {
		t.Fatalf("setup: %s held by %q, want c", x, f.holder)
	}
	d.add("b", x)
	for range 4 {
		if f := d.fence(x); f.ready == "b" {
			break
		}
		d.step("l", "b")
	}
	if f := d.fence(x); f.holder != "c" || f.assignedTo != "b" || f.ready != "b" {
		t.Fatalf("setup: %s held by %q, assigned to %q, ready %q; want c, b, b", x, f.holder, f.assignedTo, f.ready)
	}
	// C decides to hand X over; its free has not run yet.
	c.c.Renew(ctx)
	c.cache.Catch(-1)
	c.c.Reconcile(ctx)
	if len(c.frees) != 1 {
		t.Fatalf("setup: c started %d frees, want 1", len(c.frees))
	}
	// The leader gives X to E meanwhile, as assign writes it.
	api := d.hub.Client().CoordinationV1().Leases(drivenNS)
	lease, err := api.Get(ctx, FenceName(x), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lease.Annotations[AnnotationAssignedTo] = "e"
	delete(lease.Annotations, AnnotationReady)
	if _, err := api.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.frees[0]()
	c.frees = nil
	if f := d.fence(x); f.holder != "c" {
		t.Fatalf("%s held by %q, assigned to %q (ready %q): c freed it to an assignee that did not say it synced", x, f.holder, f.assignedTo, f.ready)
	}
	if owns, _ := c.c.Owns(x); !owns {
		t.Fatalf("c holds %s still, but does not own it", x)
	}
}

// TestTakeWithLostAnswerCountsAsHeld: the hub took B's take of X but its
// answer was lost. Until B learns whether it holds X, a drain must count X
// as held: a replica that left holding X at the hub, its peer Lease
// deleted, would leave X unowned for a second lease duration.
func TestTakeWithLostAnswerCountsAsHeld(t *testing.T) {
	ctx := context.Background()
	d := newDriven(t)
	d.leader = "l"
	l := d.add("l", "x")
	d.step("l")
	l.c.BeginDrain(ctx) // leads, takes nothing
	b := d.add("b", "x")
	b.c.Renew(ctx)
	d.step("l")
	if f := d.fence("x"); f.assignedTo != "b" || f.holder != "" {
		t.Fatalf("setup: x assigned to %q, held by %q; want b, nobody", f.assignedTo, f.holder)
	}
	lost := false
	d.hub.After = func(verb, name string) error {
		if verb == "update" && name == FenceName("x") && !lost {
			lost = true
			return apierrors.NewTimeoutError("the answer was lost", 1)
		}
		return nil
	}
	d.step("b")
	d.hub.After = nil
	if f := d.fence("x"); !lost || f.holder != "b" {
		t.Fatalf("setup: x held by %q (answer lost: %v), want b", f.holder, lost)
	}
	if n := b.c.Holding(); n != 1 {
		t.Fatalf("b holds x at the hub but counts %d fences held", n)
	}
	// Once its cache shows the take, b knows and holds x.
	d.step("l", "b")
	if n := b.c.Holding(); n != 1 {
		t.Fatalf("b counts %d fences held after its cache showed x, want 1", n)
	}
	if owns, _ := b.c.Owns("x"); !owns {
		t.Fatal("b does not own x after its cache showed its take")
	}
}
