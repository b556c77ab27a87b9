package sync

import (
	"cmp"
	"iter"
	"maps"
	"slices"
	"strings"
	stdsync "sync"
	"time"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/addresses"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// memberStates is everything this replica keeps of its keys between their
// syncs, by member: each member's export ledger (bounds.go), the endpoints
// its keys refused, what they removed from invalid exports, and, under the
// member "", the export conflicts of the clusterset keys. The per-member
// metrics are read from it. A member's part is dropped in one step (drop)
// when a sync finds this replica no longer writes the member's keys (not
// owned here, unregistered; "": no longer merging), so a replica reports
// only what it writes.
type memberStates struct {
	bounds
	mu      stdsync.Mutex
	members map[string]*memberState
}

// memberState is what is kept of one member's keys.
type memberState struct {
	ledger
	// refused holds, for each key whose sync refused endpoints, how many
	// by reason.
	refused map[Key][addresses.NumReasons]int
	// invalid holds, for each key whose Service or export had fields the
	// hub would refuse, what was removed.
	invalid map[Key]string
	// conflicts holds, for each clusterset key whose import's exports
	// conflict, the conflicts last reported (member "" only).
	conflicts map[Key][]endpoints.Conflict
}

func newMemberStates(maxServices, maxEndpoints int) *memberStates {
	return &memberStates{bounds: bounds{maxServices: maxServices, maxEndpoints: maxEndpoints}, members: map[string]*memberState{}}
}

// member returns the part of cluster, creating it when create is set (nil
// otherwise, when there is none). The caller holds mu.
func (s *memberStates) member(cluster string, create bool) *memberState {
	m := s.members[cluster]
	if m == nil && create {
		m = &memberState{
			ledger:    ledger{exports: map[Key]ledgerEntry{}, census: map[Key]ledgerEntry{}},
			refused:   map[Key][addresses.NumReasons]int{},
			invalid:   map[Key]string{},
			conflicts: map[Key][]endpoints.Conflict{},
		}
		s.members[cluster] = m
	}
	return m
}

// tidy forgets the part of cluster once it holds nothing. The caller
// holds mu.
func (s *memberStates) tidy(cluster string) {
	if m := s.members[cluster]; m != nil && len(m.exports) == 0 && len(m.census) == 0 && len(m.refused) == 0 && len(m.invalid) == 0 && len(m.conflicts) == 0 {
		delete(s.members, cluster)
	}
}

// drop forgets everything kept of a member's keys ("": of the clusterset
// keys).
func (s *memberStates) drop(cluster string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.members, cluster)
}

