package shard

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return out
}

func equalMembers(n, weight int) []Member {
	out := make([]Member, n)
	for i, name := range names("cluster", n) {
		out[i] = Member{Name: name, Weight: weight}
	}
	return out
}

// skewedMembers draws weights log-uniformly from 1..2000: most are small,
// a few are large.
func skewedMembers(rng *rand.Rand, n int) []Member {
	out := make([]Member, n)
	for i, name := range names("cluster", n) {
		out[i] = Member{Name: name, Weight: int(math.Pow(2000, rng.Float64()))}
	}
	return out
}

// loadsOf sums the quantized weights per replica.
func loadsOf(members []Member, got map[string]string) map[string]uint64 {
	loads := map[string]uint64{}
	for _, m := range members {
		loads[got[m.Name]] += quantize(m.Weight)
	}
	return loads
}

// capacityOf is the bound the brief defines: bound × total quantized load /
// replicas.
func capacityOf(members []Member, replicas int, bound float64) (capacity, mean float64, heaviest uint64) {
	var total uint64
	for _, m := range members {
		w := quantize(m.Weight)
		total += w
		heaviest = max(heaviest, w)
	}
	mean = float64(total) / float64(replicas)
	return bound * mean, mean, heaviest
}

func moved(a, b map[string]string) int {
	n := 0
	for k, v := range a {
		if b[k] != v {
			n++
		}
	}
	return n
}

func TestQuantize(t *testing.T) {
	for w, want := range map[int]uint64{
		-5: 1, 0: 1, 1: 1, 2: 2, 3: 4, 4: 4, 5: 8, 100: 128, 1000: 1024,
		1024: 1024, 1025: 2048, 1 << 40: maxClass,
	} {
		if got := quantize(w); got != want {
			t.Errorf("quantize(%d) = %d, want %d", w, got, want)
		}
	}
}

// TestScore checks score against hash/fnv and the published splitmix64
// output for seed 0.
func TestScore(t *testing.T) {
	// splitmix64 seeded with 0 first returns mix(0x9e3779b97f4a7c15).
	if got := mix64(0x9e3779b97f4a7c15); got != 0xe220a8397b1dcdaf {
		t.Fatalf("mix64 = %#x, want splitmix64's first output %#x", got, uint64(0xe220a8397b1dcdaf))
	}
	for _, c := range [][2]string{{"", ""}, {"a", "b"}, {"cluster-1", "replica-0"}, {"ü", "日本"}} {
		h := fnv.New64a()
		h.Write([]byte(c[0] + "\x00" + c[1]))
		if got, want := score(c[0], c[1]), mix64(h.Sum64()); got != want {
			t.Errorf("score(%q, %q) = %#x, want %#x", c[0], c[1], got, want)
		}
	}
}

func TestAssignEveryMemberOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	members := skewedMembers(rng, 300)
	replicas := []string{"replica-a", "replica-b", "replica-c"}
	got := Assign(members, replicas, DefaultBound)
	if len(got) != len(members) {
		t.Fatalf("assigned %d members, want %d", len(got), len(members))
	}
	for _, m := range members {
		r, ok := got[m.Name]
		if !ok {
			t.Fatalf("member %s not assigned", m.Name)
		}
		if !slices.Contains(replicas, r) {
			t.Fatalf("member %s assigned to unknown replica %q", m.Name, r)
		}
	}

	for _, empty := range [][]string{nil, {}} {
		got := Assign(members, empty, DefaultBound)
		if got == nil || len(got) != 0 {
			t.Errorf("Assign with replicas %#v = %v, want an empty non-nil map", empty, got)
		}
	}
	if got := Assign(nil, replicas, DefaultBound); got == nil || len(got) != 0 {
		t.Errorf("Assign with no members = %v, want an empty non-nil map", got)
	}

	dups := []string{"replica-c", "replica-a", "replica-b", "replica-a", "replica-c", "replica-c"}
	if got2 := Assign(members, dups, DefaultBound); !maps.Equal(got, got2) {
		t.Errorf("duplicate replica names changed the assignment: %d members differ", moved(got, got2))
	}

	// A repeated member is placed once and counted once.
	twice := append(slices.Clone(members), members[0])
	if got2 := Assign(twice, replicas, DefaultBound); !maps.Equal(got, got2) {
		t.Errorf("a repeated member changed the assignment: %d members differ", moved(got, got2))
	}
}

func TestAssignDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	members := skewedMembers(rng, 500)
	members = append(members, Member{"cluster-0007", 5000}) // same name, heavier
	replicas := names("replica", 7)
	want := Assign(members, replicas, DefaultBound)
	for i := range 20 {
		ms, rs := slices.Clone(members), slices.Clone(replicas)
		rng.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
		rng.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
		if i%2 == 1 {
			rs = append(rs, rs[0])
		}
		if got := Assign(ms, rs, DefaultBound); !maps.Equal(got, want) {
			t.Fatalf("shuffle %d: %d members placed differently", i, moved(got, want))
		}
	}
}

