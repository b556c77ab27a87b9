package sync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	stdsync "sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/leasehub"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/shard"
)

// Sharding fault classes and paths. In a sharded seed two or three replicas
// run at once, each with its own package shard Coordinator (the real one,
// driven step by step) over one in-memory Lease hub (internal/leasehub), on
// the world's virtual clock. The world chooses when each renews, reconciles,
// sees the Lease changes (its watch lag), frees a fence it hands over, and
// which faults strike. The leader Lease is the world's: it goes to a replica
// once the last holder released it or its lease expired.
const (
	exploreSharded          = "sharded seeds"
	faultShardHandover      = "sharding: a fence freed to a synced assignee"
	faultShardBusy          = "sharding: a handover waited for syncs in flight"
	faultShardJoin          = "sharding: a replica joins"
	faultShardLeave         = "sharding: a replica drains and leaves"
	faultShardCrash         = "sharding: a replica crashes"
	faultShardRestart       = "sharding: a replica restarts cold"
	faultShardPause         = "sharding: a replica paused past its deadline, resumed"
	faultShardLag           = "sharding: a Lease watch lags more than a lease duration"
	faultShardLeaseFail     = "sharding: a Lease call fails"
	faultShardLeaseConflict = "sharding: a Lease write conflicts"
	faultShardLeaseLost     = "sharding: a Lease write applied, its answer lost"
	faultShardPeerDeleted   = "sharding: a peer Lease deleted"
	faultShardLeader        = "sharding: the leader Lease changes hands"
	faultShardLeaderMid     = "sharding: the leader changes in the middle of a handover"
	exploreShardTake        = "sharding: a fence taken from a dead holder"
	exploreShardConfirm     = "sharding: a fence confirmed after a lapse"
	exploreShardDeadline    = "sharding: a write refused at its deadline"
	// A→B→A: a member assigned back to a replica that said it was ready
	// for it in an earlier assignment, while another holds it.
	exploreShardBack = "sharding: a member assigned back to an assignee that said ready before (A→B→A)"
)

var shardClasses = []string{exploreSharded, faultShardHandover, faultShardBusy, faultShardJoin, faultShardLeave, faultShardCrash,
	faultShardRestart, faultShardPause, faultShardLag, faultShardLeaseFail, faultShardLeaseConflict, faultShardLeaseLost,
	faultShardPeerDeleted, faultShardLeader, faultShardLeaderMid, exploreShardTake, exploreShardConfirm, exploreShardDeadline, exploreShardBack}

// The timing of the explorer's Leases, and the namespace they live in.
const (
	simLeaseDuration = 15 * time.Second
	simRenewDeadline = 10 * time.Second
	simRetryPeriod   = 2 * time.Second
	simLeaseNS       = "aggregator"
)

var simBudget = shard.RenewBudget(simLeaseDuration, simRenewDeadline)

// shardWorld is the sharding side of a sharded seed: the Lease hub, the
// leader Lease, and what the oracle knows of the Leases without asking the
// coordinators. leases mirrors the hub between steps (every step that
// changes a Lease ends with leaseSettle).
type shardWorld struct {
	hub *leasehub.Hub
	// audit follows every Lease change, in the order the hub took them.
	audit  *leasehub.Cache
	leases map[string]*coordinationv1.Lease
	// renewed is when the hub last took each identity's peer Lease
	// renewal: its writes must end a renew budget later.
	renewed map[string]time.Time
	// lead holds the leader Lease, renewed at leadRenewed; releasing: it
	// stopped merging and releases once its merges in flight are done.
	lead        *replica
	leadRenewed time.Time
	releasing   bool
	everLed     bool
	faults      int // sharding faults left
	// midFaults are the faults left for a handover whose assignee said
	// it is ready (handoverFaults).
	midFaults int
	// quiet is when the last sharding fault or registration change took
	// effect; unowned since when each registered member has had no
	// holder whose deadline holds.
	quiet   time.Time
	unowned map[string]time.Time
	// ready holds the members whose assignee, warm, said it is ready in
	// the fence's current assignment.
	ready map[string]bool
	// saidReady is the replica that last said it was ready for each
	// member, until it takes the member's fence.
	saidReady map[string]string
	err       error // the first failure the oracle found

	// mu guards what the coordinators' parallel calls touch: the Lease
	// faults planned, the tally through them, and the ownership notices.
	mu stdsync.Mutex
	// plan is the fate of a replica's next call on a Lease, by
	// identity/name.
	plan   map[string]string
	caller *replica  // whose coordinator runs now
	task   *freeTask // the handover's free that runs now
	over   bool
	// all are the replicas of the run, crashed or gone too.
	all []*replica
}

// shardReplica is one replica's side of sharding.
type shardReplica struct {
	coord *shard.Coordinator
	cache *leasehub.Cache
	ctx   context.Context
	stop  context.CancelFunc
	// frees are the handovers' frees its coordinator started (Go).
	frees []*freeTask
	// notices are the OwnershipChanged its coordinator said, for its
	// controller once the coordinator's step is over.
	notices []string
	// warm holds the members whose connection synced here since this
	// replica wanted them.
	warm                   map[string]bool
	nextRenew, nextRecon   time.Time
	kicked                 bool
	paused                 bool
	pausedUntil, lagsUntil time.Time
	draining, gaveUp       bool
}

// freeTask is a handover's free: a goroutine parked at each look at Busy
// (Options.Sleep) until the world resumes it.
type freeTask struct {
	r       *replica
	f       func()
	cluster string // of its last look at Busy
	resume  chan struct{}
	back    chan bool // true: parked; false: done
	abort   chan struct{}
	started bool
	parked  bool
	// priming: it runs to its first look at Busy; sleeping: it looked,
	// found syncs in flight, and waits.
	priming, sleeping bool
}

