package sync

import (
	"fmt"
	"reflect"
	"testing"

	"k8s.io/client-go/util/workqueue"
)

// laneQueue is a workqueue ordered by lanes, as the controller builds it.
func laneQueue() (*workqueue.Typed[Key], *lanes) {
	l := newLanes()
	return workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[Key]{Queue: l}), l
}

func add(q *workqueue.Typed[Key], l *lanes, key Key, bulk bool) {
	l.mark(key, bulk, key.Cluster)
	q.Add(key)
}

func drain(q *workqueue.Typed[Key]) []string {
	var out []string
	for q.Len() > 0 {
		k, _ := q.Get()
		out = append(out, k.Name)
		q.Done(k)
	}
	return out
}

func named(name string) Key { return Key{Cluster: "c1", Namespace: "shop", Name: name} }

func TestLanesServeLiveChangesBeforeTheBulkBacklog(t *testing.T) {
	q, l := laneQueue()
	defer q.ShutDown()
	for i := 0; i < 3; i++ {
		add(q, l, named(fmt.Sprintf("bulk-%d", i)), true)
	}
	add(q, l, named("live-0"), false)
	add(q, l, named("bulk-1"), false) // a live change of a key waiting in bulk
	add(q, l, named("live-0"), true)  // a bulk add does not demote a live key
	add(q, l, named("live-1"), false)
	want := []string{"live-0", "bulk-1", "live-1", "bulk-0", "bulk-2"}
	if got := drain(q); !reflect.DeepEqual(got, want) {
		t.Fatalf("order %q, want %q", got, want)
	}
	if n := l.Len(); n != 0 {
		t.Fatalf("lanes hold %d keys after draining", n)
	}
}

// A key added while it is being synced is queued again on Done, in the lane
// of its adds: live if any of them was live.
func TestLanesKeepTheLaneOfAddsMadeDuringASync(t *testing.T) {
	for _, tc := range []struct {
		name  string
		adds  []bool // bulk?
		first bool   // want the key before the bulk backlog
	}{
		{"bulk", []bool{true}, false},
		{"live", []bool{false}, true},
		{"live then bulk", []bool{false, true}, true},
		{"bulk then live", []bool{true, false}, true},
		{"retry", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, l := laneQueue()
			defer q.ShutDown()
			busy := named("busy")
			add(q, l, busy, false)
			k, _ := q.Get()
			add(q, l, named("backlog"), true)
			for _, bulk := range tc.adds {
				add(q, l, busy, bulk)
			}
			if tc.adds == nil {
				q.Add(busy) // an unmarked add, as a delayed retry makes
			}
			q.Done(k)
			want := []string{"backlog", "busy"}
			if tc.first {
				want = []string{"busy", "backlog"}
			}
			if got := drain(q); !reflect.DeepEqual(got, want) {
				t.Fatalf("order %q, want %q", got, want)
			}
		})
	}
}

// A member that changes many services at once does not hold another
// member's change behind all of them: members take turns.
func TestLanesLetMembersTakeTurns(t *testing.T) {
	q, l := laneQueue()
	defer q.ShutDown()
	for i := 0; i < 100; i++ {
		add(q, l, Key{Cluster: "east", Namespace: "shop", Name: fmt.Sprintf("svc-%03d", i)}, false)
	}
	west := Key{Cluster: "west", Namespace: "shop", Name: "cart"}
	add(q, l, west, false)
	// west's clusterset key waits in west's turn, not behind east's.
	l.mark(west.ClusterSet(), false, "west")
	q.Add(west.ClusterSet())
	var order []Key
	for q.Len() > 0 {
		k, _ := q.Get()
		order = append(order, k)
		q.Done(k)
	}
	pos := func(k Key) int {
		for i, o := range order {
			if o == k {
				return i
			}
		}
		return -1
	}
	if p := pos(west); p < 0 || p > 1 {
		t.Errorf("west's change served %d-th behind east's 100", p)
	}
	if p := pos(west.ClusterSet()); p < 0 || p > 3 {
		t.Errorf("west's clusterset key served %d-th", p)
	}
	if len(order) != 102 {
		t.Errorf("served %d keys, want 102", len(order))
	}
}

