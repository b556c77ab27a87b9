package sync

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

// Sharding fault classes and paths. In a sharded seed two or three replicas
// run at once and share the members as package shard shares them: a sim
// fence per member stands in for the fence Leases, and the merging replica
// for the leader.
const (
	exploreSharded     = "sharded seeds"
	faultShardHandover = "sharding: a member handed over gracefully"
	faultShardBusy     = "sharding: a handover waited for syncs in flight"
	faultShardJoin     = "sharding: a replica joins and takes members"
	faultShardLeave    = "sharding: a replica drains and leaves"
	faultShardCrash    = "sharding: a replica crashes, its members taken at once"
	faultShardMerger   = "sharding: the merging role moves"
	faultShardLapse    = "sharding: a fence lapses with a sync in flight"
	exploreShardTake   = "sharding: a lapsed fence taken over"
	exploreShardRenew  = "sharding: a lapsed fence confirmed by its holder"
	// A sync that started owning its member wrote after that changed.
	exploreShardReleaseWrite = "sharding: a sync wrote while its member was handed over"
	exploreShardLapseWrite   = "sharding: a sync wrote after its fence lapsed"
)

var shardClasses = []string{exploreSharded, faultShardHandover, faultShardBusy, faultShardJoin, faultShardLeave, faultShardCrash,
	faultShardMerger, faultShardLapse, exploreShardTake, exploreShardRenew, exploreShardReleaseWrite, exploreShardLapseWrite}

// simShard is the sim fence model: who holds each member's fence, who
// merges, and the handovers under way.
type simShard struct {
	// holder is each member's fence holder; a member without one is free.
	holder map[string]*replica
	// moves are the graceful handovers under way, by member ("": the
	// merging role); a move to nil frees the fence.
	moves map[string]*simMove
	// lapsed: the holder's deadline passed; nobody took the fence yet.
	lapsed map[string]bool
	// freed: unregistered members whose fence is free and that the
	// merger has not deleted yet.
	freed map[string]bool
	// gen counts each member's fence changes; handed, the last change in
	// which each replica handed the member over gracefully.
	gen     map[string]int
	handed  map[string]map[*replica]int
	merger  *replica
	leaving map[*replica]bool
	faults  int   // sharding faults left
	err     error // the first write the oracle refused
}

type simMove struct {
	from, to *replica
	waited   bool // it waited for a sync in flight
}

func newSimShard(faults int) *simShard {
	return &simShard{holder: map[string]*replica{}, moves: map[string]*simMove{}, lapsed: map[string]bool{},
		freed: map[string]bool{}, gen: map[string]int{}, handed: map[string]map[*replica]int{}, leaving: map[*replica]bool{}, faults: faults}
}

// merging reports whether r writes the merged objects now.
func (s *simShard) merging(r *replica) bool { return s.merger == r && s.moves[""] == nil }

// holds reports whether r may write a registered member's objects now, as
// its coordinator's Owns would: it holds the fence, is not handing it over,
// and its deadline holds.
func (s *simShard) holds(r *replica, cluster string) bool {
	return s.holder[cluster] == r && s.moves[cluster] == nil && !s.lapsed[cluster]
}

// shardMembers is one replica's registry: Owned only for the members whose
// fence it holds.
type shardMembers struct {
	w *world
	r *replica
}

func (v shardMembers) Lookup(name string) (lifecycle.State, Member) {
	st, m := v.w.members.Lookup(name)
	st.Owned = st.Registered() && v.w.shard.holds(v.r, name)
	return st, m
}

func (v shardMembers) Names() []string     { return v.w.members.Names() }
func (v shardMembers) SecretsSynced() bool { return v.w.members.SecretsSynced() }

// simSharding is one replica's Options.Sharding.
type simSharding struct {
	w *world
	r *replica
}

func (s simSharding) Merging() (bool, time.Time) { return s.w.shard.merging(s.r), time.Time{} }
func (s simSharding) Free(cluster string) bool   { return s.w.shard.holder[cluster] == nil }

// simGrant is what a replica might write when one of its syncs started:
// the members it owned, at which fence change, and whether it merged.
type simGrant struct {
	members map[string]bool
	gen     map[string]int
	merging bool
}

func (w *world) grant(r *replica) simGrant {
	g := simGrant{members: map[string]bool{}, gen: maps.Clone(w.shard.gen), merging: w.shard.merging(r)}
	for _, c := range append(slices.Clone(simClusters), "gone") {
		if w.registered(c) {
			g.members[c] = w.shard.holds(r, c)
		} else {
			g.members[c] = g.merging && w.shard.holder[c] == nil
		}
	}
	return g
}

func (w *world) registered(cluster string) bool {
	st, _ := w.members.Lookup(cluster)
	return st.Registered()
}