func newShardWorld(faults int) *shardWorld {
	s := &shardWorld{hub: leasehub.New(), leases: map[string]*coordinationv1.Lease{}, renewed: map[string]time.Time{},
		unowned: map[string]time.Time{}, ready: map[string]bool{}, saidReady: map[string]string{}, plan: map[string]string{}, faults: faults, quiet: simEpoch}
	s.audit = s.hub.NewCache()
	return s
}

// startShard makes a sharded seed's replicas after the first: one or two
// more; and, now and then, the fences an earlier replica held when it died.
func (w *world) startShard() error {
	w.tally[exploreSharded]++
	s := w.shard
	s.midFaults = 2 + w.rng.Intn(2)
	s.hub.Before, s.hub.After = w.leaseBefore, w.leaseAfter
	s.audit.Deliver = w.leaseChanged
	if w.rng.Intn(2) == 0 {
		// r0 renewed for the last time as the run starts, then died.
		now := metav1.NewMicroTime(simEpoch)
		s.hub.Put(&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: shard.PeerName("r0"), Namespace: simLeaseNS, Labels: map[string]string{shard.LabelRole: shard.RolePeer}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("r0"), LeaseDurationSeconds: ptr.To(int32(15)),
				AcquireTime: &now, RenewTime: &now}})
		for _, name := range w.order {
			if w.rng.Intn(3) > 0 {
				s.hub.Put(&coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Name: shard.FenceName(name), Namespace: simLeaseNS,
						Labels:      map[string]string{shard.LabelRole: shard.RoleFence, shard.LabelFenceCluster: name},
						Annotations: map[string]string{shard.AnnotationAssignedTo: "r0"}},
					Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("r0"), LeaseDurationSeconds: ptr.To(int32(15))}})
			}
		}
		s.renewed["r0"] = simEpoch
		s.audit.Catch(-1)
	}
	// The first replica was made before the hub's Leases: it lists them.
	w.replica.sh.cache.Restart()
	for i := 1 + w.rng.Intn(2); i > 0; i-- {
		r, err := w.newReplica()
		if err != nil {
			return err
		}
		w.others = append(w.others, r)
	}
	return nil
}

// newShardReplica gives a replica its coordinator, whose Lease cache lists
// the hub as it is now.
func (w *world) newShardReplica(r *replica) {
	s := w.shard
	sr := &shardReplica{warm: map[string]bool{}, nextRenew: w.now, nextRecon: w.now, cache: s.hub.NewCache()}
	sr.ctx, sr.stop = context.WithCancel(context.Background())
	r.sh = sr
	sr.coord = shard.New(s.hub.Client(), shardRegistry{w: w, r: r}, shardSyncer{w: w, r: r}, shard.Options{
		Namespace: simLeaseNS, Identity: r.name,
		LeaseDuration: simLeaseDuration, RenewDeadline: simRenewDeadline, RetryPeriod: simRetryPeriod,
		Leading:       func() bool { ok, _ := w.merging(r); return ok },
		SettleTimeout: simSyncTimeout,
		Now:           func() time.Time { return w.now },
		Cache:         sr.cache.Lister(simLeaseNS),
		Go: func(f func()) {
			s.mu.Lock()
			sr.frees = append(sr.frees, &freeTask{r: r, f: f, resume: make(chan struct{}), back: make(chan bool, 1), abort: make(chan struct{})})
			s.mu.Unlock()
		},
		Sleep: w.freeSleeps,
	})
	sr.cache.Deliver = sr.coord.Observe
	sr.cache.Restart()
	s.all = append(s.all, r)
}

// shardRegistry is one replica's registry, as its coordinator sees it.
type shardRegistry struct {
	w *world
	r *replica
}

func (v shardRegistry) Names() []string     { return v.w.members.Names() }
func (v shardRegistry) SecretsSynced() bool { return v.w.members.SecretsSynced() }

// Warm: its connection synced (or timed out) since this replica wanted the
// member, or cannot be made.
func (v shardRegistry) Warm(cluster string) bool {
	return v.r.sh.warm[cluster] || v.w.disconnected[cluster] != nil
}

// Reconsider drops the connection of a member this replica wants no more;
// one it wants connects in a step of its own (warmSteps).
func (v shardRegistry) Reconsider(cluster string) {
	if !v.r.sh.coord.Wants(cluster) {
		delete(v.r.sh.warm, cluster)
	}
}

// shardSyncer is one replica's controller, as its coordinator sees it: the
// ownership notices wait until the coordinator's step is over (it says
// them from parallel fence writes).
type shardSyncer struct {
	w *world
	r *replica
}

func (v shardSyncer) Busy(cluster string) bool {
	if t := v.w.shard.task; t != nil {
		t.cluster = cluster
		if t.priming {
			// Its first look: the world now knows its member, and
			// parks it until it chooses to go on.
			t.priming = false
			t.park()
		}
	}
	return v.r.ctrl.Busy(cluster)
}

func (v shardSyncer) OwnershipChanged(cluster string) {
	v.w.shard.mu.Lock()
	v.r.sh.notices = append(v.r.sh.notices, cluster)
	v.w.shard.mu.Unlock()
}

func (v shardSyncer) Weight(cluster string) int { return v.r.ctrl.Weight(cluster) }

// shardMembers is one replica's registry, as its controller sees it: Owned
// and OwnedUntil as its coordinator says. A sync's first look is the
// deadline of its writes (the context fenced makes).
type shardMembers struct {
	w *world
	r *replica
}

func (v shardMembers) Lookup(name string) (lifecycle.State, Member) {
	st, m := v.w.members.Lookup(name)
	if st.Registered() {
		owned, until := v.r.sh.coord.Owns(name)
		st.Owned, st.OwnedUntil = st.Owned && owned, until
		if sw := v.w.current; sw != nil && sw.r == v.r && st.Owned {
			if _, ok := sw.until[name]; !ok {
				sw.until[name] = until
			}
		}
	}
	return st, m
}

