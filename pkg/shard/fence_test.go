package shard

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func fenceLeaseFor(cluster, holder, assignedTo, ready string) fence {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        FenceName(cluster),
			Labels:      map[string]string{LabelRole: RoleFence, LabelFenceCluster: cluster},
			Annotations: map[string]string{AnnotationAssignedTo: assignedTo, AnnotationReady: ready},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)},
	}
	return fenceOf(l)
}

func TestDecide(t *testing.T) {
	alive := func(ids ...string) func(string) bool {
		return func(id string) bool {
			for _, a := range ids {
				if a == id {
					return true
				}
			}
			return false
		}
	}
	base := view{me: "a", registered: true, alive: alive("a", "b")}
	with := func(mut func(*view)) view { v := base; mut(&v); return v }
	for _, tc := range []struct {
		name string
		v    view
		f    fence
		want action
	}{
		{"no fence yet: the leader creates it", base, fence{cluster: "m"}, none},
		{"assigned here and free: take it", base, fenceLeaseFor("m", "", "a", ""), acquire},
		{"assigned here, holder dead: take it", base, fenceLeaseFor("m", "c", "a", ""), acquire},
		{"assigned here, holder alive, not synced: wait", base, fenceLeaseFor("m", "b", "a", ""), none},
		{"assigned here, holder alive, synced: say so", with(func(v *view) { v.warm = true }), fenceLeaseFor("m", "b", "a", ""), signalReady},
		{"said so already: wait for the holder", with(func(v *view) { v.warm = true }), fenceLeaseFor("m", "b", "a", "a"), none},
		{"assigned elsewhere and free: not ours", base, fenceLeaseFor("m", "", "b", ""), none},
		{"not registered here: never taken", with(func(v *view) { v.registered = false }), fenceLeaseFor("m", "", "a", ""), none},
		{"draining: takes nothing", with(func(v *view) { v.draining = true }), fenceLeaseFor("m", "", "a", ""), none},
		{"held and assigned here: keep", with(func(v *view) { v.held = true }), fenceLeaseFor("m", "a", "a", ""), none},
		{"held, assignee not ready: keep writing", with(func(v *view) { v.held = true }), fenceLeaseFor("m", "a", "b", ""), none},
		{"held, assignee ready: hand over", with(func(v *view) { v.held = true }), fenceLeaseFor("m", "a", "b", "b"), release},
		{"held, ready assignee dead: keep", with(func(v *view) { v.held = true }), fenceLeaseFor("m", "a", "c", "c"), none},
		{"held, ready from an earlier assignee: keep", with(func(v *view) { v.held = true }), fenceLeaseFor("m", "a", "b", "c"), none},
		{"held, unregistered here: free it", with(func(v *view) { v.held, v.registered = true, false }), fenceLeaseFor("m", "a", "a", ""), release},
		{"held, giving up at shutdown: free it", with(func(v *view) { v.held, v.draining, v.giveUp = true, true, true }), fenceLeaseFor("m", "a", "a", ""), release},
		{"held before a lapse: confirm", with(func(v *view) { v.stale = true }), fenceLeaseFor("m", "a", "a", ""), confirm},
		{"held before a lapse, taken meanwhile: forget", with(func(v *view) { v.stale = true }), fenceLeaseFor("m", "b", "b", ""), forget},
		{"thought held, another holds it: forget", with(func(v *view) { v.held = true }), fenceLeaseFor("m", "b", "a", ""), forget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decide(tc.v, tc.f); got != tc.want {
				t.Errorf("decide = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestPeersAliveByOwnClock: a peer is alive while this replica saw its
// Lease change within a lease duration, whatever the Lease's own times say.
func TestPeersAliveByOwnClock(t *testing.T) {
	now := time.Unix(1000, 0)
	p := newPeers(4*time.Second, func() time.Time { return now })
	lease := func(id, rv string, renew time.Time) *coordinationv1.Lease {
		mt := metav1.NewMicroTime(renew)
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: PeerName(id), ResourceVersion: rv, Labels: map[string]string{LabelRole: RolePeer}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(id), RenewTime: &mt},
		}
	}
	// Its renewTime is an hour off: only our clock counts.
	p.observe(lease("b", "1", now.Add(-time.Hour)))
	if !p.alive("b") {
		t.Fatal("a peer just seen is dead")
	}
	if !p.alive("never-seen") {
		t.Error("an identity never seen is dead before a lease duration since we started")
	}
	now = now.Add(3 * time.Second)
	renewed := lease("b", "2", now.Add(-time.Hour))
	p.observe(renewed)
	if next, ok := p.nextDeath(); !ok || !next.Equal(now.Add(4*time.Second)) {
		t.Errorf("nextDeath = %v, %t; want a lease duration after b's renewal was seen, %v", next, ok, now.Add(4*time.Second))
	}
	now = now.Add(3 * time.Second)
	if !p.alive("b") {
		t.Error("a peer renewed 3s ago is dead")
	}
	if p.alive("never-seen") {
		t.Error("an identity never seen is alive 6s after we started")
	}
	// The same Lease delivered again is no renewal.
	p.observe(renewed.DeepCopy())
	now = now.Add(2 * time.Second)
	if p.alive("b") {
		t.Error("a peer unrenewed for 5s is alive")
	}
	if got := p.live(); len(got) != 0 {
		t.Errorf("live = %v, want none", got)
	}
	if next, ok := p.nextDeath(); ok {
		t.Errorf("nextDeath = %v with every peer dead, want none", next)
	}
	d := lease("c", "1", now)
	d.Annotations = map[string]string{AnnotationDraining: "true"}
	p.observe(d)
	if !p.alive("c") || len(p.live()) != 0 {
		t.Errorf("a draining peer: alive %t (want true), live %v (want none)", p.alive("c"), p.live())
	}
}

func TestPeerNameIsAValidLeaseName(t *testing.T) {
	n := PeerName("host.example_0b2a6c1e-7a8f-4a45-9a7b-2f0f1a1c9d3e")
	if len(n) > 63 || n != PeerName("host.example_0b2a6c1e-7a8f-4a45-9a7b-2f0f1a1c9d3e") || n == PeerName("other") {
		t.Errorf("PeerName = %q: not a short, stable, distinct name", n)
	}
}