// A key moved from bulk to live leaves the bulk lane at once: queued in bulk
// again later, it waits behind the keys already there.
func TestLanesQueueAKeyInBulkAgainBehindTheBulkBacklog(t *testing.T) {
	q, l := laneQueue()
	defer q.ShutDown()
	a, b := Key{Cluster: "c1", Namespace: "ns", Name: "a"}, Key{Cluster: "c1", Namespace: "ns", Name: "b"}
	add(q, l, a, true)
	add(q, l, b, true)
	add(q, l, a, false) // a moves to live
	k, _ := q.Get()
	q.Done(k)
	add(q, l, a, true) // a queued in bulk again, after b
	if got := drain(q); !reflect.DeepEqual(got, []string{"b", "a"}) {
		t.Errorf("order %v, want [b a]", got)
	}
}

func TestLanesServeAKeyMovedToLiveOnceInTheLiveLane(t *testing.T) {
	q, l := laneQueue()
	defer q.ShutDown()
	for _, name := range []string{"a", "b", "c"} {
		add(q, l, named(name), true)
	}
	add(q, l, named("b"), false) // b moves to live
	if n := laneEntries(&l.bulk); n != 2 {
		t.Errorf("bulk lane holds %d entries after a move, want 2", n)
	}
	add(q, l, named("live"), false)
	want := []string{"b", "live", "a", "c"}
	if got := drain(q); !reflect.DeepEqual(got, want) {
		t.Fatalf("order %q, want %q", got, want)
	}
}

// memberKey names a key of member cluster.
func memberKey(cluster, name string) Key { return Key{Cluster: cluster, Namespace: "shop", Name: name} }

func TestLanesTakeTurnsBetweenMembersInBothLanes(t *testing.T) {
	q, l := laneQueue()
	defer q.ShutDown()
	for _, bulk := range []bool{true, false} {
		prefix := map[bool]string{true: "bulk", false: "live"}[bulk]
		for _, cluster := range []string{"east", "west", "north"} {
			for i := range 3 {
				add(q, l, memberKey(cluster, fmt.Sprintf("%s-%s-%d", prefix, cluster, i)), bulk)
			}
		}
	}
	var want []string
	for _, prefix := range []string{"live", "bulk"} {
		for i := range 3 {
			for _, cluster := range []string{"east", "west", "north"} {
				want = append(want, fmt.Sprintf("%s-%s-%d", prefix, cluster, i))
			}
		}
	}
	if got := drain(q); !reflect.DeepEqual(got, want) {
		t.Fatalf("order\n%q\nwant\n%q", got, want)
	}
}

// A member whose queue empties, by a pop or by a move to live, leaves the
// turns; its next key joins them at the back, behind the members waiting.
func TestLanesAMemberWhoseQueueEmptiesRejoinsAtTheBack(t *testing.T) {
	t.Run("emptied by a pop", func(t *testing.T) {
		q, l := laneQueue()
		defer q.ShutDown()
		add(q, l, memberKey("east", "e0"), false)
		add(q, l, memberKey("east", "e1"), false)
		add(q, l, memberKey("west", "w0"), false)
		add(q, l, memberKey("north", "n0"), false)
		var got []string
		for range 2 { // e0, then w0 empties west's queue
			k, _ := q.Get()
			got = append(got, k.Name)
			q.Done(k)
		}
		add(q, l, memberKey("west", "w1"), false)
		got = append(got, drain(q)...)
		if want := []string{"e0", "w0", "n0", "e1", "w1"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("order %q, want %q", got, want)
		}
	})
	t.Run("emptied by a move to live", func(t *testing.T) {
		q, l := laneQueue()
		defer q.ShutDown()
		add(q, l, memberKey("east", "e0"), true)
		add(q, l, memberKey("east", "e1"), true)
		add(q, l, memberKey("west", "w0"), true)
		add(q, l, memberKey("north", "n0"), true)
		add(q, l, memberKey("west", "w0"), false) // west's bulk queue empties
		add(q, l, memberKey("west", "w1"), true)
		want := []string{"w0", "e0", "n0", "w1", "e1"}
		if got := drain(q); !reflect.DeepEqual(got, want) {
			t.Fatalf("order %q, want %q", got, want)
		}
	})
}