func (v shardMembers) Names() []string     { return v.w.members.Names() }
func (v shardMembers) SecretsSynced() bool { return v.w.members.SecretsSynced() }

// shardView is one replica's Options.Sharding.
type shardView struct {
	w *world
	r *replica
}

func (v shardView) Merging() (bool, time.Time) {
	ok, until := v.w.merging(v.r)
	if sw := v.w.current; sw != nil && sw.r == v.r && ok && !sw.merging {
		sw.merging, sw.mergeUntil = true, until
	}
	return ok, until
}

func (v shardView) Free(cluster string) bool { return v.r.sh.coord.Free(cluster) }

// merging reports whether r holds the leader Lease and may merge, and
// until when: its last renewal plus the renew budget.
func (w *world) merging(r *replica) (bool, time.Time) {
	s := w.shard
	if s.lead != r || s.releasing {
		return false, time.Time{}
	}
	until := s.leadRenewed.Add(simBudget)
	return w.now.Before(until), until
}

// coordStep runs a step of r's coordinator: its Lease changes are put in
// one order (it writes fences in parallel), the oracle reads them, and its
// controller hears what changed.
func (w *world) coordStep(r *replica, f func(ctx context.Context)) {
	s := w.shard
	from := s.hub.Len()
	s.caller = r
	f(r.sh.ctx)
	s.caller = nil
	s.hub.Sort(from)
	w.primeFrees(r)
	w.leaseSettle()
}

// primeFrees runs the frees r's coordinator just started (in parallel, in
// any order) up to their first look at Busy, and orders them by member, so
// that a seed replays.
func (w *world) primeFrees(r *replica) {
	s := w.shard
	for _, t := range r.sh.frees {
		if t.started {
			continue
		}
		t.started, t.priming = true, true
		go func() {
			<-t.resume
			t.f()
			t.back <- false
		}()
		s.task, s.caller = t, r
		t.resume <- struct{}{}
		t.parked = <-t.back
		s.task, s.caller = nil, nil
	}
	// A free that never looked at Busy is over already.
	r.sh.frees = slices.DeleteFunc(r.sh.frees, func(t *freeTask) bool { return !t.parked })
	sort.SliceStable(r.sh.frees, func(i, j int) bool { return r.sh.frees[i].cluster < r.sh.frees[j].cluster })
}

// park hands the world back its turn until it resumes the free.
func (t *freeTask) park() {
	t.back <- true
	select {
	case <-t.resume:
	case <-t.abort:
	}
}

// leaseSettle lets the oracle read the Lease changes, and tells each
// controller what its coordinator said.
func (w *world) leaseSettle() {
	s := w.shard
	s.audit.Catch(-1)
	for _, r := range w.replicaList() {
		s.mu.Lock()
		notices := r.sh.notices
		r.sh.notices = nil
		s.mu.Unlock()
		sort.Strings(notices)
		for _, c := range slices.Compact(notices) {
			r.ctrl.OwnershipChanged(c)
		}
	}
}

// renew renews r's peer Lease, and with it the leader Lease when it holds
// it. What the hub took is the oracle's own account of r's deadline.
func (w *world) renew(r *replica, f func(ctx context.Context)) {
	s := w.shard
	w.coordStep(r, f)
	r.sh.nextRenew = w.now.Add(simRetryPeriod)
	if l := s.leases[shard.PeerName(r.name)]; l != nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.Time.Equal(w.now) {
		if s.lead == r && !s.releasing && w.now.Before(s.leadRenewed.Add(simBudget)) {
			// Not once its deadline passed: it stopped leading then,
			// and must take the leader Lease again.
			s.leadRenewed = w.now
		}
	}
}

// leaseBefore is the Lease hub's hook ahead of each call: the fault the
// world planned for this replica's next call on this Lease.
func (w *world) leaseBefore(verb, name string) error {
	s := w.shard
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.over {
		return errors.New("injected: the run is over")
	}
	if s.caller == nil {
		return nil
	}
	key := s.caller.name + "/" + name
	fate := s.plan[key]
	switch {
	case fate == "":
		return nil
	case fate == "lost" && verb != "get" && verb != "list":
		return nil // leaseAfter
	case fate == "conflict" && (verb == "update" || verb == "delete"):
		delete(s.plan, key)
		if cur := s.hub.Get(name); cur != nil {
			w.tally[faultShardLeaseConflict]++
			s.hub.Put(cur) // someone else wrote it first
			return nil
		}
	}
	delete(s.plan, key)
	w.tally[faultShardLeaseFail]++
	return apierrors.NewInternalError(fmt.Errorf("injected: %s %s", verb, name))
}

// leaseAfter loses the answer to a write the hub took, when planned so.
func (w *world) leaseAfter(verb, name string) error {
	s := w.shard
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.caller == nil {
		return nil
	}
	key := s.caller.name + "/" + name
	if s.plan[key] != "lost" {
		return nil
	}
	delete(s.plan, key)
	w.tally[faultShardLeaseLost]++
	return apierrors.NewTimeoutError("injected: the answer was lost", 1)
}