func TestAssignBoundedLoad(t *testing.T) {
	tight := 0
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 99))
		members := skewedMembers(rng, rng.IntN(400))
		replicas := names("replica", 1+rng.IntN(12))
		bound := []float64{1, DefaultBound, 1.5, 2}[rng.IntN(4)]
		got := Assign(members, replicas, bound)
		capacity, mean, heaviest := capacityOf(members, len(replicas), bound)
		loads := loadsOf(members, got)
		for r, load := range loads {
			if float64(load) > capacity+float64(heaviest) {
				t.Fatalf("seed %d: replica %s holds %d > capacity %.1f + heaviest %d",
					seed, r, load, capacity, heaviest)
			}
		}
		// If every member fits in the headroom capacity − mean, a member
		// only finds every replica full when the placed load already
		// exceeds the total, which cannot happen, so no replica goes over.
		// (capacity/2 is not enough: see TestHalfCapacityIsNotEnough.)
		if float64(heaviest) <= capacity-mean {
			tight++
			for r, load := range loads {
				if float64(load) > capacity {
					t.Fatalf("seed %d: replica %s holds %d > capacity %.1f though every member weighs ≤ %.1f",
						seed, r, load, capacity, capacity-mean)
				}
			}
		}
	}
	if tight < 40 {
		t.Errorf("only %d of 200 inputs had every member within the headroom; the test proves little", tight)
	}
}

// TestHalfCapacityIsNotEnough: 7 equal members on 3 replicas give capacity
// 1.25 × 7/3 ≈ 2.92, and every member weighs 1 ≤ capacity/2, yet some
// replica must hold 3 by pigeonhole, whatever the algorithm.
func TestHalfCapacityIsNotEnough(t *testing.T) {
	members := equalMembers(7, 1)
	got := Assign(members, []string{"a", "b", "c"}, DefaultBound)
	capacity, _, heaviest := capacityOf(members, 3, DefaultBound)
	top := slices.Max(slices.Collect(maps.Values(loadsOf(members, got))))
	if float64(top) <= capacity || float64(top) > capacity+float64(heaviest) {
		t.Fatalf("fullest replica holds %d, want in (%.2f, %.2f]", top, capacity, capacity+float64(heaviest))
	}
}

func TestAssignPureHRWMovesMinimally(t *testing.T) {
	const bound = 1000 // capacity ≥ the total load: the bound never binds
	rng := rand.New(rand.NewPCG(5, 6))
	members := skewedMembers(rng, 1000)
	replicas := names("replica", 5)
	before := Assign(members, replicas, bound)

	after := Assign(members, append(slices.Clone(replicas), "replica-new"), bound)
	n := 0
	for m, r := range before {
		if after[m] != r {
			n++
			if after[m] != "replica-new" {
				t.Fatalf("adding a replica moved %s from %s to %s", m, r, after[m])
			}
		}
	}
	if n == 0 {
		t.Fatal("adding a replica moved nothing")
	}

	removed := replicas[2]
	after = Assign(members, slices.Delete(slices.Clone(replicas), 2, 3), bound)
	n = 0
	for m, r := range before {
		if r == removed {
			n++
			if after[m] == removed {
				t.Fatalf("%s still on removed replica", m)
			}
		} else if after[m] != r {
			t.Fatalf("removing %s moved %s from %s to %s", removed, m, r, after[m])
		}
	}
	if n == 0 {
		t.Fatal("the removed replica held nothing")
	}
}

func TestAssignBoundedMovesLittle(t *testing.T) {
	const limit = 0.35
	members := equalMembers(600, 10)
	three := []string{"replica-a", "replica-b", "replica-c"}
	four := append(slices.Clone(three), "replica-d")
	on3 := Assign(members, three, DefaultBound)
	on4 := Assign(members, four, DefaultBound)

	f := float64(moved(on3, on4)) / float64(len(members))
	t.Logf("3 → 4 replicas (add replica-d): %.1f%% of members moved", 100*f)
	if f > limit {
		t.Errorf("3 → 4 replicas moved %.1f%% of members, want ≤ %.0f%%", 100*f, 100*limit)
	}
	// Removing each of the four in turn; removing replica-d is the reverse
	// of the step above.
	for i, gone := range four {
		fewer := slices.Delete(slices.Clone(four), i, i+1)
		f := float64(moved(on4, Assign(members, fewer, DefaultBound))) / float64(len(members))
		t.Logf("4 → 3 replicas (remove %s): %.1f%% of members moved", gone, 100*f)
		if f > limit {
			t.Errorf("4 → 3 replicas (remove %s) moved %.1f%% of members, want ≤ %.0f%%", gone, 100*f, 100*limit)
		}
	}
}

