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