// leaseChanged is the oracle on each Lease change, in the hub's order: a
// fence taken from a holder whose deadline holds, or freed by its holder to
// an assignee that has not synced the member, fails the seed.
func (w *world) leaseChanged(l *coordinationv1.Lease, deleted bool) {
	s := w.shard
	prev := s.leases[l.Name]
	if deleted {
		w.log("  lease %s deleted", l.Name)
		delete(s.leases, l.Name)
		return
	}
	s.leases[l.Name] = l
	if id := ptr.Deref(l.Spec.HolderIdentity, ""); l.Labels[shard.LabelRole] == shard.RolePeer && id != "" && renewTime(l).After(s.renewed[id]) {
		// A renewal the hub took, by whichever call (Renew, BeginDrain).
		s.renewed[id] = renewTime(l)
	}
	w.log("  lease %s: holder %q assigned %q ready %q draining %q renewed %s", l.Name, ptr.Deref(l.Spec.HolderIdentity, ""),
		l.Annotations[shard.AnnotationAssignedTo], l.Annotations[shard.AnnotationReady], l.Annotations[shard.AnnotationDraining], renewTime(l).Sub(simEpoch))
	if l.Labels[shard.LabelRole] != shard.RoleFence || prev == nil {
		return
	}
	cluster := l.Labels[shard.LabelFenceCluster]
	was, is := ptr.Deref(prev.Spec.HolderIdentity, ""), ptr.Deref(l.Spec.HolderIdentity, "")
	to := l.Annotations[shard.AnnotationAssignedTo]
	if ready := l.Annotations[shard.AnnotationReady]; ready != "" && ready != prev.Annotations[shard.AnnotationReady] {
		s.saidReady[cluster] = ready
	}
	if is != "" && is == s.saidReady[cluster] {
		delete(s.saidReady, cluster)
	}
	if to != prev.Annotations[shard.AnnotationAssignedTo] && to != "" && to == s.saidReady[cluster] && is != "" && is != to {
		w.tally[exploreShardBack]++
	}
	switch ready := l.Annotations[shard.AnnotationReady]; {
	case to != prev.Annotations[shard.AnnotationAssignedTo] || (is != was && is != ""):
		// A new assignment, or a new holder: readiness is said anew.
		delete(s.ready, cluster)
	case ready != "" && ready != prev.Annotations[shard.AnnotationReady]:
		r := w.replicaNamed(ready)
		s.ready[cluster] = ready == to && r != nil && (shardRegistry{w: w, r: r}).Warm(cluster)
	}
	switch {
	case was != "" && is != "" && was != is:
		w.tally[exploreShardTake]++
		if d := s.renewed[was].Add(simBudget); w.now.Before(d) {
			w.refuse(fmt.Errorf("oracle: %s took the fence of %s from %s, whose deadline holds for %s more", is, cluster, was, d.Sub(w.now)))
		}
	case was != "" && is == "" && to != "" && to != was:
		old, next := w.replicaNamed(was), w.replicaNamed(to)
		if old == nil || next == nil || next.sh.paused || old.sh.gaveUp || !w.registered(cluster) {
			return
		}
		switch {
		case l.Annotations[shard.AnnotationReady] != to || !s.ready[cluster]:
			w.refuse(fmt.Errorf("oracle: %s freed the fence of %s to %s on a readiness not said in this assignment by a synced assignee", was, cluster, to))
		default:
			w.tally[faultShardHandover]++
		}
		delete(s.ready, cluster)
	case was != "" && was == is && !renewTime(prev).Equal(renewTime(l)):
		w.tally[exploreShardConfirm]++
	}
}

func renewTime(l *coordinationv1.Lease) time.Time {
	if l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}

// replicaNamed is the running replica of that identity, nil when none.
func (w *world) replicaNamed(id string) *replica {
	for _, r := range w.replicaList() {
		if r.name == id && !r.crashed {
			return r
		}
	}
	return nil
}

// audit is the oracle's reactor, ahead of the server: a call of a crashed
// replica fails, a write past its sync's deadline is not sent (as its
// context would have it, on the virtual clock), and every write is held to
// the Leases as the hub holds them now.
func (w *world) audit(action clienttesting.Action) (bool, runtime.Object, error) {
	if sw := w.current; sw != nil && sw.r.crashed {
		return true, nil, errors.New("injected: the replica crashed")
	}
	resource := action.GetResource().Resource
	var obj runtime.Object
	switch action.GetVerb() {
	case "create":
		obj = action.(clienttesting.CreateAction).GetObject()
	case "update":
		obj = action.(clienttesting.UpdateAction).GetObject()
	case "delete":
		a := action.(clienttesting.DeleteAction)
		obj, _ = w.srv.get(resource, a.GetNamespace(), a.GetName())
	default:
		return false, nil, nil
	}
	if obj == nil || resource == resourceNamespace {
		return false, nil, nil
	}
	m, err := metaOf(obj)
	if err != nil {
		return false, nil, nil
	}
	k, ok := ownerOf(resource, m)
	if !ok {
		w.refuse(fmt.Errorf("oracle: %s %s %s, which no key owns", action.GetVerb(), resource, objKey(m)))
		return false, nil, nil
	}
	if err := w.checkWrite(k.Cluster, fmt.Sprintf("%s %s %s", action.GetVerb(), resource, objKey(m))); err != nil {
		return true, nil, err
	}
	return false, nil, nil
}

// checkWrite holds one write of cluster's objects ("": the merged ones):
// past the deadline its sync runs under, it is not sent; otherwise its
// replica must hold the member's fence at the hub, within its deadline, or
// for the merged objects (and an unregistered member's, once nobody may
// write them) the leader Lease, within its deadline.
func (w *world) checkWrite(cluster, what string) error {
	sw := w.current
	if sw == nil {
		w.refuse(fmt.Errorf("oracle: %s outside any sync", what))
		return nil
	}
	until := sw.mergeUntil
	if u, ok := sw.until[cluster]; ok && cluster != "" {
		until = u
	}
	if !until.IsZero() && !w.now.Before(until) {
		w.tally[exploreShardDeadline]++
		return fmt.Errorf("injected: %w", context.DeadlineExceeded)
	}
	if err := w.mayWrite(sw.r, cluster); err != nil {
		w.refuse(fmt.Errorf("oracle: %s by %s (sync of %s): %v", what, sw.r.name, sw.key, err))
	}
	return nil
}