// keys lists the keys of a member ("": the clusterset keys) something is
// kept of.
func (s *memberStates) keys(cluster string) []Key {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.members[cluster]
	if m == nil {
		return nil
	}
	set := map[Key]bool{}
	for _, it := range []iter.Seq[Key]{maps.Keys(m.exports), maps.Keys(m.refused), maps.Keys(m.invalid), maps.Keys(m.conflicts)} {
		for k := range it {
			set[k] = true
		}
	}
	// In one order, so that the keys are queued alike every time.
	return slices.SortedFunc(maps.Keys(set), func(a, b Key) int {
		return cmp.Or(strings.Compare(a.Cluster, b.Cluster), strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
}

// has reports whether anything is kept of a member's keys.
func (s *memberStates) has(cluster string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.members[cluster] != nil
}

// kept is what changed when a sync's findings were kept (keep), for
// settle to report.
type kept struct {
	// conflictsBefore are the export conflicts kept before, when they
	// changed (conflictsChanged).
	conflictsBefore  []endpoints.Conflict
	conflictsChanged bool
	// seeded are the keys of the census kept: their syncs correct it.
	seeded                         []Key
	refusedChanged, invalidChanged bool
	// again and wasRefused are recordExport's.
	again      []Key
	wasRefused bool
}

// keep keeps what a sync of key found (out), in one go, and returns what
// changed.
func (s *memberStates) keep(key Key, out *outcome) kept {
	var k kept
	if out.conflicts != nil {
		k.conflictsBefore, k.conflictsChanged = s.recordExportConflicts(key, out.conflicts.list)
	}
	if out.census != nil {
		k.seeded = s.seedCensus(key.Cluster, out.census)
	}
	if out.unread {
		s.forgetCensus(key.Cluster)
	}
	if out.endpoints == nil || key.IsClusterSet() {
		return k
	}
	k.refusedChanged = s.recordRefused(key, out.refused)
	k.invalidChanged = s.recordInvalidExport(key, out.invalidExport)
	k.again, k.wasRefused = s.recordExport(key, out.export)
	return k
}

// recordRefused remembers what a member key's sync refused (nil or none:
// nothing) and reports whether that changed.
func (s *memberStates) recordRefused(key Key, r *endpoints.Refusals) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.tidy(key.Cluster)
	none := r == nil || r.Total() == 0
	m := s.member(key.Cluster, !none)
	if m == nil {
		return false
	}
	before, had := m.refused[key]
	if none {
		delete(m.refused, key)
		return had
	}
	m.refused[key] = r.Counts
	return !had || before != r.Counts
}

// recordInvalidExport remembers what a member key's sync removed from its
// Service and export (none: nothing) and reports whether that changed.
func (s *memberStates) recordInvalidExport(key Key, problems []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.tidy(key.Cluster)
	now := strings.Join(problems, "; ")
	m := s.member(key.Cluster, now != "")
	if m == nil {
		return false
	}
	before := m.invalid[key]
	if now == "" {
		delete(m.invalid, key)
	} else {
		m.invalid[key] = now
	}
	return before != now
}

// recordExportConflicts remembers the conflicts of a clusterset key's
// import (none: forgets it) and returns those remembered before, and
// whether they changed.
func (s *memberStates) recordExportConflicts(key Key, now []endpoints.Conflict) ([]endpoints.Conflict, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.tidy(key.Cluster)
	m := s.member(key.Cluster, len(now) > 0)
	var before []endpoints.Conflict
	if m != nil {
		before = m.conflicts[key]
		if len(now) == 0 {
			delete(m.conflicts, key)
		} else {
			m.conflicts[key] = slices.Clone(now)
		}
	}
	return before, !slices.EqualFunc(before, now, sameConflict)
}

// memberTotals is what the per-member gauges say of one member.
type memberTotals struct {
	// services and endpoints count the exports admitted and their
	// endpoints; refusedServices the exports refused under the bounds.
	services, endpoints, refusedServices int
	// refused sums the endpoints refused by reason; nil when none of its
	// keys refused any.
	refused *[addresses.NumReasons]int
}

// totals returns the per-member gauges of every member with something
// kept (not "").
func (s *memberStates) totals() map[string]memberTotals {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]memberTotals, len(s.members))
	for cluster, m := range s.members {
		if cluster == "" {
			continue
		}
		t := memberTotals{services: len(m.exports) - m.refusedExports, endpoints: m.admittedEndpoints, refusedServices: m.refusedExports}
		for _, counts := range m.refused {
			if t.refused == nil {
				t.refused = new([addresses.NumReasons]int)
			}
			for r, n := range counts {
				t.refused[r] += n
			}
		}
		out[cluster] = t
	}
	return out
}

// conflictCounts counts the clusterset keys whose exports conflict, by
// reason.
func (s *memberStates) conflictCounts() map[endpoints.ConflictReason]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[endpoints.ConflictReason]int{}
	if m := s.members[""]; m != nil {
		for _, list := range m.conflicts {
			for _, cf := range list {
				out[cf.Reason]++ // one Conflict per reason
			}
		}
	}
	return out
}

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

// sameConflict reports whether a and b say the same of an import.
func sameConflict(a, b endpoints.Conflict) bool {
	return a.Reason == b.Reason && a.Message == b.Message && slices.Equal(a.Clusters, b.Clusters)
}
