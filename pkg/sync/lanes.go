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
	// lane says where each queued key is: true for the bulk lane. A key
	// moved from bulk to live stays behind in bulk and is skipped there.
	lane map[Key]bool
	// next holds how the adds that have not reached Push or Touch yet were
	// made; an add of a key being synced waits for its Done. A live add wins
	// over a bulk one; an unmarked add (a retry) is live.
	next map[Key]laneMark
}

type laneMark struct {
	bulk bool
	// origin is the member whose event queued the key: the queue it waits
	// in. A clusterset key waits in the queue of the member that changed.
	origin string
}

func newLanes() *lanes {
	return &lanes{lane: map[Key]bool{}, next: map[Key]laneMark{}}
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

// Push queues a key that is not queued.
func (l *lanes) Push(key Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.take(key)
	l.lane[key] = m.bulk
	if m.bulk {
		l.bulk.push(m.origin, key)
	} else {
		l.live.push(m.origin, key)
	}
}

// Touch is an add of a key already queued: a live add moves it to the live
// lane.
func (l *lanes) Touch(key Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.take(key)
	if bulk, ok := l.lane[key]; ok && bulk && !m.bulk {
		l.lane[key] = false
		l.live.push(m.origin, key)
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
	for _, bulk := range [2]bool{false, true} {
		t := &l.live
		if bulk {
			t = &l.bulk
		}
		k, ok := t.pop(func(k Key) bool {
			b, queued := l.lane[k]
			return queued && b == bulk
		})
		if ok {
			delete(l.lane, k)
			return k
		}
	}
	return Key{}
}

// turns is one lane: a queue per origin, served in turn.
type turns struct {
	queues map[string][]Key
	order  []string // origins with queued keys, next first
}

func (t *turns) push(origin string, key Key) {
	if t.queues == nil {
		t.queues = map[string][]Key{}
	}
	q, ok := t.queues[origin]
	if !ok {
		t.order = append(t.order, origin)
	}
	t.queues[origin] = append(q, key)
}

// pop returns the first key for which valid is true, from the next origin
// that has one; invalid keys (moved to the other lane) are dropped.
func (t *turns) pop(valid func(Key) bool) (Key, bool) {
	for len(t.order) > 0 {
		origin := t.order[0]
		t.order = t.order[1:]
		q := t.queues[origin]
		var k Key
		found := false
		for len(q) > 0 && !found {
			k, found = q[0], valid(q[0])
			q[0] = Key{}
			q = q[1:]
		}
		if len(q) == 0 {
			delete(t.queues, origin)
		} else {
			t.queues[origin] = q
			t.order = append(t.order, origin)
		}
		if found {
			return k, true
		}
	}
	t.order = nil // release the emptied backing array
	return Key{}, false
}
