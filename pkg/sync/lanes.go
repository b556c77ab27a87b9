package sync

import (
	stdsync "sync"
)

// lanes orders the keys the workqueue hands to workers. Keys queued by an
// event (a member or hub object changed) go before keys queued in bulk (all
// a member's services when it first syncs, recovers or rotates; every hub
// object at startup), so a live change is not stuck behind thousands of
// checks. Each lane is first in, first out.
//
// It implements workqueue.Queue, whose methods the workqueue calls under its
// own lock; markBulk is called from outside, before the matching Add.
type lanes struct {
	mu stdsync.Mutex
	// live and bulk hold keys in order; a key moved from bulk to live
	// stays behind in bulk and is skipped there (lane says where it is).
	live, bulk []Key
	lane       map[Key]bool // queued keys: true when in the bulk lane
	// next holds the lane of the adds that have not reached Push or Touch
	// yet (true: bulk); an add of a key being synced waits for its Done.
	// A live add wins over a bulk one; an unmarked add (a retry) is live.
	next map[Key]bool
}

func newLanes() *lanes {
	return &lanes{lane: map[Key]bool{}, next: map[Key]bool{}}
}

// markBulk says the next add of key is a bulk one.
func (l *lanes) markBulk(key Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.next[key]; !ok {
		l.next[key] = true
	}
}

// markLive says the next add of key is a live one.
func (l *lanes) markLive(key Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next[key] = false
}

// Push queues a key that is not queued.
func (l *lanes) Push(key Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	bulk := l.next[key]
	delete(l.next, key)
	l.lane[key] = bulk
	if bulk {
		l.bulk = append(l.bulk, key)
	} else {
		l.live = append(l.live, key)
	}
}

// Touch is an add of a key already queued: a live add moves it to the live
// lane.
func (l *lanes) Touch(key Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	bulkAdd := l.next[key]
	delete(l.next, key)
	if bulk, ok := l.lane[key]; ok && bulk && !bulkAdd {
		l.lane[key] = false
		l.live = append(l.live, key)
	}
}

// Len is the number of queued keys.
func (l *lanes) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lane)
}

// Pop returns the oldest live key, else the oldest bulk key. The workqueue
// calls it only when Len is not 0.
func (l *lanes) Pop() Key {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k, ok := l.popFrom(&l.live, false); ok {
		return k
	}
	k, _ := l.popFrom(&l.bulk, true)
	return k
}

func (l *lanes) popFrom(q *[]Key, bulk bool) (Key, bool) {
	for len(*q) > 0 {
		k := (*q)[0]
		(*q)[0] = Key{}
		*q = (*q)[1:]
		if b, ok := l.lane[k]; ok && b == bulk {
			delete(l.lane, k)
			return k, true
		}
	}
	*q = nil // release the emptied backing array
	return Key{}, false
}
