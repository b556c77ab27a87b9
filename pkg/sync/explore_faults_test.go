package sync

import (
	"fmt"
	"slices"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

// Member-side fault classes of the order explorer. TestExploreOrders fails
// when one of them never fired across its seeds.
const (
	faultUnreachable  = "member unreachable"
	faultNotConnected = "member registered but not connected"
	faultRotation     = "member credentials rotated"
	faultWatchBreak   = "member watch breaks and relists"
	faultReorder      = "member events of different objects reordered"
	faultStatus409    = "409 on a ServiceExport status write"
	faultPolicyStep   = "unreachable policy step"
	// exploreRealQueue counts the replicas run on the daemon's own queue.
	exploreRealQueue = "replicas on the real lanes queue"
	// exploreSweepWait counts clusterset syncs that waited for a sweep.
	exploreSweepWait = "merge waited for a sweep"
)

var faultClasses = append([]string{faultUnreachable, faultNotConnected, faultRotation, faultWatchBreak, faultReorder, faultStatus409, faultPolicyStep,
	faultHandover, faultOverlap, faultRestart, faultInterleave, exploreRealQueue, exploreSweepWait}, shardClasses...)

// simClock is the explorer's clock for the unreachable policy: the world's
// virtual time, with timers the world fires as steps.
type simClock struct {
	w      *world
	timers []*simTimer
}

type simTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func (c *simClock) Now() time.Time { return c.w.now }
func (c *simClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := &simTimer{at: c.w.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *simTimer) C() <-chan time.Time { return nil }
func (t *simTimer) Stop() bool          { was := !t.stopped; t.stopped = true; return was }
func (t *simTimer) Reset(time.Duration) bool {
	panic("simTimer.Reset: not used by the controller")
}

// due returns the timers due by now, earliest first, and forgets them.
func (c *simClock) due() []*simTimer {
	var out, rest []*simTimer
	for _, t := range c.timers {
		switch {
		case t.stopped:
		case !t.at.After(c.w.now):
			out = append(out, t)
		default:
			rest = append(rest, t)
		}
	}
	c.timers = rest
	sort.SliceStable(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

// next is when the next timer is due.
func (c *simClock) next() (time.Time, bool) {
	var first time.Time
	for _, t := range c.timers {
		if !t.stopped && (first.IsZero() || t.at.Before(first)) {
			first = t.at
		}
	}
	return first, !first.IsZero()
}

// The explorer's unreachable policies; a seed picks one.
var simPolicies = []struct{ grace, withdraw time.Duration }{
	{0, 0}, {20 * time.Second, 0}, {0, time.Minute}, {20 * time.Second, time.Minute},
}

// state is the member's lifecycle state as the registry would report it.
func (m *simMember) state() lifecycle.State {
	st := lifecycle.State{Phase: lifecycle.Connected, Owned: true}
	if m.listed {
		st.Phase = lifecycle.Synced
	}
	if m.down {
		st.Unreachable, st.Since, st.Reason = true, m.downSince, "does not answer its health probe"
	}
	return st
}

// memberFaults are the member-side fault steps enabled now.
func (w *world) memberFaults() []step {
	if !w.faults {
		return nil
	}
	var out []step
	for _, name := range w.order {
		m := w.members.members[name]
		if m == nil {
			continue
		}
		switch {
		case m.listed && !m.down:
			out = append(out, step{name + ": stops answering", func() { w.goDown(m) }})
			out = append(out, step{name + ": credentials rotated", func() { w.rotate(m) }})
			if !m.broken {
				out = append(out, step{name + ": watch breaks", func() {
					w.tally[faultWatchBreak]++
					m.broken, m.pending = true, nil
				}})
			}
			if i := m.reorderable(); i > 0 {
				out = append(out, step{name + ": a later event of another object first", func() {
					w.tally[faultReorder]++
					ev := m.pending[i]
					m.pending = slices.Delete(m.pending, i, i+1)
					m.deliver(ev, false)
				}})
			}
		case m.down:
			out = append(out, step{name + ": answers again", func() { w.comeBack(m) }})
		}
		if len(w.order) > 1 && w.rng.Intn(3) == 0 {
			out = append(out, step{name + ": registration can no longer be connected", func() { w.disconnect(m) }})
		}
	}
	return out
}

// memberRecoveries are the steps that undo member faults; they are enabled
// with or without faults, so every run ends with its members connected.
func (w *world) memberRecoveries() []step {
	var out []step
	for _, name := range sortedMemberNames(w.disconnected) {
		m := w.disconnected[name]
		out = append(out, step{name + ": registration fixed, connects", func() { w.reconnect(m) }})
	}
	for _, name := range w.order {
		m := w.members.members[name]
		if m != nil && m.broken && !m.down {
			out = append(out, step{name + ": member relist", func() { m.relist(); m.broken = false }})
		}
		if m != nil && m.down && !w.faults {
			out = append(out, step{name + ": answers again", func() { w.comeBack(m) }})
		}
	}
	for _, t := range w.clock.due() {
		out = append(out, step{"policy timer fires", func() {
			w.tally[faultPolicyStep]++
			t.f()
		}})
	}
	return out
}

// goDown makes a member stop answering its probe: its watch events wait
// until it answers again.
func (w *world) goDown(m *simMember) {
	w.tally[faultUnreachable]++
	m.down, m.downSince = true, w.now
	w.eachCtrl(func(c *Controller) { c.ClusterHealthChanged(m.name, false) })
}

func (w *world) comeBack(m *simMember) {
	m.down = false
	w.eachCtrl(func(c *Controller) { c.ClusterHealthChanged(m.name, true) })
}

// rotate replaces a member's connection with a new one that lists afresh,
// as a changed Secret does once the new connection synced.
func (w *world) rotate(m *simMember) {
	w.tally[faultRotation]++
	m.cache = newMemberObjects()
	_ = m.svcIdx.Replace(nil, "")
	m.listed = false
	m.list()
	w.eachCtrl(func(c *Controller) { c.ClusterSynced(m.name) })
}

// disconnect turns a member into one whose registration cannot be turned
// into a connection, as a restart finds a Secret that broke: registered,
// unreachable, without caches. What the hub records of it must stay until
// its withdraw period passes.
func (w *world) disconnect(m *simMember) {
	w.tally[faultNotConnected]++
	delete(w.members.members, m.name)
	if w.members.unconnected == nil {
		w.members.unconnected = map[string]lifecycle.State{}
	}
	w.members.unconnected[m.name] = lifecycle.State{Phase: lifecycle.Registered, Owned: true, Unreachable: true, Since: w.now, Reason: "kubeconfig does not parse"}
	w.disconnected[m.name] = m
	w.order = slices.DeleteFunc(w.order, func(n string) bool { return n == m.name })
	// What the hub records of it once the syncs of its keys that began
	// before (and read it connected) are done: those may still withdraw
	// what the member's caches said was gone.
	delete(w.keptRecords, m.name)
	w.keptSince[m.name] = w.now
	w.eachCtrl(func(c *Controller) { c.ClusterHealthChanged(m.name, false) })
}

// reconnect gives a disconnected member a new connection, which lists and
// syncs like a first one.
func (w *world) reconnect(m *simMember) {
	delete(w.disconnected, m.name)
	delete(w.members.unconnected, m.name)
	delete(w.keptRecords, m.name)
	m.cache, m.pending, m.down, m.broken = newMemberObjects(), nil, false, false
	_ = m.svcIdx.Replace(nil, "")
	m.listed, m.listAt = false, w.now
	w.members.members[m.name] = m
	w.order = append(w.order, m.name)
	slices.SortFunc(w.order, func(a, b string) int { return slices.Index(simClusters, a) - slices.Index(simClusters, b) })
	w.eachCtrl(func(c *Controller) { c.ClusterHealthChanged(m.name, true) })
}

// recordedServices lists the services whose export the hub records for a
// member.
func (w *world) recordedServices(cluster string) []string {
	var out []string
	for _, o := range w.srv.list(resourceEndpointSlice) {
		if !watched(resourceEndpointSlice, o) {
			continue
		}
		om, _ := metaOf(o)
		if k, ok := hubKey(om); ok && k.Cluster == cluster && !slices.Contains(out, k.Namespace+"/"+k.Name) {
			out = append(out, k.Namespace+"/"+k.Name)
		}
	}
	sort.Strings(out)
	return out
}

// inFlight reports whether a worker is in the middle of a sync of one of
// cluster's keys.
func (w *world) inFlight(cluster string) bool {
	for _, r := range w.replicaList() {
		for _, sw := range r.workers {
			if sw.parked && sw.key.Cluster == cluster {
				return true
			}
		}
	}
	return false
}

// forgetKept drops from the kept records the export of a slice that
// someone else deleted: the daemon cannot restore what it has no view of.
func (w *world) forgetKept(obj runtime.Object) {
	om, err := metaOf(obj)
	if err != nil {
		return
	}
	if k, ok := hubKey(om); ok && !k.IsClusterSet() {
		w.keptRecords[k.Cluster] = slices.DeleteFunc(w.keptRecords[k.Cluster], func(s string) bool { return s == k.Namespace+"/"+k.Name })
	}
}

// checkKept is the invariant of the member lifecycle: a member that is
// registered but not connected keeps every export the hub recorded for it
// when it lost its connection, until its withdraw period passes.
func (w *world) checkKept() error {
	_, withdraw := w.policy()
	for _, name := range sortedMemberNames(w.disconnected) {
		if withdraw > 0 && !w.now.Before(w.keptSince[name].Add(withdraw)) {
			continue
		}
		if _, ok := w.keptRecords[name]; !ok {
			if w.inFlight(name) {
				continue
			}
			w.keptRecords[name] = w.recordedServices(name)
		}
		now := w.recordedServices(name)
		for _, svc := range w.keptRecords[name] {
			if !slices.Contains(now, svc) {
				return fmt.Errorf("member %s, registered but not connected for %s (withdraw period %s), lost its export of %s from the hub",
					name, w.now.Sub(w.keptSince[name]), withdraw, svc)
			}
		}
	}
	return nil
}

func (w *world) policy() (grace, withdraw time.Duration) {
	return w.ctrl.opts.UnreachableGrace, w.ctrl.opts.UnreachableWithdraw
}

// reorderable returns the index of a pending event that may be delivered
// before the first one: informers keep the order of one object's events,
// not across objects. 0: none.
func (m *simMember) reorderable() int {
	for i := 1; i < len(m.pending); i++ {
		ev := m.pending[i]
		earlier := slices.ContainsFunc(m.pending[:i], func(p memberEvent) bool { return p.kind == ev.kind && p.key == ev.key })
		if !earlier {
			return i
		}
	}
	return 0
}

// relist brings a member's caches in line with truth after its watch
// broke, as a reflector's relist does.
func (m *simMember) relist() {
	m.pending = nil
	for kind := range m.truth {
		for _, key := range sortedKeys(m.cache[kind]) {
			if _, ok := m.truth[kind][key]; !ok {
				m.deliver(memberEvent{kind: kind, key: key}, false)
			}
		}
		for _, key := range sortedKeys(m.truth[kind]) {
			cur, had := m.cache[kind][key]
			obj := m.truth[kind][key]
			if had {
				cm, _ := metaOf(cur)
				tm, _ := metaOf(obj)
				if cm.GetResourceVersion() == tm.GetResourceVersion() {
					continue
				}
			}
			m.deliver(memberEvent{kind: kind, key: key, obj: obj}, false)
		}
	}
}

// statusConflict is the fate of one ServiceExport status write to cluster
// while faults are on: now and then the member answers 409, as when the
// export changed since the cache saw it. A sharded seed's oracle sees it
// first.
func (w *world) statusConflict(cluster string) error {
	w.yield() // a call to the member
	if w.shard != nil {
		if err := w.auditStatus(cluster); err != nil {
			return err
		}
	}
	if !w.faults || w.rng.Intn(6) > 0 {
		return nil
	}
	w.tally[faultStatus409]++
	w.log("fault: 409 on a ServiceExport status write")
	return apierrors.NewConflict(schema.GroupResource{Group: mcsv1beta1.GroupName, Resource: "serviceexports"}, "", fmt.Errorf("injected"))
}
