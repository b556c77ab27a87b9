package compact

import (
	"fmt"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
)

func TestEndpointSliceSharesValuesWithoutChangingThem(t *testing.T) {
	mk := func() *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{}
		for i := 0; i < 4; i++ {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
				Addresses: []string{fmt.Sprintf("10.0.0.%d", i)},
				Conditions: discoveryv1.EndpointConditions{
					Ready: ptr.To(i%2 == 0), Serving: ptr.To(true), Terminating: nil,
				},
				NodeName: ptr.To(fmt.Sprintf("node-%d", i%2)),
				Zone:     ptr.To("zone-a"),
			})
		}
		s.Endpoints[3].Zone = nil
		return s
	}
	got, want := mk(), mk()
	EndpointSlice(got)
	if !apiequality.Semantic.DeepEqual(got, want) {
		t.Fatalf("values changed:\n got %+v\nwant %+v", got, want)
	}
	eps := got.Endpoints
	if eps[0].NodeName != eps[2].NodeName || eps[0].Zone != eps[1].Zone {
		t.Error("equal names are not shared")
	}
	if eps[0].Conditions.Ready != eps[2].Conditions.Ready || eps[0].Conditions.Serving != eps[1].Conditions.Serving {
		t.Error("equal conditions are not shared")
	}
	if eps[0].Conditions.Ready == eps[1].Conditions.Ready {
		t.Error("true and false share a pointer")
	}
	other := mk()
	EndpointSlice(other)
	if other.Endpoints[1].NodeName != eps[1].NodeName {
		t.Error("names are not shared across slices")
	}
}

func TestEndpointSliceTrimsCapacity(t *testing.T) {
	s := &discoveryv1.EndpointSlice{Endpoints: make([]discoveryv1.Endpoint, 3, 8)}
	EndpointSlice(s)
	if len(s.Endpoints) != 3 || cap(s.Endpoints) != 3 {
		t.Errorf("len %d cap %d, want 3 and 3", len(s.Endpoints), cap(s.Endpoints))
	}
}

// A full table starts afresh instead of refusing new names for good.
func TestInternTableStartsAfreshWhenFull(t *testing.T) {
	tbl := internTable{m: map[string]*string{}}
	for i := range maxInterned {
		tbl.intern(ptr.To(fmt.Sprint("old-node-", i)))
	}
	a, b := tbl.intern(ptr.To("new-node")), tbl.intern(ptr.To("new-node"))
	if a != b {
		t.Error("a new name is not shared once the table is full")
	}
	if len(tbl.m) > maxInterned {
		t.Errorf("%d names interned, bound %d", len(tbl.m), maxInterned)
	}
}
