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

// A key moved from bulk to live leaves an entry behind in bulk: it must not
// let the key jump the bulk queue when it is queued in bulk again, and such
// entries must not pile up while live keys keep bulk from being served.
func TestLanesStaleBulkEntries(t *testing.T) {
	q, l := laneQueue()
	a, b := Key{Cluster: "c1", Namespace: "ns", Name: "a"}, Key{Cluster: "c1", Namespace: "ns", Name: "b"}
	add(q, l, a, true)
	add(q, l, b, true)
	add(q, l, a, false) // a moves to live
	k, _ := q.Get()
	q.Done(k)
	add(q, l, a, true) // a queued in bulk again, after b
	if got := drain(q); !reflect.DeepEqual(got, []string{"b", "a"}) {
		t.Errorf("order after a stale entry: %v, want [b a]", got)
	}

	for i := range 5000 {
		k := Key{Cluster: "c1", Namespace: "ns", Name: fmt.Sprint("k", i%3)}
		add(q, l, k, true)
		add(q, l, k, false)
		got, _ := q.Get()
		q.Done(got)
	}
	entries := 0
	for _, qu := range l.bulk.queues {
		entries += len(qu)
	}
	if entries > staleSlack+10 {
		t.Errorf("%d entries in the bulk lane for %d queued keys", entries, q.Len())
	}
}
