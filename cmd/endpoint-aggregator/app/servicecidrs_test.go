package app

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
)

// A hub that serves no ServiceCIDRs cannot tell the daemon its Service
// ranges: the daemon refuses to start rather than let members point at
// hub ClusterIPs, and says which flag fixes it.
func TestCheckServiceCIDRsServed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		resources []*metav1.APIResourceList
		wantErr   bool
	}{
		{"served", []*metav1.APIResourceList{{GroupVersion: "networking.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "ingresses"}, {Name: "servicecidrs"}}}}, false},
		{"group without servicecidrs", []*metav1.APIResourceList{{GroupVersion: "networking.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "ingresses"}}}}, true},
		{"no such group version", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := kubefake.NewClientset().Discovery().(*fakediscovery.FakeDiscovery)
			d.Resources = tc.resources
			err := checkServiceCIDRsServed(d)
			if (err != nil) != tc.wantErr {
				t.Fatalf("checkServiceCIDRsServed = %v, want error %v", err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "--hub-service-cidrs") {
				t.Errorf("error %q does not name --hub-service-cidrs", err)
			}
		})
	}
}
