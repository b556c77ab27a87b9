package sync

import (
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
	// lane says where each queued key is. A key moved from bulk to live
	// leaves a stale entry in bulk: entries carry the seq of their push, and
	// only the one matching lane is valid.
	lane map[Key]queued
	seq  uint64
	// stale counts the stale entries in bulk; past staleSlack more than the
	// queued keys, bulk is compacted (it may not be popped for long while
	// live keys keep coming).
	stale int
	// next holds how the adds that have not reached Push or Touch yet were
	// made; an add of a key being synced waits for its Done. A live add wins
	// over a bulk one; an unmarked add (a retry) is live.
	next map[Key]laneMark
}

const staleSlack = 1024

type queued struct {
	bulk bool
	seq  uint64
}

type laneMark struct {
	bulk bool
	// origin is the member whose event queued the key: the queue it waits
	// in. A clusterset key waits in the queue of the member that changed.
	origin string
}

func newLanes() *lanes {
	return &lanes{lane: map[Key]queued{}, next: map[Key]laneMark{}}
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

// enter queues key in the lane m says.
func (l *lanes) enter(key Key, m laneMark) {
	l.seq++
	l.lane[key] = queued{bulk: m.bulk, seq: l.seq}
	t := &l.live
	if m.bulk {
		t = &l.bulk
	}
	t.push(m.origin, entry{key: key, seq: l.seq})
}

// valid reports whether e is where its key is queued, in the lane bulk says.
func (l *lanes) valid(bulk bool) func(entry) bool {
	return func(e entry) bool {
		q, ok := l.lane[e.key]
		return ok && q.bulk == bulk && q.seq == e.seq
	}
}

// Push queues a key that is not queued.
func (l *lanes) Push(key Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.enter(key, l.take(key))
}

// Touch is an add of a key already queued: a live add moves it to the live
// lane.
func (l *lanes) Touch(key Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.take(key)
	if q, ok := l.lane[key]; ok && q.bulk && !m.bulk {
		l.enter(key, m)
		l.stale++
		if l.stale > len(l.lane)+staleSlack {
			l.bulk.compact(l.valid(true))
			l.stale = 0
		}
	}
}

// Len is the number of queued keys.
func (l *lanes) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lane)
}

// Pop returns the next live key, else the next bulk key. The workqueue
// calls it only when Len is not 0.
func (l *lanes) Pop() Key {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k, ok, _ := l.live.pop(l.valid(false)); ok {
		delete(l.lane, k)
		return k
	}
	k, ok, dropped := l.bulk.pop(l.valid(true))
	l.stale = max(0, l.stale-dropped)
	if ok {
		delete(l.lane, k)
	}
	return k
}

type entry struct {
	key Key
	seq uint64
}

// turns is one lane: a queue per origin, served in turn.
type turns struct {
	queues map[string][]entry
	order  []string // origins with queued keys, next first
}

func (t *turns) push(origin string, e entry) {
	if t.queues == nil {
		t.queues = map[string][]entry{}
	}
	q, ok := t.queues[origin]
	if !ok {
		t.order = append(t.order, origin)
	}
	t.queues[origin] = append(q, e)
}

// pop returns the first valid entry's key from the next origin that has
// one, and how many invalid entries it dropped on the way.
func (t *turns) pop(valid func(entry) bool) (Key, bool, int) {
	dropped := 0
	for len(t.order) > 0 {
		origin := t.order[0]
		t.order = t.order[1:]
		q := t.queues[origin]
		var e entry
		found := false
		for len(q) > 0 && !found {
			e, found = q[0], valid(q[0])
			if !found {
				dropped++
			}
			q[0] = entry{}
			q = q[1:]
		}
		if len(q) == 0 {
			delete(t.queues, origin)
		} else {
			t.queues[origin] = q
			t.order = append(t.order, origin)
		}
		if found {
			return e.key, true, dropped
		}
	}
	t.order = nil // release the emptied backing array
	return Key{}, false, dropped
}

// compact drops the invalid entries of every queue, keeping the order.
func (t *turns) compact(valid func(entry) bool) {
	order := t.order[:0]
	for _, origin := range t.order {
		var q []entry
		for _, e := range t.queues[origin] {
			if valid(e) {
				q = append(q, e)
			}
		}
		if len(q) == 0 {
			delete(t.queues, origin)
			continue
		}
		t.queues[origin] = q
		order = append(order, origin)
	}
	t.order = order
}
