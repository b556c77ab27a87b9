package sync

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	stdsync "sync"
	"time"
)

// Defaults of the per-member bounds (Options.MaxMemberServices and
// MaxMemberEndpoints): generous, so that only a member far out of the
// ordinary meets them.
const (
	DefaultMaxMemberServices  = 10000
	DefaultMaxMemberEndpoints = 100000
)

// exportLedger holds, for each member, the exports its keys' last syncs
// found: when each counts from, how many endpoints it brings, and whether
// the sync admitted it. It feeds the per-cluster gauges and keeps each
// member within its bounds, so that one member cannot slow the others: a
// member's exports rank oldest first (export time, then namespace/name)
// and are admitted while their number stays within maxServices and their
// endpoints within maxEndpoints; the export that crosses a bound, and
// every newer one, is refused. The ledger knows only the exports synced
// so far: until every key of a member has been synced once, a newer
// export may be admitted and then refused for an older one.
type exportLedger struct {
	maxServices, maxEndpoints int // 0: no bound
	mu                        stdsync.Mutex
	members                   map[string]*memberExports
}

// memberExports is one member's part of the ledger.
type memberExports struct {
	exports map[Key]ledgerEntry
	// endpoints sums the endpoints of every export; admitted and refused
	// count the exports by what their last sync did.
	endpoints, admittedEndpoints, refused int
}

// ledgerEntry is one export as its last sync found it.
type ledgerEntry struct {
	created   time.Time
	endpoints int
	admitted  bool
}

func newExportLedger(maxServices, maxEndpoints int) *exportLedger {
	return &exportLedger{maxServices: maxServices, maxEndpoints: maxEndpoints, members: map[string]*memberExports{}}
}

// judge decides whether the export of a member key, counting from created
// with n endpoints, is within its member's bounds, given the member's
// other exports: "" admits it, anything else says why it is refused.
func (l *exportLedger) judge(key Key, created time.Time, n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.members[key.Cluster]
	services, endpoints := 1, n
	if m != nil {
		old, had := m.exports[key]
		services, endpoints = len(m.exports), m.endpoints-old.endpoints+n
		if !had {
			services++
		}
	}
	if l.within(services, endpoints) {
		return ""
	}
	entries := map[Key]ledgerEntry{}
	if m != nil {
		entries = m.exports
	}
	admitted, why := l.rank(entries, key, ledgerEntry{created: created, endpoints: n})
	if admitted[key] {
		return ""
	}
	return why
}

// record sets what the last sync of a member key found (nil: no export)
// and returns the member's other keys whose last sync the ranking now
// decides otherwise, to sync again, and whether the key's export was
// refused before.
func (l *exportLedger) record(key Key, e *ledgerEntry) (again []Key, wasRefused bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.members[key.Cluster]
	if m == nil {
		if e == nil {
			return nil, false
		}
		m = &memberExports{exports: map[Key]ledgerEntry{}}
		l.members[key.Cluster] = m
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
	if len(m.exports) == 0 {
		delete(l.members, key.Cluster)
		return nil, wasRefused
	}
	if m.refused == 0 && l.within(len(m.exports), m.endpoints) {
		return nil, wasRefused
	}
	admitted, _ := l.rank(m.exports, Key{}, ledgerEntry{})
	for k, entry := range m.exports {
		if k != key && entry.admitted != admitted[k] {
			again = append(again, k)
		}
	}
	return again, wasRefused
}

func (m *memberExports) add(e ledgerEntry) {
	m.endpoints += e.endpoints
	if e.admitted {
		m.admittedEndpoints += e.endpoints
	} else {
		m.refused++
	}
}

func (m *memberExports) remove(e ledgerEntry) {
	m.endpoints -= e.endpoints
	if e.admitted {
		m.admittedEndpoints -= e.endpoints
	} else {
		m.refused--
	}
}

func (l *exportLedger) within(services, endpoints int) bool {
	return (l.maxServices <= 0 || services <= l.maxServices) && (l.maxEndpoints <= 0 || endpoints <= l.maxEndpoints)
}

// rank admits the oldest exports of entries, with extra standing in for
// the entry of key when key is set, and says why the first refused one
// is refused.
func (l *exportLedger) rank(entries map[Key]ledgerEntry, key Key, extra ledgerEntry) (map[Key]bool, string) {
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

// clusterTotals returns, per member, the exports admitted, their
// endpoints and the exports refused.
func (l *exportLedger) clusterTotals() map[string][3]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string][3]int, len(l.members))
	for cluster, m := range l.members {
		out[cluster] = [3]int{len(m.exports) - m.refused, m.admittedEndpoints, m.refused}
	}
	return out
}
