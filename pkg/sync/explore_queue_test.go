package sync

import (
	"math/rand"
	"slices"
	"sort"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// simQueue is the order explorer's workqueue: the same contract as
// client-go's rate-limited queue (a key is queued once; a key added while
// being processed is queued again when it is done; delays and backoff), on
// a virtual clock. It hands out the ready keys in an order its random
// source picks, or, with real set, through client-go's workqueue over the
// controller's own lanes, as the daemon does; only delays and backoff are
// simulated then.
type simQueue struct {
	real workqueue.TypedInterface[Key]
	// adds are the keys added to real since it was last read: the
	// controller adds some in map order, so they enter real sorted.
	adds       []Key
	rng        *rand.Rand
	now        func() time.Time
	ready      []Key
	queued     map[Key]bool
	processing map[Key]bool
	dirty      map[Key]bool
	delayed    map[Key]time.Time
	requeues   map[Key]int
	shut       bool
	last       Key // the key Get handed out last
}

func newSimQueue(rng *rand.Rand, now func() time.Time) *simQueue {
	return &simQueue{rng: rng, now: now, queued: map[Key]bool{}, processing: map[Key]bool{}, dirty: map[Key]bool{},
		delayed: map[Key]time.Time{}, requeues: map[Key]int{}}
}

func (q *simQueue) Add(k Key) {
	if q.real != nil {
		q.adds = append(q.adds, k)
		return
	}
	switch {
	case q.queued[k]:
	case q.processing[k]:
		q.dirty[k] = true
	default:
		q.queued[k] = true
		q.ready = append(q.ready, k)
	}
}

// flush adds the keys added since real was last read, in key order.
func (q *simQueue) flush() {
	slices.SortFunc(q.adds, compareKeys)
	for _, k := range slices.Compact(q.adds) {
		q.real.Add(k)
	}
	q.adds = q.adds[:0]
}

func (q *simQueue) Len() int {
	if q.real != nil {
		q.flush()
		return q.real.Len()
	}
	return len(q.ready)
}

// Get hands out a random ready key; the explorer calls it only when one is.
func (q *simQueue) Get() (Key, bool) {
	if q.real != nil {
		q.flush()
		if q.shut || q.real.Len() == 0 {
			return Key{}, true
		}
		k, _ := q.real.Get()
		q.last = k
		return k, false
	}
	if q.shut || len(q.ready) == 0 {
		return Key{}, true
	}
	// The controller queues some keys in map order: sort, so that a seed
	// replays the same order.
	slices.SortFunc(q.ready, compareKeys)
	i := q.rng.Intn(len(q.ready))
	k := q.ready[i]
	q.ready = append(q.ready[:i], q.ready[i+1:]...)
	delete(q.queued, k)
	q.processing[k] = true
	q.last = k
	return k, false
}

func (q *simQueue) Done(k Key) {
	if q.real != nil {
		q.flush()
		q.real.Done(k)
		return
	}
	delete(q.processing, k)
	if q.dirty[k] {
		delete(q.dirty, k)
		q.Add(k)
	}
}

func (q *simQueue) ShutDown()          { q.shut = true }
func (q *simQueue) ShutDownWithDrain() { q.shut = true }
func (q *simQueue) ShuttingDown() bool { return q.shut }

func (q *simQueue) AddAfter(k Key, d time.Duration) {
	if d <= 0 {
		q.Add(k)
		return
	}
	at := q.now().Add(d)
	if cur, ok := q.delayed[k]; !ok || at.Before(cur) {
		q.delayed[k] = at
	}
}

// AddRateLimited backs off per key as the controller's limiter does.
func (q *simQueue) AddRateLimited(k Key) {
	n := q.requeues[k]
	q.requeues[k] = n + 1
	d := retryBase << min(n, 30)
	if d > retryMax || d <= 0 {
		d = retryMax
	}
	q.AddAfter(k, d)
}

func (q *simQueue) Forget(k Key)          { delete(q.requeues, k) }
func (q *simQueue) NumRequeues(k Key) int { return q.requeues[k] }

// nextDue returns the earliest time a delayed key is due.
func (q *simQueue) nextDue() (time.Time, bool) {
	var first time.Time
	for _, at := range q.delayed {
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// release queues the delayed keys due by now, in key order (their order
// among each other is then the random pick of Get).
func (q *simQueue) release() {
	if q.real != nil {
		q.flush()
	}
	now := q.now()
	var due []Key
	for k, at := range q.delayed {
		if !at.After(now) {
			due = append(due, k)
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i].String() < due[j].String() })
	for _, k := range due {
		delete(q.delayed, k)
		q.Add(k)
	}
}
