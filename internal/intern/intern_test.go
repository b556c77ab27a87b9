package intern

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
)

func TestPortsSharesEqualSetsOnly(t *testing.T) {
	mk := func() []discoveryv1.EndpointPort {
		return []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)},
			{Name: ptr.To("grpc"), Port: ptr.To[int32](9090), AppProtocol: ptr.To("grpc")},
		}
	}
	a, b := mk(), mk()
	sa, sb := Ports(a), Ports(b)
	if !apiequality.Semantic.DeepEqual(sa, a) {
		t.Fatalf("shared ports %+v differ from %+v", sa, a)
	}
	if &sa[0] != &sb[0] {
		t.Error("equal ports were not shared")
	}
	if &sa[0] == &a[0] {
		t.Error("the shared set aliases the caller's slice")
	}
	// Each field set differently, and unset, is a different set.
	variants := []func(p *discoveryv1.EndpointPort){
		func(p *discoveryv1.EndpointPort) { p.Name = nil },
		func(p *discoveryv1.EndpointPort) { p.Name = ptr.To("") },
		func(p *discoveryv1.EndpointPort) { p.Port = nil },
		func(p *discoveryv1.EndpointPort) { p.Protocol = nil },
		func(p *discoveryv1.EndpointPort) { p.Protocol = ptr.To(corev1.ProtocolUDP) },
		func(p *discoveryv1.EndpointPort) { p.AppProtocol = ptr.To("h2c") },
	}
	for i, change := range variants {
		c := mk()
		change(&c[0])
		if got := Ports(c); !apiequality.Semantic.DeepEqual(got, c) || &got[0] == &sa[0] {
			t.Errorf("variant %d: got %+v, want its own set %+v", i, got, c)
		}
	}
	if Ports(nil) != nil || Ports([]discoveryv1.EndpointPort{}) != nil {
		t.Error("no ports should give nil")
	}
}