// newShardWorld makes a sharded seed's replicas after the first: one or
// two more, the fences held by one of them or free, and a merger.
func (w *world) newShardWorld() error {
	w.tally[exploreSharded]++
	for i := 1 + w.rng.Intn(2); i > 0; i-- {
		r, err := w.newReplica()
		if err != nil {
			return err
		}
		w.others = append(w.others, r)
	}
	all := w.replicaList()
	for _, name := range w.order {
		if w.rng.Intn(4) > 0 {
			w.shard.holder[name] = all[w.rng.Intn(len(all))]
		}
	}
	w.shard.merger = all[w.rng.Intn(len(all))]
	return nil
}

// audit is the oracle's reactor, ahead of the server: a call of a crashed
// replica fails, and every write is held to its sync's grant.
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
	w.checkWrite(k.Cluster, fmt.Sprintf("%s %s %s", action.GetVerb(), resource, objKey(m)))
	return false, nil, nil
}

// checkWrite holds one write of cluster's objects ("": the merged ones) to
// the grant of the sync it belongs to: the replica must have owned them
// when that sync started, and merged objects only the merger writes.
func (w *world) checkWrite(cluster, what string) {
	sw := w.current
	s := w.shard
	switch {
	case sw == nil:
		w.refuse(fmt.Errorf("oracle: %s outside any sync", what))
	case cluster == "" && !sw.grant.merging:
		w.refuse(fmt.Errorf("oracle: %s by %s, whose sync of %s started while it did not merge", what, sw.name, sw.key))
	case cluster == "" && s.merger != sw.r:
		w.refuse(fmt.Errorf("oracle: %s by %s, which no longer merges (%s does)", what, sw.name, s.merger.name))
	case cluster == "":
	case !sw.grant.members[cluster]:
		w.refuse(fmt.Errorf("oracle: %s by %s, whose sync of %s started while it did not own %s", what, sw.name, sw.key, cluster))
	case s.handed[cluster][sw.r] > sw.grant.gen[cluster]:
		// The handover waited for Busy: no sync of it was in flight.
		w.refuse(fmt.Errorf("oracle: %s by %s, whose sync of %s started before it handed %s over", what, sw.name, sw.key, cluster))
	case s.lapsed[cluster] || (w.registered(cluster) && s.holder[cluster] != sw.r):
		w.tally[exploreShardLapseWrite]++
	case s.moves[cluster] != nil:
		w.tally[exploreShardReleaseWrite]++
	}
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
	w.checkWrite(cluster, "ServiceExport status write of "+cluster)
	return nil
}

// live are the replicas running and not leaving.
func (w *world) live() []*replica {
	return slices.DeleteFunc(w.replicaList(), func(r *replica) bool { return w.shard.leaving[r] })
}

// pick is a random live replica other than not; nil when there is none.
func (w *world) pick(not *replica) *replica {
	rs := slices.DeleteFunc(w.live(), func(r *replica) bool { return r == not })
	if len(rs) == 0 {
		return nil
	}
	return rs[w.rng.Intn(len(rs))]
}

// shardSteps are the sharding steps enabled now: those that finish what is
// under way always, faults now and then.
func (w *world) shardSteps() []step {
	out := w.shardRecoveries()
	if w.started && w.shard.faults > 0 && w.rng.Intn(6) == 0 {
		for _, s := range w.shardFaults() {
			out = append(out, step{s.name, func() { w.shard.faults--; s.do() }})
		}
	}
	return out
}

// shardRecoveries take free fences, finish handovers and lapses, drain the
// replicas that leave and delete the fences of unregistered members.
func (w *world) shardRecoveries() []step {
	s := w.shard
	var out []step
	for _, c := range w.members.Names() {
		if s.holder[c] == nil && s.moves[c] == nil {
			out = append(out, step{"sharding: the free fence of " + c + " taken", func() { w.take(c) }})
		}
	}
	for _, c := range sortedKeysOf(s.moves) {
		mv := s.moves[c]
		if mv.from.ctrl.Busy(c) {
			mv.waited = true
			continue
		}
		out = append(out, step{fmt.Sprintf("sharding: %s hands %s over to %s", mv.from.name, roleName(c), nameOf(mv.to)), func() { w.completeMove(c) }})
	}
	for _, c := range sortedKeysOf(s.lapsed) {
		old := s.holder[c]
		if w.pick(old) != nil {
			// Taken over more often than confirmed: that is the fault.
			take := step{fmt.Sprintf("sharding: %s's lease expired; %s taken over", old.name, c), func() { w.takeOver(c) }}
			out = append(out, take, take)
		}
		out = append(out, step{fmt.Sprintf("sharding: %s renews and confirms %s", old.name, c), func() { w.confirm(c) }})
	}
	for _, r := range w.replicaList() {
		if s.leaving[r] {
			out = append(out, w.drainSteps(r)...)
		}
	}
	if s.merger != nil && s.moves[""] == nil {
		for _, c := range sortedKeysOf(s.freed) {
			out = append(out, step{"sharding: the merger deletes the free fence of " + c, func() {
				delete(s.freed, c)
				s.merger.ctrl.OwnershipChanged(c)
			}})
		}
	}
	return out
}

