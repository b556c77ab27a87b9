package sync

import (
	stdsync "sync"

	"k8s.io/apimachinery/pkg/util/sets"
)

// A condition is a precondition a sync can wait for. A sync that cannot
// finish because one does not hold records its key against it (waits.add)
// and returns; the transition that makes it hold wakes exactly those keys
// (waits.take). See the package documentation.
type condition struct {
	kind waitKind
	name string // the member or namespace it is about
}

type waitKind int

const (
	// memberSynced holds once a member's caches have synced.
	memberSynced waitKind = iota
	// registrationsKnown holds once the registration Secrets present at
	// start have been processed.
	registrationsKnown
	// hubNamespace holds once a hub namespace exists.
	hubNamespace
	// sourcesSwept holds once no member key of a clusterset key's service
	// waits in the bulk lane.
	sourcesSwept
	// mayWrite holds once this replica may write a member's objects (the
	// merged ones for "").
	mayWrite
)

func waitMemberSynced(cluster string) condition { return condition{memberSynced, cluster} }
func waitRegistrations() condition              { return condition{kind: registrationsKnown} }
func waitNamespace(ns string) condition         { return condition{hubNamespace, ns} }
func waitSourcesSwept(key Key) condition        { return condition{sourcesSwept, key.String()} }
func waitOwned(cluster string) condition        { return condition{mayWrite, cluster} }

// waits records which keys wait for which conditions. A key waits only
// for what its last sync found missing: each sync drops the key's waits
// first (drop), and so does the removal of its member (dropCluster), so
// the record stays as small as the set of keys that wait now.
type waits struct {
	queue *keyQueue // where woken keys go
	mu    stdsync.Mutex
	keys  map[condition]sets.Set[Key]
	// of is the reverse index: the conditions each key waits for.
	of map[Key]sets.Set[condition]
}

func newWaits(queue *keyQueue) *waits {
	return &waits{queue: queue, keys: map[condition]sets.Set[Key]{}, of: map[Key]sets.Set[condition]{}}
}

func (w *waits) add(c condition, key Key) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keys[c] == nil {
		w.keys[c] = sets.New[Key]()
	}
	w.keys[c].Insert(key)
	if w.of[key] == nil {
		w.of[key] = sets.New[condition]()
	}
	w.of[key].Insert(c)
}

// take returns and forgets the keys waiting for c.
func (w *waits) take(c condition) []Key {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := w.keys[c].UnsortedList()
	delete(w.keys, c)
	for _, k := range keys {
		w.forget(k, c)
	}
	return keys
}

// drop forgets what key waits for.
func (w *waits) drop(key Key) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for c := range w.of[key] {
		w.keys[c].Delete(key)
		if w.keys[c].Len() == 0 {
			delete(w.keys, c)
		}
	}
	delete(w.of, key)
}

// dropCluster forgets what the keys of a removed member wait for.
func (w *waits) dropCluster(cluster string) {
	w.mu.Lock()
	keys := make([]Key, 0)
	for k := range w.of {
		if k.Cluster == cluster {
			keys = append(keys, k)
		}
	}
	w.mu.Unlock()
	for _, k := range keys {
		w.drop(k)
	}
}

func (w *waits) forget(key Key, c condition) {
	w.of[key].Delete(c)
	if w.of[key].Len() == 0 {
		delete(w.of, key)
	}
}

// len is the number of keys waiting, for the metrics.
func (w *waits) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.keys {
		n += s.Len()
	}
	return n
}

// waitFor records that key waits for c. holds reports whether c holds now:
// it is asked after recording, so a transition racing the sync is never
// missed (either it sees the key, or holds sees the transition).
func (w *waits) waitFor(key Key, cond condition, holds func() bool) {
	w.add(cond, key)
	if holds() {
		w.wake(cond, true)
	}
}

// wake queues the keys waiting for cond, which now holds.
func (w *waits) wake(cond condition, bulk bool) {
	for _, k := range w.take(cond) {
		w.queue.add(k, lane(bulk))
	}
}
