package shard

import (
	"cmp"
	"math/bits"
	"slices"
	"strings"
)

// Member is one member cluster to place: its name and its load, the number
// of endpoints it exports (zero or less counts as 1).
type Member struct {
	Name   string
	Weight int
}

// DefaultBound is how far over the mean load a replica may go: no replica
// holds more than 1.25 × the mean, unless one member alone weighs more.
const DefaultBound = 1.25

// maxClass caps a quantized weight so that sums of loads cannot overflow.
const maxClass = 1 << 32

// Assign places every member on one of replicas and returns member name → replica.
// It returns an empty (non-nil) map when replicas is empty. Deterministic: the same
// input in any order gives the same output (sort inputs internally; dedupe replica names).
//
// It is rendezvous (highest-random-weight) hashing with bounded load:
//   - A member's load is its weight quantized up to a power of two, so
//     endpoint churn within a class does not reshuffle.
//   - capacity = bound × total load / number of replicas (bound < 1 counts as 1).
//   - Members are placed heaviest first (ties by name). Each goes to the
//     highest-scoring replica with room for it; if none has room, to the
//     least-loaded replica (ties by score, then name).
//
// A member listed twice is placed once, with the larger weight.
// It costs O(members × replicas) hashing plus sorting the members.
func Assign(members []Member, replicas []string, bound float64) map[string]string {
	out := make(map[string]string, len(members))
	reps := slices.Clone(replicas)
	slices.Sort(reps)
	reps = slices.Compact(reps)
	if len(reps) == 0 {
		return out
	}
	if !(bound >= 1) { // also catches NaN
		bound = 1
	}

	type item struct {
		name string
		w    uint64
	}
	items := make([]item, len(members))
	for i, m := range members {
		items[i] = item{m.Name, quantize(m.Weight)}
	}
	// Heaviest first, then by name.
	slices.SortFunc(items, func(a, b item) int {
		if c := cmp.Compare(b.w, a.w); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	// Drop repeated names; the first copy kept is the heaviest. out doubles
	// as the set of names seen.
	var total uint64
	kept := items[:0]
	for _, it := range items {
		if _, dup := out[it.name]; dup {
			continue
		}
		out[it.name] = ""
		total += it.w
		kept = append(kept, it)
	}
	capacity := bound * float64(total) / float64(len(reps))

	loads := make([]uint64, len(reps))
	for _, it := range kept {
		h := fnvString(fnvOffset, it.name)
		h = fnvByte(h, 0)
		fit, least := -1, 0
		var fitScore, leastScore uint64
		for i, r := range reps {
			s := mix64(fnvString(h, r))
			// Strict > keeps the earlier (smaller) name on equal scores.
			if float64(loads[i]+it.w) <= capacity && (fit < 0 || s > fitScore) {
				fit, fitScore = i, s
			}
			if i == 0 || loads[i] < loads[least] || (loads[i] == loads[least] && s > leastScore) {
				least, leastScore = i, s
			}
		}
		if fit < 0 {
			fit = least
		}
		loads[fit] += it.w
		out[it.name] = reps[fit]
	}
	return out
}

// Weigh returns the members to Assign, each weighing what weight says, and
// a member that weighs nothing yet (the hub holds none of its endpoints:
// not synced once) the mean of the others, rounded up. Members' weights
// appear one by one while the hub fills: were the unknown ones to weigh 1,
// each arrival would reorder the placement and move members that are
// being connected; weighed at the mean, a fleet of like members places the
// same way throughout.
func Weigh(names []string, weight func(string) int) []Member {
	out := make([]Member, len(names))
	known, sum := 0, 0
	for i, n := range names {
		out[i] = Member{Name: n, Weight: weight(n)}
		if out[i].Weight > 0 {
			known++
			sum += out[i].Weight
		}
	}
	if known == 0 || known == len(out) {
		return out
	}
	mean := (sum + known - 1) / known
	for i := range out {
		if out[i].Weight <= 0 {
			out[i].Weight = mean
		}
	}
	return out
}

// quantize returns the weight class of w: the least power of two ≥ max(1, w),
// capped at maxClass.
func quantize(w int) uint64 {
	if w <= 1 {
		return 1
	}
	if uint64(w) >= maxClass {
		return maxClass
	}
	return 1 << bits.Len64(uint64(w-1))
}

// score ranks replica for member: FNV-1a 64 of member + "\x00" + replica,
// then mix64. It depends on the bytes only, so it is stable across processes.
func score(member, replica string) uint64 {
	h := fnvString(fnvOffset, member)
	h = fnvByte(h, 0)
	return mix64(fnvString(h, replica))
}

// FNV-1a 64, as in hash/fnv, written out so that a member's prefix is hashed
// once per member and no hasher is allocated.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvByte(h uint64, b byte) uint64 {
	return (h ^ uint64(b)) * fnvPrime
}

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = fnvByte(h, s[i])
	}
	return h
}

// mix64 is splitmix64's finalizer. FNV-1a spreads a change in the last bytes
// poorly; after mix64 every input bit affects every output bit.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
