package endpoints

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"unique"

	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
)

// randomSource returns a source of a few member slices over two port sets
// and both families, with addresses repeated across slices in different
// states, hostnames and node names set or not.
func randomSource(r *rand.Rand) Source {
	portSets := [][]discoveryv1.EndpointPort{httpPorts, {slicePort("grpc", 9090), slicePort("http", 8080)}}
	var list []*discoveryv1.EndpointSlice
	for s := range 1 + r.IntN(4) {
		at, addr := discoveryv1.AddressTypeIPv4, func(i int) string { return fmt.Sprintf("10.0.0.%d", i) }
		if r.IntN(3) == 0 {
			at, addr = discoveryv1.AddressTypeIPv6, func(i int) string { return fmt.Sprintf("fd00::%x", i) }
		}
		var eps []discoveryv1.Endpoint
		for range r.IntN(12) {
			ep := endpoint(addr(1+r.IntN(20)), r.IntN(3) > 0)
			switch r.IntN(3) {
			case 0:
				ep.Conditions.Ready = nil
			case 1:
				ep.Hostname = ptr.To(fmt.Sprintf("web-%d", r.IntN(3)))
			}
			if r.IntN(2) == 0 {
				ep.NodeName = nil
			} else {
				ep.NodeName = ptr.To(fmt.Sprintf("node-%d", r.IntN(3)))
			}
			eps = append(eps, ep)
		}
		list = append(list, memberSlice(fmt.Sprintf("s-%d", s), at, portSets[r.IntN(2)], eps...))
	}
	return testSource(list...)
}

// perClusterEndpointsUpdate, which compares without making the
// Endpoints, agrees with comparing the Endpoints made, for sources alike
// and different, and the update it makes is the one merging them makes.
func TestPerClusterEndpointsUpdateAgreesWithTheObject(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	differ := 0
	for i := range 3000 {
		a, b := randomSource(r), randomSource(r)
		if i%3 == 0 {
			b = a // in sync
		}
		live := DigestEndpoints(PerClusterEndpoints(a))
		want := EndpointsUpToDate(PerClusterEndpoints(b), live)
		update := perClusterEndpointsUpdate(b, live)
		if got := update == nil; got != want {
			t.Fatalf("case %d: current = %v, comparing the objects says %v\nlive: %+v\nwant: %+v", i, got, want, PerClusterEndpoints(a).Subsets, PerClusterEndpoints(b).Subsets)
		}
		if merged := MergeEndpoints(PerClusterEndpoints(b), live); update != nil && !apiequality.Semantic.DeepEqual(update, merged) {
			t.Fatalf("case %d: update\n%+v\nmerging the objects makes\n%+v", i, update, merged)
		}
		if !want {
			differ++
		}
	}
	if differ < 1000 {
		t.Fatalf("only %d of 3000 cases differ: the sources are too alike to test anything", differ)
	}
}

// Truncated Endpoints compare the same way.
func TestPerClusterEndpointsUpdateWhenTruncated(t *testing.T) {
	src := benchSource(MaxEndpointsAddresses + 50)
	live := DigestEndpoints(PerClusterEndpoints(src))
	if perClusterEndpointsUpdate(src, live) != nil {
		t.Fatal("a truncated Endpoints in sync reads as changed")
	}
	for _, n := range []int{MaxEndpointsAddresses - 1, MaxEndpointsAddresses + 51} {
		changed := benchSource(n)
		want := EndpointsUpToDate(PerClusterEndpoints(changed), live)
		if got := perClusterEndpointsUpdate(changed, live) == nil; got != want {
			t.Errorf("%d endpoints against %d: current = %v, comparing the objects says %v", n, MaxEndpointsAddresses+50, got, want)
		}
	}
}

