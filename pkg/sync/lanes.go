package sync

import (
	"container/list"
	stdsync "sync"
)

// lanes orders the keys the workqueue hands to workers. Keys queued by an
// event (a member or hub object changed) go before keys queued in bulk (all
// a member's services when it first syncs, recovers or rotates; every hub
// object at startup), so a live change is not stuck behind thousands of
// checks. Within a lane, members take turns: each has its own first-in,
// first-out queue, so a member that changes thousands of services at once
// delays another member's change by one key per turn, not by its backlog.
//
// It implements workqueue.Queue, whose methods the workqueue calls under its
// own lock; mark is called from outside, before the matching Add.
type lanes struct {
	mu         stdsync.Mutex
	live, bulk turns
	// queued holds every queued key and where it waits. A key is in exactly
	// one lane and one origin's queue: a move to live takes it out of bulk.
	queued map[Key]spot
	// next holds how the adds that have not reached Push or Touch yet were
	// made; an add of a key being synced waits for its Done. A live add wins
	// over a bulk one; an unmarked add (a retry) is live.
	next map[Key]laneMark
	// served holds the keys handed out of the bulk lane and not finished,
	// so that what their syncs queue follows them in that lane.
	served map[Key]bool
	// bulkSources counts, per clusterset key, the member keys of its
	// service waiting in the bulk lane: its merge waits for them, so a sweep
	// merges once rather than once per member. drained collects the
	// clusterset keys whose count fell to zero, for the controller to wake
	// outside the workqueue's lock.
	bulkSources map[Key]int
	drained     []Key
}

type laneMark struct {
	bulk bool
	// origin is the member whose event queued the key: the queue it waits
	// in. A clusterset key waits in the queue of the member that changed.
	origin string
}

// spot is where a queued key waits: its element in an origin's queue.
type spot struct {
	lane *turns
	q    *fifo
	e    *list.Element
}

func newLanes() *lanes {
	return &lanes{queued: map[Key]spot{}, next: map[Key]laneMark{}, served: map[Key]bool{}, bulkSources: map[Key]int{}}
}

// mark says how the next add of key is made.
func (l *lanes) mark(key Key, bulk bool, origin string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if m, ok := l.next[key]; ok && !m.bulk && bulk {
		return // live wins
	}
	l.next[key] = laneMark{bulk: bulk, origin: origin}
}

// take returns and forgets the mark of key's add.
func (l *lanes) take(key Key) laneMark {
	m, ok := l.next[key]
	if !ok {
		return laneMark{origin: key.Cluster}
	}
	delete(l.next, key)
	return m
}

// enter queues key at the back of its origin's queue in the lane m says.
func (l *lanes) enter(key Key, m laneMark) {
	t := &l.live
	if m.bulk {
		t = &l.bulk
	}
	q, e := t.push(m.origin, key)
	l.queued[key] = spot{lane: t, q: q, e: e}
	if m.bulk && !key.IsClusterSet() {
		l.bulkSources[key.ClusterSet()]++
	}
}

// leftBulk accounts for a member key that left the bulk lane.
func (l *lanes) leftBulk(key Key) {
	if key.IsClusterSet() {
		return
	}
	k := key.ClusterSet()
	if l.bulkSources[k]--; l.bulkSources[k] <= 0 {
		delete(l.bulkSources, k)
		l.drained = append(l.drained, k)
	}
}

// bulkPending is the number of member keys of a clusterset key's service
// waiting in the bulk lane.
func (l *lanes) bulkPending(key Key) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bulkSources[key]
}

// takeDrained returns and forgets the clusterset keys whose last bulk
// member key left the bulk lane.
func (l *lanes) takeDrained() []Key {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.drained
	l.drained = nil
	return out
}

// Push queues a key that is not queued.
func (l *lanes) Push(key Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.enter(key, l.take(key))
}

// Touch is an add of a key already queued: a live add moves a bulk key to
// the back of the live lane; any other add leaves the key where it is.
func (l *lanes) Touch(key Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.take(key)
	if s, ok := l.queued[key]; ok && s.lane == &l.bulk && !m.bulk {
		s.lane.remove(s.q, s.e)
		l.leftBulk(key)
		l.enter(key, m)
	}
}

// Len is the number of queued keys.
func (l *lanes) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queued)
}

// Pop returns the next live key, else the next bulk key. The workqueue
// calls it only when Len is not 0.
func (l *lanes) Pop() Key {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range []*turns{&l.live, &l.bulk} {
		if k, ok := t.pop(); ok {
			delete(l.queued, k)
			if t == &l.bulk {
				l.served[k] = true
				l.leftBulk(k)
			}
			return k
		}
	}
	return Key{}
}

// servedBulk reports whether key, being synced, came from the bulk lane.
func (l *lanes) servedBulk(key Key) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.served[key]
}

// finish forgets the lane of key, whose sync is over.
func (l *lanes) finish(key Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.served, key)
}

// turns is one lane: a queue per origin, served in turn.
type turns struct {
	queues map[string]*fifo // origins with queued keys
	order  list.List        // of *fifo, the next to serve first
}

// fifo is one origin's queue in a lane. It exists only while it holds keys.
type fifo struct {
	origin string
	keys   list.List     // of Key, first in first out
	turn   *list.Element // q's element in the lane's order
}

// push queues key at the back of origin's queue; an origin that had no
// queue joins the order at the back.
func (t *turns) push(origin string, key Key) (*fifo, *list.Element) {
	q := t.queues[origin]
	if q == nil {
		if t.queues == nil {
			t.queues = map[string]*fifo{}
		}
		q = &fifo{origin: origin}
		q.turn = t.order.PushBack(q)
		t.queues[origin] = q
	}
	return q, q.keys.PushBack(key)
}

// remove takes e out of q; an emptied queue leaves the order.
func (t *turns) remove(q *fifo, e *list.Element) {
	q.keys.Remove(e)
	if q.keys.Len() == 0 {
		t.order.Remove(q.turn)
		delete(t.queues, q.origin)
	}
}

// pop takes the first key of the origin whose turn it is, and sends that
// origin to the back of the order.
func (t *turns) pop() (Key, bool) {
	next := t.order.Front()
	if next == nil {
		return Key{}, false
	}
	q := next.Value.(*fifo)
	e := q.keys.Front()
	t.order.MoveToBack(next)
	t.remove(q, e)
	return e.Value.(Key), true
}
