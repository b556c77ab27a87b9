package sync

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Defaults of the per-member bounds (Options.MaxMemberServices and
// MaxMemberEndpoints): generous, so that only a member far out of the
// ordinary meets them.
const (
	DefaultMaxMemberServices  = 10000
	DefaultMaxMemberEndpoints = 100000
)

// bounds keep each member within what it may export, so that one member
// cannot slow the others: a member's exports rank oldest first (export
// time, then namespace/name) and are admitted while their number stays
// within maxServices and their endpoints within maxEndpoints; the export
// that crosses a bound, and every newer one, is refused.
type bounds struct {
	maxServices, maxEndpoints int // 0: no bound
}

// ledger is a member's exports as its keys' last syncs found them: when
// each counts from, how many endpoints it brings, and whether the sync
// admitted it; it feeds the per-cluster gauges. The bounds judge an export
// against all of the member's exports: those synced here, and the others
// as a census of the member's caches found them (census). The census is
// taken by the first sync that needs it once this replica writes the
// member (each part of it goes when its key syncs), so a replica that
// takes a member over never admits an export that the member's older ones
// leave no room for.
type ledger struct {
	exports map[Key]ledgerEntry
	// endpoints sums the endpoints of every export; admittedEndpoints
	// those of the admitted ones; refusedExports counts the refused ones.
	endpoints, admittedEndpoints, refusedExports int
	// census holds the member's exports not synced here since the census
	// was taken, and censusEndpoints their endpoints; complete is set
	// once it was taken, until a sync withdraws a key without reading
	// the member's caches.
	census          map[Key]ledgerEntry
	censusEndpoints int
	complete        bool
}

// ledgerEntry is one export as its last sync found it.
type ledgerEntry struct {
	created   time.Time
	endpoints int
	admitted  bool
}

// bounded reports whether any bound is set.
func (l bounds) bounded() bool { return l.maxServices > 0 || l.maxEndpoints > 0 }

// needsCensus reports whether a sync of the member's keys must take a
// census of its exports to judge one (see ledger).
func (s *memberStates) needsCensus(cluster string) bool {
	if !s.bounded() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.members[cluster]
	return m == nil || !m.complete
}

// all returns every export of the member: census (the ledger's own once
// complete) overlaid with those synced here.
func (l *ledger) all(census map[Key]ledgerEntry) map[Key]ledgerEntry {
	if l.complete {
		census = l.census
	}
	out := make(map[Key]ledgerEntry, len(census)+len(l.exports))
	maps.Copy(out, census)
	maps.Copy(out, l.exports)
	return out
}

// judge decides whether the export of a member key, counting from created
// with n endpoints, is within its member's bounds, given the member's
// other exports (census: the member's exports, when the sync took a
// census): "" admits it, anything else says why it is refused.
func (s *memberStates) judge(key Key, created time.Time, n int, census map[Key]ledgerEntry) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.members[key.Cluster]
	if m == nil {
		m = &memberState{ledger: ledger{exports: map[Key]ledgerEntry{}}}
	}
	var entries map[Key]ledgerEntry
	if m.complete {
		// Counted without building the set: exports and census are
		// disjoint.
		old, had := m.exports[key]
		if !had {
			old, had = m.census[key]
		}
		services, endpoints := len(m.exports)+len(m.census), m.endpoints+m.censusEndpoints-old.endpoints+n
		if !had {
			services++
		}
		if s.within(services, endpoints) {
			return ""
		}
		entries = m.all(nil)
	} else {
		entries = m.all(census)
		entries[key] = ledgerEntry{created: created, endpoints: n}
		services, endpoints := len(entries), 0
		for _, e := range entries {
			endpoints += e.endpoints
		}
		if s.within(services, endpoints) {
			return ""
		}
	}
	admitted, why := s.rank(entries, key, ledgerEntry{created: created, endpoints: n})
	if admitted[key] {
		return ""
	}
	return why
}

