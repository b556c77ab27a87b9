package endpoints

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// encodedMemberSlices returns n endpoints in slices of perSlice, as a
// member's API server sends them (JSON, without managed fields): what the
// EndpointSlice controller writes for a Deployment's pods spread over 50
// nodes in 3 zones, with topology hints.
func encodedMemberSlices(tb testing.TB, n, perSlice int) [][]byte {
	var out [][]byte
	for first := 0; first < n; first += perSlice {
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("web-%05d", first/perSlice), Namespace: "shop",
				UID: types.UID(fmt.Sprintf("uid-%d", first)), ResourceVersion: "123456", Generation: 3,
				CreationTimestamp: metav1.Now(),
				Labels: map[string]string{
					discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io", "app": "web",
				},
				Annotations:     map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().UTC().Format(time.RFC3339Nano)},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: "svc-uid", Controller: ptr.To(true)}},
			},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{slicePort("http", 8080)},
		}
		for i := first; i < min(first+perSlice, n); i++ {
			zone := fmt.Sprintf("zone-%c", 'a'+i%3)
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
				NodeName:   ptr.To(fmt.Sprintf("node-%03d", i%50)),
				Zone:       ptr.To(zone),
				Hints:      &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: zone}}},
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: fmt.Sprintf("web-7d9f8b6c5d-%05d", i), UID: types.UID(fmt.Sprintf("pod-uid-%d", i))},
			})
		}
		b, err := json.Marshal(sl)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// stripLikeBefore does what the member informers' transform did before the
// caches held projections: it dropped what the sync never read and shared
// condition values and node and zone names.
func stripLikeBefore(s *discoveryv1.EndpointSlice, names map[string]*string) {
	bools := [2]bool{false, true}
	share := func(p *bool) *bool {
		if p == nil {
			return nil
		}
		if *p {
			return &bools[1]
		}
		return &bools[0]
	}
	intern := func(p *string) *string {
		if p == nil {
			return nil
		}
		if q, ok := names[*p]; ok {
			return q
		}
		names[*p] = p
		return p
	}
	s.ManagedFields, s.OwnerReferences = nil, nil
	s.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: s.Annotations[corev1.EndpointsLastChangeTriggerTime]}
	s.Endpoints = append([]discoveryv1.Endpoint(nil), s.Endpoints...)
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		ep.TargetRef, ep.DeprecatedTopology = nil, nil
		ep.Conditions.Ready = share(ep.Conditions.Ready)
		ep.Conditions.Serving = share(ep.Conditions.Serving)
		ep.Conditions.Terminating = share(ep.Conditions.Terminating)
		ep.NodeName, ep.Zone = intern(ep.NodeName), intern(ep.Zone)
	}
}

// heapGrowth returns how much the live heap grew while build ran, counting
// only what its result keeps.
func heapGrowth(build func() any) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	kept := build()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

// BenchmarkMemberCacheBytes measures what a member cache retains per
// endpoint for 100,000 endpoints in slices of 100: the decoded object, the
// object as the transform stripped it before, and the projection.
func BenchmarkMemberCacheBytes(b *testing.B) {
	const total, perSlice = 100_000, 100
	raw := encodedMemberSlices(b, total, perSlice)
	for _, bc := range []struct {
		name string
		keep func(s *discoveryv1.EndpointSlice, names map[string]*string) any
	}{
		{"object", func(s *discoveryv1.EndpointSlice, _ map[string]*string) any { return s }},
		{"stripped", func(s *discoveryv1.EndpointSlice, names map[string]*string) any { stripLikeBefore(s, names); return s }},
		{"projection", func(s *discoveryv1.EndpointSlice, _ map[string]*string) any { return ProjectSlice(s) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var grown int64
			for b.Loop() {
				grown += heapGrowth(func() any {
					names := map[string]*string{}
					kept := make([]any, len(raw))
					for i, data := range raw {
						s := &discoveryv1.EndpointSlice{}
						if err := json.Unmarshal(data, s); err != nil {
							b.Fatal(err)
						}
						kept[i] = bc.keep(s, names)
					}
					return kept
				})
			}
			b.ReportMetric(float64(grown)/float64(b.N*total), "B/endpoint")
			b.ReportMetric(0, "ns/op") // the time is decoding, not what is measured
			if bc.name == "projection" {
				b.ReportMetric(float64(unsafe.Sizeof(MemberEndpoint{})), "B/MemberEndpoint")
			}
		})
	}
}