func TestAssignSpread(t *testing.T) {
	members := equalMembers(1000, 1)
	replicas := []string{"replica-a", "replica-b", "replica-c"}
	got := Assign(members, replicas, DefaultBound)
	counts := map[string]int{}
	for _, r := range got {
		counts[r]++
	}
	mean := float64(len(members)) / float64(len(replicas))
	for _, r := range replicas {
		t.Logf("%s: %d members", r, counts[r])
		if counts[r] == 0 || float64(counts[r]) > DefaultBound*mean {
			t.Errorf("%s holds %d members, want 1..%.1f", r, counts[r], DefaultBound*mean)
		}
	}
}

func TestAssignHeavyMember(t *testing.T) {
	replicas := []string{"replica-a", "replica-b", "replica-c"}

	// One member heavier than the capacity, with small ones around it.
	members := append(equalMembers(20, 1), Member{"huge", 100000})
	capacity, _, _ := capacityOf(members, len(replicas), DefaultBound)
	if float64(quantize(100000)) <= capacity {
		t.Fatalf("test setup: huge fits in capacity %.1f", capacity)
	}
	got := Assign(members, replicas, DefaultBound)
	r, ok := got["huge"]
	if !ok || !slices.Contains(replicas, r) {
		t.Fatalf("huge assigned to %q (%v), want one of %v", r, ok, replicas)
	}
	// Placed first, onto empty replicas: the least-loaded tie goes by rank.
	top := slices.MaxFunc(replicas, func(a, b string) int {
		return cmp.Compare(score("huge", a), score("huge", b))
	})
	if r != top {
		t.Errorf("huge on %s, want its top-ranked replica %s", r, top)
	}
	for _, m := range members {
		if m.Name != "huge" && got[m.Name] == r {
			t.Errorf("%s shares the overfull replica %s", m.Name, r)
		}
	}

	// Three members each heavier than the capacity of four replicas
	// (1.25 × 3 × 1024 / 4 = 960 < 1024) land on three different replicas.
	heavy := []Member{{"h1", 1000}, {"h2", 1000}, {"h3", 1000}}
	got = Assign(heavy, append(slices.Clone(replicas), "replica-d"), DefaultBound)
	if len(got) != 3 || got["h1"] == got["h2"] || got["h1"] == got["h3"] || got["h2"] == got["h3"] {
		t.Errorf("heavy members not on the least-loaded replicas: %v", got)
	}
}

func TestAssignBoundBelowOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	members := skewedMembers(rng, 200)
	replicas := names("replica", 4)
	want := Assign(members, replicas, 1)
	for _, b := range []float64{0.5, 0, -1, math.NaN()} {
		if got := Assign(members, replicas, b); !maps.Equal(got, want) {
			t.Errorf("bound %v differs from bound 1 on %d members", b, moved(got, want))
		}
	}
}

func benchmarkAssign(b *testing.B, members, replicas int) {
	ms := skewedMembers(rand.New(rand.NewPCG(9, 10)), members)
	rs := names("replica", replicas)
	b.ReportAllocs()
	for b.Loop() {
		Assign(ms, rs, DefaultBound)
	}
}

func BenchmarkAssign(b *testing.B) { benchmarkAssign(b, 1000, 3) }

func BenchmarkAssign10000x10(b *testing.B) { benchmarkAssign(b, 10000, 10) }

// TestWeighUnknownAtTheMean: while the hub fills, members' weights appear
// one by one; a fleet of like members must place the same way throughout,
// or a cold start moves members that are being connected.
func TestWeighUnknownAtTheMean(t *testing.T) {
	names := make([]string, 300)
	for i := range names {
		names[i] = fmt.Sprintf("m%03d", i)
	}
	replicas := []string{"a", "b", "c"}
	known := map[string]bool{}
	weight := func(n string) int {
		if known[n] {
			return 100
		}
		return 0
	}
	first := Assign(Weigh(names, weight), replicas, DefaultBound)
	rng := rand.New(rand.NewPCG(3, 5))
	for _, i := range rng.Perm(len(names)) {
		known[names[i]] = true
		if got := Assign(Weigh(names, weight), replicas, DefaultBound); moved(first, got) != 0 {
			t.Fatalf("with %d of %d weights known, %d members moved", len(known), len(names), moved(first, got))
		}
	}
	// A member that weighs nothing among known ones weighs their mean,
	// rounded up; one known weight is kept as it is.
	ms := Weigh([]string{"x", "y", "z"}, func(n string) int { return map[string]int{"x": 3, "y": 4}[n] })
	if ms[2].Weight != 4 || ms[0].Weight != 3 {
		t.Errorf("Weigh = %v, want z at the rounded-up mean 4 and x kept at 3", ms)
	}
}