// shardFaults are the sharding faults that could start now.
func (w *world) shardFaults() []step {
	s := w.shard
	var out []step
	for _, c := range w.members.Names() {
		from := s.holder[c]
		if from == nil || !s.holds(from, c) || s.leaving[from] {
			continue
		}
		to := w.pick(from)
		if to == nil {
			continue // nobody to hand it to, or to take it over
		}
		out = append(out, step{fmt.Sprintf("sharding: %s starts handing %s over to %s", from.name, c, to.name), func() {
			w.tally[faultShardHandover]++
			w.startMove(c, from, to)
		}})
		if from.ctrl.Busy(c) {
			// Weighed up: a sync must be in flight right now.
			lapse := step{fmt.Sprintf("sharding: %s's fence of %s lapses while it writes", from.name, c), func() {
				w.tally[faultShardLapse]++
				s.lapsed[c] = true
			}}
			out = append(out, lapse, lapse)
		}
	}
	if m := s.merger; s.moves[""] == nil && !s.leaving[m] {
		if to := w.pick(m); to != nil {
			out = append(out, step{fmt.Sprintf("sharding: %s hands the merging role to %s", m.name, to.name), func() {
				w.tally[faultShardMerger]++
				w.startMove("", m, to)
			}})
		}
	}
	live := w.live()
	if len(live) < 3 {
		out = append(out, step{"sharding: a replica joins", w.join})
	}
	for _, r := range w.replicaList() {
		if len(slices.DeleteFunc(slices.Clone(live), func(o *replica) bool { return o == r })) == 0 {
			continue // nobody to hand its members to
		}
		if !s.leaving[r] {
			out = append(out, step{"sharding: " + r.name + " drains to leave", func() { w.drain(r) }})
		}
		out = append(out, step{"sharding: " + r.name + " crashes", func() { w.crash(r) }})
	}
	return out
}

// take gives a free fence to a live replica, which resyncs the member.
func (w *world) take(c string) {
	w.setHolder(c, w.pick(nil))
	w.shard.holder[c].ctrl.OwnershipChanged(c)
}

// startMove starts a graceful handover: the holder stops taking the
// member's keys (Owned false) and its in-flight syncs go on.
func (w *world) startMove(c string, from, to *replica) {
	w.shard.moves[c] = &simMove{from: from, to: to}
	if c != "" {
		from.ctrl.OwnershipChanged(c)
	}
}

// completeMove ends a handover once the old holder has no sync of the
// member in flight: the fence moves (or is freed, for a member since
// unregistered), and both replicas are told.
func (w *world) completeMove(c string) {
	s := w.shard
	mv := s.moves[c]
	delete(s.moves, c)
	if mv.waited {
		w.tally[faultShardBusy]++
	}
	if c == "" {
		s.merger = mv.to
		mv.from.ctrl.OwnershipChanged("")
		mv.to.ctrl.OwnershipChanged("")
		return
	}
	w.setHolder(c, mv.to)
	if s.handed[c] == nil {
		s.handed[c] = map[*replica]int{}
	}
	s.handed[c][mv.from] = s.gen[c]
	mv.from.ctrl.OwnershipChanged(c)
	if h := s.holder[c]; h != nil {
		h.ctrl.OwnershipChanged(c)
	}
}

// setHolder gives a member's fence to r; an unregistered member's fence is
// freed instead, for the merger to delete.
func (w *world) setHolder(c string, r *replica) {
	w.shard.gen[c]++
	if r == nil || !w.registered(c) {
		delete(w.shard.holder, c)
		if !w.registered(c) {
			w.shard.freed[c] = true
		}
		return
	}
	w.shard.holder[c] = r
}

// takeOver gives a lapsed fence to another replica without waiting: the
// old holder's in-flight syncs may still write, as its deadline context
// and the lease margin allow.
func (w *world) takeOver(c string) {
	w.tally[exploreShardTake]++
	s := w.shard
	old := s.holder[c]
	delete(s.lapsed, c)
	w.setHolder(c, w.pick(old))
	if h := s.holder[c]; h != nil {
		h.ctrl.OwnershipChanged(c)
	}
	old.ctrl.OwnershipChanged(c) // it forgets the fence
}

// confirm is the holder renewing after its deadline and confirming a fence
// nobody took.
func (w *world) confirm(c string) {
	w.tally[exploreShardRenew]++
	delete(w.shard.lapsed, c)
	w.shard.holder[c].ctrl.OwnershipChanged(c)
}

