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
)

func waitMemberSynced(cluster string) condition { return condition{memberSynced, cluster} }
func waitRegistrations() condition              { return condition{kind: registrationsKnown} }
func waitNamespace(ns string) condition         { return condition{hubNamespace, ns} }
func waitSourcesSwept(key Key) condition        { return condition{sourcesSwept, key.String()} }

// waits records which keys wait for which conditions.
type waits struct {
	mu   stdsync.Mutex
	keys map[condition]sets.Set[Key]
}

func newWaits() *waits { return &waits{keys: map[condition]sets.Set[Key]{}} }

func (w *waits) add(c condition, key Key) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keys[c] == nil {
		w.keys[c] = sets.New[Key]()
	}
	w.keys[c].Insert(key)
}

// take returns and forgets the keys waiting for c.
func (w *waits) take(c condition) []Key {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := w.keys[c].UnsortedList()
	delete(w.keys, c)
	return keys
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
func (c *Controller) waitFor(key Key, cond condition, holds func() bool) {
	c.waits.add(cond, key)
	if holds() {
		c.wake(cond, true)
	}
}

// wake queues the keys waiting for cond, which now holds.
func (c *Controller) wake(cond condition, bulk bool) {
	for _, k := range c.waits.take(cond) {
		c.add(k, bulk)
	}
}
