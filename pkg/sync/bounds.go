package sync

import (
	"cmp"
	"fmt"
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
// admitted it. It feeds the per-cluster gauges and the bounds. It knows
// only the exports synced so far: until every key of a member has been
// synced once, a newer export may be admitted and then refused for an
// older one.
type ledger struct {
	exports map[Key]ledgerEntry
	// endpoints sums the endpoints of every export; admittedEndpoints
	// those of the admitted ones; refusedExports counts the refused ones.
	endpoints, admittedEndpoints, refusedExports int
}

// ledgerEntry is one export as its last sync found it.
type ledgerEntry struct {
	created   time.Time
	endpoints int
	admitted  bool
}

// judge decides whether the export of a member key, counting from created
// with n endpoints, is within its member's bounds, given the member's
// other exports: "" admits it, anything else says why it is refused.
func (s *memberStates) judge(key Key, created time.Time, n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.members[key.Cluster]
	services, endpoints := 1, n
	if m != nil {
		old, had := m.exports[key]
		services, endpoints = len(m.exports), m.endpoints-old.endpoints+n
		if !had {
			services++
		}
	}
	if s.within(services, endpoints) {
		return ""
	}
	entries := map[Key]ledgerEntry{}
	if m != nil {
		entries = m.exports
	}
	admitted, why := s.rank(entries, key, ledgerEntry{created: created, endpoints: n})
	if admitted[key] {
		return ""
	}
	return why
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
	if m.refusedExports == 0 && s.within(len(m.exports), m.endpoints) {
		return nil, wasRefused
	}
	admitted, _ := s.rank(m.exports, Key{}, ledgerEntry{})
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