// After many keys were queued, moved and served, lanes hold nothing: no
// entry, queue or turn is left behind, in either lane.
func TestLanesRetainNothingOnceDrained(t *testing.T) {
	q, l := laneQueue()
	defer q.ShutDown()
	for round := range 20 {
		for i := range 500 {
			k := memberKey(fmt.Sprint("member-", i%25), fmt.Sprint("svc-", i))
			add(q, l, k, true)
			if i%3 == 0 {
				add(q, l, k, false)
			}
		}
		// Serve half, re-adding some as they are synced.
		for range 250 {
			k, _ := q.Get()
			if round%2 == 0 {
				add(q, l, k, true)
			}
			q.Done(k)
		}
		if n, want := laneEntries(&l.live)+laneEntries(&l.bulk), q.Len(); n != want {
			t.Fatalf("round %d: lanes hold %d entries for %d queued keys", round, n, want)
		}
	}
	drain(q)
	for name, lane := range map[string]*turns{"live": &l.live, "bulk": &l.bulk} {
		if len(lane.queues) != 0 || lane.order.Len() != 0 {
			t.Errorf("%s lane keeps %d queues, %d turns", name, len(lane.queues), lane.order.Len())
		}
	}
	if len(l.queued) != 0 || len(l.next) != 0 {
		t.Errorf("lanes keep %d queued keys, %d marks", len(l.queued), len(l.next))
	}
}

// laneEntries counts the keys queued in a lane.
func laneEntries(t *turns) int {
	n := 0
	for _, q := range t.queues {
		n += q.keys.Len()
	}
	return n
}

// The lanes count, per service, the member keys waiting in the bulk lane,
// and report the service once the last of them was handed out or moved to
// the live lane: its merge waits for that.
func TestLanesCountBulkMemberKeysPerService(t *testing.T) {
	q, l := laneQueue()
	defer q.ShutDown()
	cart := Key{Namespace: "shop", Name: "cart"}
	for _, c := range []string{"c1", "c2", "c3"} {
		add(q, l, Key{Cluster: c, Namespace: "shop", Name: "cart"}, true)
	}
	add(q, l, Key{Cluster: "c1", Namespace: "shop", Name: "web"}, false) // live: not counted
	add(q, l, cart, true)                                                // a clusterset key: not counted
	if n := l.bulkPending(cart); n != 3 {
		t.Fatalf("bulkPending(cart) = %d, want 3", n)
	}
	add(q, l, Key{Cluster: "c2", Namespace: "shop", Name: "cart"}, false) // moves to live
	if n := l.bulkPending(cart); n != 2 {
		t.Fatalf("after a live add bulkPending(cart) = %d, want 2", n)
	}
	var drained []Key
	for q.Len() > 0 {
		k, _ := q.Get()
		drained = append(drained, l.takeDrained()...)
		if k.Name == "cart" && !k.IsClusterSet() && len(drained) > 0 && l.bulkPending(cart) != 0 {
			t.Errorf("drained while %d member keys wait", l.bulkPending(cart))
		}
		q.Done(k)
	}
	if !reflect.DeepEqual(drained, []Key{cart}) || l.bulkPending(cart) != 0 {
		t.Errorf("drained %v, bulkPending %d; want cart once, 0", drained, l.bulkPending(cart))
	}
}
