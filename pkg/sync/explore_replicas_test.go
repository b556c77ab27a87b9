package sync

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Handover fault classes.
const (
	faultHandover = "leader hands over, releasing"
	faultOverlap  = "leader hands over while it still writes"
	faultRestart  = "a replica restarts as a cold standby"
)

// replica is one daemon replica of the explorer: a controller with its own
// queue and hub caches, fed by the same hub and members as the others.
type replica struct {
	name  string
	ctrl  *Controller
	queue *simQueue
	// hubEvents are the hub watch events not delivered yet, per resource;
	// a broken watch drops them until a relist.
	hubEvents map[string][]hubEvent
	broken    map[string]bool
	hubListed bool
	started   bool
	// stale: it lost the lead but has not noticed yet, and still syncs.
	stale bool
	// crashed: it stopped at once; its calls fail (sharded seeds).
	crashed bool
	workers []*simWorker
	// sh is its side of sharding (sharded seeds).
	sh *shardReplica
}

// newReplica starts a replica: its controller, queue and member handlers.
// It joins a run that may be under way: the members it finds synced are
// synced for it, as its registry would report. In a sharded seed its
// registry and Sharding follow its own shard coordinator.
func (w *world) newReplica() (*replica, error) {
	w.replicas++
	r := &replica{name: fmt.Sprintf("r%d", w.replicas), hubEvents: map[string][]hubEvent{}, broken: map[string]bool{}}
	var members Members = w.members
	opts := w.opts
	if w.shard != nil {
		members, opts.Sharding = shardMembers{w: w, r: r}, shardView{w: w, r: r}
	}
	ctrl, err := New(w.hub, w.hubMCS, members, opts)
	if err != nil {
		return nil, err
	}
	r.ctrl = ctrl
	r.queue = newSimQueue(w.rng, func() time.Time { return w.now })
	if w.rng.Intn(2) == 0 {
		// Half the replicas hand keys out as the daemon does: live before
		// bulk, members in turn, sweeps merged once.
		r.queue.real = workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[Key]{Queue: ctrl.queue.lanes})
		w.tally[exploreRealQueue]++
	}
	ctrl.queue.wq = r.queue
	ctrl.written.now = func() time.Time { return w.now }
	w.newWorkers(r, 1+w.rng.Intn(3))
	if w.shard != nil {
		w.newShardReplica(r)
	}
	for _, m := range w.allMembers() {
		svc, sl, se := ctrl.EventHandlers(m.name)
		m.handlers = append(m.handlers, replicaHandlers{ctrl: ctrl, hs: [3]cache.ResourceEventHandler{svc, sl, se}})
	}
	for _, m := range w.allMembers() {
		if m.listed {
			ctrl.ClusterSynced(m.name)
		}
		if m.down || w.disconnected[m.name] != nil {
			ctrl.ClusterHealthChanged(m.name, false)
		}
	}
	return r, nil
}

// allMembers are the registered members, connected or not, by name.
func (w *world) allMembers() []*simMember {
	var out []*simMember
	for _, name := range simClusters {
		if m := w.members.members[name]; m != nil {
			out = append(out, m)
		} else if m := w.disconnected[name]; m != nil {
			out = append(out, m)
		}
	}
	return out
}

// replicaList is every running replica, the leader first.
func (w *world) replicaList() []*replica {
	if w.leader == nil {
		return w.others
	}
	return append([]*replica{w.leader}, w.others...)
}

// as runs f as replica r: the world's steps act on the leader's
// controller, queue and caches.
func (w *world) as(r *replica, f func()) {
	leader := w.replica
	w.replica = r
	defer func() { w.replica = leader }()
	f()
}

// eachCtrl tells every replica's controller what its registry would.
func (w *world) eachCtrl(f func(*Controller)) {
	for _, r := range w.replicaList() {
		f(r.ctrl)
	}
}

// replicaSteps are the steps of the replicas that do not lead: their hub
// caches follow the hub, and a stale one still syncs; and the handovers.
func (w *world) replicaSteps() []step {
	var out []step
	for _, r := range w.others {
		if !r.hubListed {
			out = append(out, step{r.name + ": hub caches list", func() { w.as(r, w.listHub) }})
			continue
		}
		for _, res := range sortedResources(r.hubEvents) {
			if len(r.hubEvents[res]) > 0 {
				out = append(out, step{r.name + ": hub event " + res, func() { w.as(r, func() { w.deliverHub(res) }) }})
			}
		}
		for res := range r.broken {
			if r.broken[res] {
				out = append(out, step{r.name + ": hub relist " + res, func() { w.as(r, func() { w.relist(res) }) }})
			}
		}
		if r.stale {
			out = append(out, w.workerSteps(r)...)
			out = append(out, step{r.name + ": notices it lost the lead and exits", func() { w.exit(r) }})
		}
		if w.shard != nil {
			out = append(out, w.shardWorkerSteps(r)...)
		}
	}
	if w.handovers > 0 && w.started {
		for _, r := range w.others {
			if r.stale || !r.hubListed {
				continue
			}
			out = append(out, step{"handover to " + r.name + ", released", func() { w.handover(r, false) }})
			out = append(out, step{"handover to " + r.name + " while the leader still writes", func() { w.handover(r, true) }})
		}
	}
	return out
}

// handover makes r the leader. The old one stops at once (it released the
// lease after its workers stopped), or goes on syncing until it notices
// (stale). A restarted replica then joins as a cold standby.
func (w *world) handover(r *replica, overlap bool) {
	w.handovers--
	old := w.leader
	w.others = slices.DeleteFunc(w.others, func(o *replica) bool { return o == r })
	w.replica, w.leader = r, r
	if overlap {
		w.tally[faultOverlap]++
		old.stale = true
		w.others = append(w.others, old)
	} else {
		// It released the lease once its workers were done.
		w.tally[faultHandover]++
		w.drainWorkers(old)
		w.retire(old)
	}
	if w.members.synced {
		r.started = true
		r.ctrl.begin()
	}
	if w.rng.Intn(2) == 0 {
		w.tally[faultRestart]++
		if nr, err := w.newReplica(); err == nil {
			w.others = append(w.others, nr)
		}
	}
}

// exit stops a stale replica, once its in-flight syncs are done.
func (w *world) exit(r *replica) {
	w.drainWorkers(r)
	w.others = slices.DeleteFunc(w.others, func(o *replica) bool { return o == r })
	w.retire(r)
}

// retire stops a replica: its member handlers go, its timers and idle
// workers stop.
func (w *world) retire(r *replica) {
	r.ctrl.policy.stopAll()
	r.queue.ShutDown()
	for _, m := range w.allMembers() {
		m.handlers = slices.DeleteFunc(m.handlers, func(rh replicaHandlers) bool { return rh.ctrl == r.ctrl })
	}
	for _, sw := range r.workers {
		if !sw.parked {
			close(sw.resume)
		}
	}
	r.workers = nil
}

// expireWrites expires every replica's unechoed writes due by now.
func (w *world) expireWrites() {
	for _, r := range w.replicaList() {
		r.ctrl.expireWrites()
	}
}