func (w *world) mayWrite(r *replica, cluster string) error {
	s := w.shard
	if cluster == "" {
		return w.leads(r)
	}
	holder := ""
	if l := s.leases[shard.FenceName(cluster)]; l != nil {
		holder = ptr.Deref(l.Spec.HolderIdentity, "")
	}
	if holder == r.name {
		if d := s.renewed[r.name].Add(simBudget); !w.now.Before(d) {
			return fmt.Errorf("it holds the fence of %s, but its deadline passed %s ago", cluster, w.now.Sub(d))
		}
		if d := r.sh.coord.Deadline(); !w.now.Before(d) {
			return fmt.Errorf("it holds the fence of %s, but its coordinator's deadline passed %s ago", cluster, w.now.Sub(d))
		}
		return nil
	}
	if w.registered(cluster) {
		return fmt.Errorf("the hub's fence of registered %s is held by %q", cluster, holder)
	}
	if holder != "" && w.now.Before(s.renewed[holder].Add(simBudget)) {
		return fmt.Errorf("unregistered %s's fence is held by %s, whose deadline holds", cluster, holder)
	}
	return w.leads(r)
}

func (w *world) leads(r *replica) error {
	s := w.shard
	switch {
	case s.lead != r:
		return fmt.Errorf("it does not hold the leader Lease (%s does)", nameOf(s.lead))
	case !w.now.Before(s.leadRenewed.Add(simBudget)):
		return fmt.Errorf("its leader Lease's deadline passed %s ago", w.now.Sub(s.leadRenewed.Add(simBudget)))
	}
	return nil
}

func (w *world) refuse(err error) {
	if w.shard.err == nil {
		w.shard.err = err
	}
}

// auditStatus is the oracle on a ServiceExport status write to cluster.
func (w *world) auditStatus(cluster string) error {
	if sw := w.current; sw != nil && sw.r.crashed {
		return errors.New("injected: the replica crashed")
	}
	return w.checkWrite(cluster, "ServiceExport status write of "+cluster)
}

func (w *world) registered(cluster string) bool {
	st, _ := w.members.Lookup(cluster)
	return st.Registered()
}

// running are the replicas that run, paused or not.
func (w *world) running() []*replica {
	return slices.DeleteFunc(w.replicaList(), func(r *replica) bool { return r.crashed })
}

// live are the replicas that run, are not paused and do not drain.
func (w *world) live() []*replica {
	return slices.DeleteFunc(w.running(), func(r *replica) bool { return r.sh.paused || r.sh.draining })
}

// shardSteps are the sharding steps enabled now: each replica's upkeep
// (renewals, reconciles, its watch, its frees, its connections), the
// recoveries, and faults now and then. Upkeep steps are named "lease: ".
func (w *world) shardSteps() []step {
	s := w.shard
	var out []step
	for _, r := range w.running() {
		out = append(out, w.upkeepSteps(r)...)
	}
	out = append(out, w.leaderSteps()...)
	if w.started && s.faults > 0 && w.rng.Intn(6) == 0 {
		for _, f := range w.shardFaults() {
			out = append(out, step{f.name, func() { s.faults--; s.quiet = maxTime(s.quiet, w.now); f.do() }})
		}
	} else if w.started && s.midFaults > 0 && w.rng.Intn(4) == 0 {
		for _, f := range w.handoverFaults() {
			out = append(out, step{f.name, func() {
				s.midFaults--
				s.quiet = maxTime(s.quiet, w.now)
				f.do()
			}})
		}
	}
	return out
}

// upkeepSteps are one replica's own steps.
func (w *world) upkeepSteps(r *replica) []step {
	sr := w.shard
	h := r.sh
	if h.paused {
		if !w.now.Before(h.pausedUntil) {
			return []step{{r.name + " resumes", func() {
				h.paused, h.kicked = false, true
				sr.quiet = maxTime(sr.quiet, w.now)
			}}}
		}
		return nil
	}
	var out []step
	if !w.now.Before(h.nextRenew) {
		out = append(out, step{"lease: " + r.name + " renews", func() { w.renew(r, h.coord.Renew) }})
	}
	if h.kicked || !w.now.Before(h.nextRecon) {
		out = append(out, step{"lease: " + r.name + " reconciles", func() {
			h.kicked, h.nextRecon = false, w.now.Add(simRetryPeriod)
			w.coordStep(r, h.coord.Reconcile)
		}})
	}
	if n := h.cache.Behind(); n > 0 && !w.now.Before(h.lagsUntil) {
		out = append(out, step{"lease: " + r.name + "'s watch delivers", func() {
			k := n
			if w.rng.Intn(2) == 0 {
				k = 1 + w.rng.Intn(n)
			}
			h.cache.Catch(k)
			h.kicked = true
		}})
	}
	for _, t := range h.frees {
		if t.sleeping && r.ctrl.Busy(t.cluster) {
			continue
		}
		out = append(out, step{r.name + " frees a fence it hands over", func() { w.runFree(t) }})
	}
	for _, c := range w.members.Names() {
		if h.coord.Wants(c) && !h.warm[c] && w.connectable(c) {
			out = append(out, step{r.name + "'s connection to " + c + " syncs", func() {
				h.warm[c], h.kicked = true, true
			}})
		}
	}
	if h.draining {
		if len(slices.DeleteFunc(w.live(), func(o *replica) bool { return o == r })) == 0 && !h.gaveUp {
			out = append(out, step{r.name + " drains, alone: gives up its members", func() { h.gaveUp = true; h.coord.GiveUp(); h.kicked = true }})
		}
		if h.coord.Holding() == 0 && len(h.frees) == 0 {
			out = append(out, step{r.name + " exits, having handed everything over", func() { w.leave(r) }})
		}
	}
	return out
}