// A member plan whose hub objects are in sync allocates nearly the same
// for a service of 10,000 endpoints as for one of 1,000: no allocation per
// endpoint or per slice. What grows is the Go maps' tables (one per ~900
// entries).
func TestInSyncPlanAllocationsDoNotGrowWithTheService(t *testing.T) {
	allocs := func(n int) float64 {
		src := benchSource(n)
		view := viewAfter(t, MemberView{}, PlanMember(testNamespace, testService, testCluster, &src, PerClusterMirror, MemberView{}))
		if p := PlanMember(testNamespace, testService, testCluster, &src, PerClusterMirror, view); !p.Empty() {
			t.Fatalf("%d endpoints: the plan after its own writes is not empty", n)
		}
		return testing.AllocsPerRun(3, func() {
			PlanMember(testNamespace, testService, testCluster, &src, PerClusterMirror, view)
		})
	}
	small, large := allocs(1000), allocs(10000)
	t.Logf("allocations per in-sync plan: %.0f at 1,000 endpoints, %.0f at 10,000", small, large)
	// Before, a plan made every address's text: over two allocations per
	// endpoint. One per 100 added endpoints is what a slice would cost;
	// half that leaves room for the maps.
	if perEndpoint := (large - small) / 9000; perEndpoint >= 0.02 {
		t.Errorf("%.3f allocations per added endpoint (%.0f at 1,000, %.0f at 10,000), want < 0.02", perEndpoint, small, large)
	}
}

// BenchmarkPlanMemberInSync plans a member service of 1,000 endpoints
// whose hub objects are in sync: MCS slices and per-cluster Endpoints.
func BenchmarkPlanMemberInSync(b *testing.B) {
	src := benchSource(1000)
	view := viewAfter(b, MemberView{}, PlanMember(testNamespace, testService, testCluster, &src, PerClusterMirror, MemberView{}))
	b.ReportAllocs()
	for b.Loop() {
		PlanMember(testNamespace, testService, testCluster, &src, PerClusterMirror, view)
	}
}

// BenchmarkPlanMemberOneChange plans a member service of 1,000 endpoints,
// in ten slices, after one endpoint of one slice turned not ready: one MCS
// slice and the per-cluster Endpoints (one object of all 1,000 addresses)
// are written.
func BenchmarkPlanMemberOneChange(b *testing.B) {
	src := benchSource(1000)
	view := viewAfter(b, MemberView{}, PlanMember(testNamespace, testService, testCluster, &src, PerClusterMirror, MemberView{}))
	changed := benchSource(1000)
	changed.Slices[4].Endpoints[42].markNotReady(map[unique.Handle[attributes]]unique.Handle[attributes]{})
	plan := PlanMember(testNamespace, testService, testCluster, &changed, PerClusterMirror, view)
	if len(plan.Slices.Update) != 1 || len(plan.Slices.Create)+len(plan.Slices.Delete) != 0 || plan.Endpoints.Update == nil {
		b.Fatalf("want one slice and the Endpoints updated, got %s", describe(plan.Slices))
	}
	b.ReportAllocs()
	for b.Loop() {
		PlanMember(testNamespace, testService, testCluster, &changed, PerClusterMirror, view)
	}
}

// compareAddrText orders addresses as their text does.
func TestCompareAddrTextOrdersAsTheText(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	random := func() netip.Addr {
		switch r.IntN(4) {
		case 0: // small octets, so that prefixes ("1" and "10") meet
			return netip.AddrFrom4([4]byte{byte(r.IntN(3)), byte(r.IntN(12)), byte(r.IntN(30)), byte(r.IntN(256))})
		case 1:
			var b [4]byte
			for i := range b {
				b[i] = byte(r.IntN(256))
			}
			return netip.AddrFrom4(b)
		case 2:
			var b [16]byte
			b[0], b[1], b[15] = 0xfd, byte(r.IntN(2)), byte(r.IntN(20))
			return netip.AddrFrom16(b)
		default:
			var b [16]byte
			for i := range b {
				b[i] = byte(r.IntN(3) * r.IntN(256))
			}
			return netip.AddrFrom16(b)
		}
	}
	for range 200000 {
		a, b := random(), random()
		if got, want := compareAddrText(a, b), strings.Compare(a.String(), b.String()); got != want {
			t.Fatalf("compareAddrText(%s, %s) = %d, text says %d", a, b, got, want)
		}
	}
}