// join starts a replica, which is assigned some members.
func (w *world) join() {
	r, err := w.newReplica()
	if err != nil {
		w.refuse(err)
		return
	}
	w.tally[faultShardJoin]++
	w.others = append(w.others, r)
	for _, c := range w.members.Names() {
		if from := w.shard.holder[c]; from != nil && w.shard.holds(from, c) && w.rng.Intn(2) == 0 {
			w.startMove(c, from, r)
		}
	}
}

// drain marks r leaving: nothing more is given to it, and what it holds
// or is about to get goes elsewhere (drainSteps).
func (w *world) drain(r *replica) {
	s := w.shard
	s.leaving[r] = true
	for _, c := range sortedKeysOf(s.moves) {
		if mv := s.moves[c]; mv.to == r {
			mv.to = w.pick(mv.from)
			if mv.to == nil {
				w.cancelMove(c)
			}
		}
	}
}

// cancelMove ends a handover that has nobody to go to: the holder keeps
// the member.
func (w *world) cancelMove(c string) {
	mv := w.shard.moves[c]
	delete(w.shard.moves, c)
	if c != "" {
		mv.from.ctrl.OwnershipChanged(c)
	}
}

// drainSteps hand over what a leaving replica holds, one member at a
// time, and let it exit once it holds nothing.
func (w *world) drainSteps(r *replica) []step {
	s := w.shard
	var out []step
	holds := false
	for _, c := range sortedKeysOf(s.holder) {
		if s.holder[c] != r {
			continue
		}
		holds = true
		if s.moves[c] == nil && !s.lapsed[c] {
			out = append(out, step{fmt.Sprintf("sharding: %s drains: hands %s over", r.name, c), func() { w.startMove(c, r, w.pick(r)) }})
		}
	}
	if s.merger == r {
		holds = true
		if s.moves[""] == nil {
			out = append(out, step{"sharding: " + r.name + " drains: hands the merging role over", func() { w.startMove("", r, w.pick(r)) }})
		}
	}
	if !holds {
		out = append(out, step{"sharding: " + r.name + " exits, having handed everything over", func() {
			w.tally[faultShardLeave]++
			w.drainWorkers(r)
			w.dropReplica(r)
			w.retire(r)
			delete(s.leaving, r)
		}})
	}
	return out
}

// crash stops r at once: its in-flight syncs write nothing more (every
// call fails), and what it held goes to the others without waiting.
func (w *world) crash(r *replica) {
	w.tally[faultShardCrash]++
	s := w.shard
	r.crashed = true
	w.drainWorkers(r)
	w.dropReplica(r)
	w.retire(r)
	delete(s.leaving, r)
	for _, c := range sortedKeysOf(s.moves) {
		switch mv := s.moves[c]; {
		case mv.from == r:
			delete(s.moves, c)
		case mv.to == r:
			if mv.to = w.pick(mv.from); mv.to == nil {
				w.cancelMove(c)
			}
		}
	}
	for _, c := range sortedKeysOf(s.holder) {
		if s.holder[c] != r {
			continue
		}
		delete(s.lapsed, c)
		w.setHolder(c, w.pick(nil))
		if h := s.holder[c]; h != nil {
			h.ctrl.OwnershipChanged(c)
		}
	}
	if s.merger == r {
		s.merger = w.pick(nil)
		s.merger.ctrl.OwnershipChanged("")
	}
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

// shardUnregistered releases the fence of a member just unregistered, as
// its holder does once its registry no longer knows it.
func (w *world) shardUnregistered(c string) {
	s := w.shard
	switch {
	case s.holder[c] == nil:
		s.freed[c] = true
	case s.moves[c] != nil || s.lapsed[c]:
		// Freed when the handover or the takeover ends.
	default:
		w.startMove(c, s.holder[c], nil)
	}
}

// shardQuiescent checks that nothing of sharding is left under way.
func (w *world) shardQuiescent() error {
	s := w.shard
	switch {
	case len(s.moves) > 0 || len(s.lapsed) > 0 || len(s.freed) > 0 || len(s.leaving) > 0:
		return fmt.Errorf("quiescent with sharding under way: moves %v, lapsed %v, freed %v, %d leaving",
			sortedKeysOf(s.moves), sortedKeysOf(s.lapsed), sortedKeysOf(s.freed), len(s.leaving))
	case s.merger == nil:
		return errors.New("quiescent with no merger")
	}
	for _, c := range w.members.Names() {
		if s.holder[c] == nil {
			return fmt.Errorf("quiescent with member %s unowned", c)
		}
	}
	return nil
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

func roleName(c string) string {
	if c == "" {
		return "the merging role"
	}
	return c
}

func nameOf(r *replica) string {
	if r == nil {
		return "nobody"
	}
	return r.name
}

func sortedKeysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