// connectable: a member whose connection would sync (or time out) now.
func (w *world) connectable(c string) bool {
	m := w.members.members[c]
	return m != nil && (m.listed || m.timedOut)
}

// runFree runs a handover's free until it parks at its next look at Busy,
// or ends.
func (w *world) runFree(t *freeTask) {
	s := w.shard
	from := s.hub.Len()
	s.caller, s.task = t.r, t
	t.resume <- struct{}{}
	t.parked = <-t.back
	t.sleeping = t.parked
	s.caller, s.task = nil, nil
	if !t.parked {
		t.r.sh.frees = slices.DeleteFunc(t.r.sh.frees, func(o *freeTask) bool { return o == t })
		t.r.sh.kicked = true
	}
	s.hub.Sort(from)
	w.leaseSettle()
}

// freeSleeps is Options.Sleep: the free waits for the world.
func (w *world) freeSleeps(time.Duration) {
	w.tally[faultShardBusy]++
	w.shard.task.park()
}

// leaderSteps hand the leader Lease on: released once its holder's merges
// are done, or taken once it expired.
func (w *world) leaderSteps() []step {
	s := w.shard
	var out []step
	if s.lead != nil && s.releasing && (!s.lead.ctrl.Busy("") || !w.now.Before(s.leadRenewed.Add(simBudget))) {
		out = append(out, step{s.lead.name + " releases the leader Lease", func() { w.releaseLead() }})
	}
	free := s.lead == nil || !w.now.Before(s.leadRenewed.Add(simLeaseDuration))
	// A leader that did not renew within its deadline stopped leading; it
	// holds the leader Lease still, and takes it again at once.
	lapsed := s.lead != nil && !s.releasing && !w.now.Before(s.leadRenewed.Add(simBudget))
	for _, r := range w.live() {
		switch {
		case free && r != s.lead:
			out = append(out, step{r.name + " takes the leader Lease", func() { w.takeLead(r) }})
		case lapsed && r == s.lead:
			// A leader late to renew is upkeep, not news: a run where
			// only that recurs is quiet.
			out = append(out, step{"lease: " + r.name + " takes the leader Lease again", func() { w.takeLead(r) }})
		}
	}
	return out
}

func (w *world) releaseLead() {
	s := w.shard
	old := s.lead
	s.lead, s.releasing = nil, false
	if !old.crashed {
		old.ctrl.OwnershipChanged("")
	}
}

func (w *world) takeLead(r *replica) {
	s := w.shard
	if s.everLed && s.lead != r {
		w.tally[faultShardLeader]++
		if w.handoverUnderWay() {
			w.tally[faultShardLeaderMid]++
		}
	}
	old := s.lead
	s.lead, s.leadRenewed, s.releasing, s.everLed = r, w.now, false, true
	if old != nil && !old.crashed {
		old.ctrl.OwnershipChanged("")
	}
	r.ctrl.OwnershipChanged("")
	r.sh.kicked = true
}

// handoverUnderWay: a fence is held by one replica and assigned to
// another, or free and assigned.
func (w *world) handoverUnderWay() bool {
	for _, l := range w.shard.leases {
		if l.Labels[shard.LabelRole] != shard.RoleFence {
			continue
		}
		to, holder := l.Annotations[shard.AnnotationAssignedTo], ptr.Deref(l.Spec.HolderIdentity, "")
		if to != "" && to != holder {
			return true
		}
	}
	return false
}

// shardFaults are the sharding faults that could strike now.
func (w *world) shardFaults() []step {
	s := w.shard
	var out []step
	live := w.live()
	if len(w.running()) < 4 {
		out = append(out, step{"sharding: a replica joins", func() { w.join() }})
	}
	if s.lead != nil && !s.releasing && !s.lead.crashed && !s.lead.sh.paused {
		out = append(out, step{"sharding: " + s.lead.name + " stops leading", func() {
			s.releasing = true
			s.lead.ctrl.OwnershipChanged("")
		}})
	}
	for _, r := range live {
		h := r.sh
		others := len(live) > 1
		out = append(out, step{"sharding: " + r.name + " pauses past its deadline", func() {
			w.tally[faultShardPause]++
			h.paused = true
			h.pausedUntil = maxTime(w.now, h.coord.Deadline()).Add(time.Second + time.Duration(w.rng.Int63n(int64(simLeaseDuration))))
		}})
		out = append(out, step{"sharding: " + r.name + "'s Lease watch stalls", func() { w.stall(r) }})
		// Weighed up: a planned fault fires only on the Lease's next call.
		plan := step{"sharding: a Lease call of " + r.name + " will fail", func() { w.planLeaseFault(r) }}
		out = append(out, plan, plan)
		if s.leases[shard.PeerName(r.name)] != nil {
			out = append(out, step{"sharding: someone deletes " + r.name + "'s peer Lease", func() {
				w.tally[faultShardPeerDeleted]++
				s.hub.Delete(shard.PeerName(r.name))
				w.leaseSettle()
			}})
		}
		if others {
			out = append(out, step{"sharding: " + r.name + " crashes", func() { w.crash(r) }})
			out = append(out, step{"sharding: " + r.name + " restarts cold", func() {
				w.tally[faultShardRestart]++
				w.crash(r)
				w.join()
			}})
			out = append(out, step{"sharding: " + r.name + " drains to leave", func() {
				h.draining, h.kicked = true, true
				w.coordStep(r, h.coord.BeginDrain)
			}})
		}
	}
	for _, r := range w.running() {
		if h := r.sh; h.draining && !h.gaveUp && !h.paused {
			out = append(out, step{"sharding: " + r.name + "'s shutdown timeout nears: gives up", func() {
				h.gaveUp, h.kicked = true, true
				h.coord.GiveUp()
			}})
		}
	}
	return out
}

