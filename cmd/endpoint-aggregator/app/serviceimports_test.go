package app

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
)

// A hub whose ServiceImport CRD does not serve v1beta1 is refused, with a
// message naming the CRD and the version the daemon needs.
func TestHubWithoutV1beta1ServiceImportsIsRefused(t *testing.T) {
	serving := func(versions ...string) []*metav1.APIResourceList {
		var out []*metav1.APIResourceList
		for _, v := range versions {
			out = append(out, &metav1.APIResourceList{GroupVersion: "multicluster.x-k8s.io/" + v,
				APIResources: []metav1.APIResource{{Name: "serviceimports"}, {Name: "serviceexports"}}})
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		resources []*metav1.APIResourceList
		want      string // in the error; "" for none
	}{
		{"current CRDs", serving("v1beta1", "v1alpha1"), ""},
		{"v1beta1 only", serving("v1beta1"), ""},
		{"v1alpha1 only", serving("v1alpha1"), "serviceimports.multicluster.x-k8s.io serves v1alpha1 but not v1beta1"},
		{"no CRD", nil, "serves no CustomResourceDefinition serviceimports.multicluster.x-k8s.io"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := kubefake.NewClientset().Discovery().(*fakediscovery.FakeDiscovery)
			d.Resources = tc.resources
			err := checkServiceImportServed(d)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "multicluster.x-k8s.io/v1beta1")):
				t.Fatalf("error %v, want one saying %q and naming multicluster.x-k8s.io/v1beta1", err, tc.want)
			}
		})
	}
}