// seedCensus keeps a census of a member's exports that a sync took, unless
// one is kept already, and returns the keys it holds: their syncs correct
// it where it is already out of date.
func (s *memberStates) seedCensus(cluster string, census map[Key]ledgerEntry) []Key {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.tidy(cluster)
	m := s.member(cluster, true)
	if m.complete {
		return nil
	}
	var seeded []Key
	for k, e := range census {
		if _, synced := m.exports[k]; !synced {
			m.census[k] = e
			m.censusEndpoints += e.endpoints
			seeded = append(seeded, k)
		}
	}
	m.complete = true
	return seeded
}

// forgetCensus drops a member's census: a sync withdrew one of its keys
// without reading its caches, so the ledger no longer holds all of its
// exports.
func (s *memberStates) forgetCensus(cluster string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.members[cluster]; m != nil {
		m.census, m.censusEndpoints, m.complete = map[Key]ledgerEntry{}, 0, false
		s.tidy(cluster)
	}
}

// recordExport sets what the last sync of a member key found (nil: no
// export) and returns the member's other keys whose last sync the ranking
// now decides otherwise, to sync again, and whether the key's export was
// refused before.
func (s *memberStates) recordExport(key Key, e *ledgerEntry) (again []Key, wasRefused bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.tidy(key.Cluster)
	m := s.member(key.Cluster, e != nil)
	if m == nil {
		return nil, false
	}
	if c, ok := m.census[key]; ok {
		m.censusEndpoints -= c.endpoints
		delete(m.census, key)
	}
	old, had := m.exports[key]
	if had {
		m.remove(old)
		delete(m.exports, key)
	}
	if e != nil {
		m.exports[key] = *e
		m.add(*e)
	}
	wasRefused = had && !old.admitted
	if m.refusedExports == 0 && s.within(len(m.exports)+len(m.census), m.endpoints+m.censusEndpoints) {
		return nil, wasRefused
	}
	admitted, _ := s.rank(m.all(nil), Key{}, ledgerEntry{})
	for k, entry := range m.exports {
		if k != key && entry.admitted != admitted[k] {
			again = append(again, k)
		}
	}
	return again, wasRefused
}

func (l *ledger) add(e ledgerEntry) {
	l.endpoints += e.endpoints
	if e.admitted {
		l.admittedEndpoints += e.endpoints
	} else {
		l.refusedExports++
	}
}

func (l *ledger) remove(e ledgerEntry) {
	l.endpoints -= e.endpoints
	if e.admitted {
		l.admittedEndpoints -= e.endpoints
	} else {
		l.refusedExports--
	}
}

func (l bounds) within(services, endpoints int) bool {
	return (l.maxServices <= 0 || services <= l.maxServices) && (l.maxEndpoints <= 0 || endpoints <= l.maxEndpoints)
}

// rank admits the oldest exports of entries, with extra standing in for
// the entry of key when key is set, and says why the first refused one
// is refused.
func (l bounds) rank(entries map[Key]ledgerEntry, key Key, extra ledgerEntry) (map[Key]bool, string) {
	type ranked struct {
		key Key
		ledgerEntry
	}
	list := make([]ranked, 0, len(entries)+1)
	for k, e := range entries {
		if k != key {
			list = append(list, ranked{k, e})
		}
	}
	if key != (Key{}) {
		list = append(list, ranked{key, extra})
	}
	slices.SortFunc(list, func(a, b ranked) int {
		return cmp.Or(a.created.Compare(b.created), strings.Compare(a.key.Namespace, b.key.Namespace), strings.Compare(a.key.Name, b.key.Name))
	})
	admitted := make(map[Key]bool, len(list))
	services, endpoints := 0, 0
	why := ""
	for i, r := range list {
		services, endpoints = services+1, endpoints+r.endpoints
		if !l.within(services, endpoints) {
			cluster := r.key.Cluster
			if l.maxServices > 0 && services > l.maxServices {
				why = fmt.Sprintf("cluster %s exports more than --max-member-services=%d services: its %d oldest exports are imported, newer ones are not", cluster, l.maxServices, i)
			} else {
				why = fmt.Sprintf("cluster %s exports more than --max-member-endpoints=%d endpoints: its %d oldest exports are imported, newer ones are not", cluster, l.maxEndpoints, i)
			}
			break
		}
		admitted[r.key] = true
	}
	return admitted, why
}