// stall holds r's Lease watch back for more than a lease duration.
func (w *world) stall(r *replica) {
	w.tally[faultShardLag]++
	r.sh.lagsUntil = w.now.Add(simLeaseDuration + time.Duration(w.rng.Int63n(int64(10*time.Second))))
	w.shard.quiet = maxTime(w.shard.quiet, r.sh.lagsUntil)
}

// planLeaseFault plans the fate of r's next call on one of the Leases it
// writes: it fails, conflicts with someone else's write, or is applied with
// its answer lost.
func (w *world) planLeaseFault(r *replica) {
	names := []string{shard.PeerName(r.name)}
	for _, c := range w.members.Names() {
		names = append(names, shard.FenceName(c))
	}
	fates := []string{"fail", "conflict", "lost"}
	s := w.shard
	s.mu.Lock()
	s.plan[r.name+"/"+names[w.rng.Intn(len(names))]] = fates[w.rng.Intn(len(fates))]
	s.mu.Unlock()
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// join starts a replica, cold: its caches list what is there now.
func (w *world) join() {
	r, err := w.newReplica()
	if err != nil {
		w.refuse(err)
		return
	}
	w.tally[faultShardJoin]++
	w.others = append(w.others, r)
}

// leave ends a drained replica: its last syncs finish, its peer Lease
// goes, and the leader Lease with it.
func (w *world) leave(r *replica) {
	w.tally[faultShardLeave]++
	w.drainWorkers(r)
	w.coordStep(r, r.sh.coord.Leave)
	for _, name := range sortedKeysOf(w.shard.leases) {
		if l := w.shard.leases[name]; l.Labels[shard.LabelRole] == shard.RoleFence && ptr.Deref(l.Spec.HolderIdentity, "") == r.name {
			// Its peer Lease is gone: the others would count it alive a
			// lease duration more, and the member unowned meanwhile.
			w.refuse(fmt.Errorf("oracle: %s left while the hub names it the holder of %s's fence", r.name, l.Labels[shard.LabelFenceCluster]))
		}
	}
	if w.shard.lead == r {
		w.releaseLead()
	}
	w.dropReplica(r)
	w.retire(r)
	r.sh.stop()
}

// crash stops r at once: its in-flight syncs write nothing more (every
// call fails); its Leases stay as they are, for the others to find dead.
func (w *world) crash(r *replica) {
	w.tally[faultShardCrash]++
	r.crashed = true
	if w.shard.leases[shard.PeerName(r.name)] == nil {
		// Its peer Lease was deleted and not made again: a replica that
		// never saw it counts it alive a lease duration from its own
		// start, then absent for a lease duration more.
		w.shard.quiet = maxTime(w.shard.quiet, w.now.Add(simLeaseDuration))
	}
	w.drainWorkers(r)
	w.dropReplica(r)
	w.retire(r)
	r.sh.stop()
	w.shard.mu.Lock()
	r.sh.notices = nil
	w.shard.mu.Unlock()
}

// dropReplica takes r out of the running replicas; the next one stands in
// for the world's own when r was it.
func (w *world) dropReplica(r *replica) {
	if r == w.leader {
		w.leader, w.others = w.others[0], w.others[1:]
		w.replica = w.leader
		return
	}
	w.others = slices.DeleteFunc(w.others, func(o *replica) bool { return o == r })
}

// shardUnregistered: the coordinators reconsider a member just
// unregistered.
func (w *world) shardUnregistered(string) { w.shardKick() }

func (w *world) shardKick() {
	if w.shard == nil {
		return
	}
	w.shard.quiet = maxTime(w.shard.quiet, w.now)
	for _, r := range w.running() {
		r.sh.kicked = true
	}
}

// checkOwners is the liveness oracle after each step: once the world is
// quiet (a lease duration after the last fault took effect: by then every
// replica sees the dead as dead), no registered member goes without a
// holder whose deadline holds for longer than a lease duration. While no
// replica is live (every one crashed, paused or draining), nobody can own
// a member: the world is not quiet then.
func (w *world) checkOwners() {
	s := w.shard
	if len(w.live()) == 0 {
		s.quiet = maxTime(s.quiet, w.now)
	}
	names := w.members.Names()
	for c := range s.unowned {
		if !slices.Contains(names, c) {
			delete(s.unowned, c)
		}
	}
	for _, c := range names {
		if w.ownedAtHub(c) {
			delete(s.unowned, c)
			continue
		}
		since, ok := s.unowned[c]
		if !ok {
			s.unowned[c] = w.now
			continue
		}
		if gap := w.now.Sub(maxTime(since, s.quiet.Add(simLeaseDuration))); gap > simLeaseDuration {
			w.refuse(fmt.Errorf("oracle: member %s has had no owner for %s (since %s) after the world was quiet (since %s)",
				c, w.now.Sub(since), since.Sub(simEpoch), s.quiet.Add(simLeaseDuration).Sub(simEpoch)))
		}
	}
}

// ownedAtHub: the member's fence is held by a running replica whose
// deadline holds.
func (w *world) ownedAtHub(c string) bool {
	l := w.shard.leases[shard.FenceName(c)]
	if l == nil {
		return false
	}
	h := w.replicaNamed(ptr.Deref(l.Spec.HolderIdentity, ""))
	return h != nil && w.now.Before(w.shard.renewed[h.name].Add(simBudget))
}

// shardSettled: nothing of sharding is under way; every registered member
// is held by its assignee, which owns it, and by nobody else.
func (w *world) shardSettled() error {
	s := w.shard
	if s.lead == nil || s.releasing || !w.now.Before(s.leadRenewed.Add(simBudget)) {
		return fmt.Errorf("no leader (%s, releasing %v)", nameOf(s.lead), s.releasing)
	}
	for _, r := range w.running() {
		h := r.sh
		switch {
		case h.paused || h.draining:
			return fmt.Errorf("%s paused or draining", r.name)
		case len(h.frees) > 0:
			return fmt.Errorf("%s has frees pending", r.name)
		case h.cache.Behind() > 0:
			return fmt.Errorf("%s's Lease cache is behind", r.name)
		}
	}
	names := w.members.Names()
	for _, name := range sortedKeysOf(s.leases) {
		l := s.leases[name]
		if c := l.Labels[shard.LabelFenceCluster]; l.Labels[shard.LabelRole] == shard.RoleFence && !slices.Contains(names, c) {
			return fmt.Errorf("unregistered %s still has a fence", c)
		}
	}
	for _, c := range names {
		l := s.leases[shard.FenceName(c)]
		if l == nil {
			return fmt.Errorf("member %s has no fence", c)
		}
		holder, to := ptr.Deref(l.Spec.HolderIdentity, ""), l.Annotations[shard.AnnotationAssignedTo]
		if holder == "" || holder != to {
			return fmt.Errorf("member %s held by %q, assigned to %q", c, holder, to)
		}
		var owners []string
		for _, r := range w.running() {
			if ok, _ := r.sh.coord.Owns(c); ok {
				owners = append(owners, r.name)
			}
		}
		if len(owners) != 1 || owners[0] != holder {
			return fmt.Errorf("member %s held by %s at the hub, owned by %v", c, holder, owners)
		}
	}
	return nil
}

// shardQuiescent checks, once the run is quiet, that every registered
// member has exactly one owner.
func (w *world) shardQuiescent() error {
	if err := w.shardSettled(); err != nil {
		return fmt.Errorf("quiescent with sharding unsettled: %v", err)
	}
	return nil
}

// flushKicks runs the reconcile each replica owes what its cache last
// showed, as the real one does at once; true if it ran any. A run is not
// over while one is owed: a replica that learns there that it lost a
// member still has that member's state to drop.
func (w *world) flushKicks() bool {
	ran := false
	for _, r := range w.running() {
		if h := r.sh; h.kicked && !h.paused {
			w.log("lease: %s reconciles", r.name)
			h.kicked, h.nextRecon = false, w.now.Add(simRetryPeriod)
			w.coordStep(r, h.coord.Reconcile)
			ran = true
		}
	}
	return ran
}

// shardUpkeepOnly: every step enabled is a replica's lease upkeep or the
// clock, and sharding is settled: the run is as quiet as a sharded one gets.
func (w *world) shardUpkeepOnly(steps []step) bool {
	for _, s := range steps {
		if !isUpkeep(s.name) && !isClock(s.name) {
			return false
		}
	}
	return w.shardSettled() == nil
}

func isUpkeep(name string) bool { return len(name) > 7 && name[:7] == "lease: " }
func isClock(name string) bool  { return len(name) > 5 && name[:5] == "clock" }

// shardDue is when the next upkeep of a replica is due.
func (w *world) shardDue() (time.Time, bool) {
	var due time.Time
	ok := false
	for _, r := range w.running() {
		h := r.sh
		for _, at := range []time.Time{h.nextRenew, h.nextRecon, h.lagsUntil, h.pausedUntil} {
			if at.After(w.now) && (!ok || at.Before(due)) {
				due, ok = at, true
			}
		}
	}
	if s := w.shard; s.lead != nil {
		if at := s.leadRenewed.Add(simLeaseDuration); at.After(w.now) && (!ok || at.Before(due)) {
			due, ok = at, true
		}
	}
	return due, ok
}

// shardWorkerSteps are a non-leading replica's own steps in a sharded seed:
// it starts, then runs its workers.
func (w *world) shardWorkerSteps(r *replica) []step {
	switch {
	case r.started:
		return w.workerSteps(r)
	case w.members.synced:
		return []step{{r.name + ": controller starts", func() { r.started = true; r.ctrl.begin() }}}
	}
	return nil
}

// stopShard ends the run's parked frees: each gives up (every call fails).
func (w *world) stopShard() {
	s := w.shard
	s.mu.Lock()
	s.over = true
	s.mu.Unlock()
	for _, r := range s.all {
		r.sh.stop()
		for _, t := range r.sh.frees {
			if t.started {
				close(t.abort)
			}
		}
	}
}

func sortedKeysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func nameOf(r *replica) string {
	if r == nil {
		return "nobody"
	}
	return r.name
}

// handoverFaults strike a handover under way: its assignee pauses past
// its lease duration, so that the leader gives the member to another and,
// once it resumes, back to it.
func (w *world) handoverFaults() []step {
	var out []step
	for _, name := range sortedKeysOf(w.shard.leases) {
		l := w.shard.leases[name]
		if l.Labels[shard.LabelRole] != shard.RoleFence {
			continue
		}
		to, holder := l.Annotations[shard.AnnotationAssignedTo], ptr.Deref(l.Spec.HolderIdentity, "")
		r := w.replicaNamed(to)
		if holder == "" || to == holder || l.Annotations[shard.AnnotationReady] != to || r == nil || r.sh.paused || r.sh.draining {
			continue
		}
		if hr := w.replicaNamed(holder); hr != nil && !hr.sh.paused && !w.now.Before(hr.sh.lagsUntil) {
			out = append(out, step{"sharding: " + holder + "'s Lease watch stalls while it hands over", func() { w.stall(hr) }})
		}
		h := r.sh
		out = append(out, step{"sharding: " + r.name + ", an assignee, pauses past its lease", func() {
			w.tally[faultShardPause]++
			h.paused = true
			h.pausedUntil = maxTime(w.now, h.coord.Deadline()).Add(simLeaseDuration - simBudget + time.Second + time.Duration(w.rng.Int63n(int64(simLeaseDuration))))
		}})
	}
	return out
}
