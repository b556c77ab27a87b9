package config_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcscrd "sigs.k8s.io/mcs-api/config/crd"
	"sigs.k8s.io/yaml"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
)

// TestCRDsMatchModule checks that config/crd holds exactly the CRDs embedded
// in the mcs-api module the daemon is built against. After bumping
// sigs.k8s.io/mcs-api, copy them again from
// $(go env GOMODCACHE)/sigs.k8s.io/mcs-api@VERSION/config/crd/.
func TestCRDsMatchModule(t *testing.T) {
	for file, want := range map[string][]byte{
		"crd/multicluster.x-k8s.io_serviceexports.yaml": mcscrd.ServiceExportCRD,
		"crd/multicluster.x-k8s.io_serviceimports.yaml": mcscrd.ServiceImportCRD,
	} {
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the CRD embedded in sigs.k8s.io/mcs-api", file)
		}
	}
}

// TestKustomizationsResolve checks that every resource a kustomization.yaml
// lists exists, and that no YAML file in config/ is left out, except the hub
// RBAC (rbac/hub-*.yaml): the Helm chart renders it, and config/ is the
// member-side base, so listing it would grant hub rights in members.
// charts/charts_test.go checks the hub RBAC against the chart.
func TestKustomizationsResolve(t *testing.T) {
	listed := map[string]bool{}
	for _, dir := range []string{".", "crd", "rbac"} {
		var k struct {
			Resources []string `json:"resources"`
		}
		readYAML(t, filepath.Join(dir, "kustomization.yaml"), &k)
		if len(k.Resources) == 0 {
			t.Errorf("%s/kustomization.yaml lists no resources", dir)
		}
		for _, r := range k.Resources {
			p := filepath.Join(dir, r)
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s/kustomization.yaml: %v", dir, err)
			}
			listed[p] = true
		}
	}
	for _, dir := range []string{"crd", "rbac"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, f := range files {
			base := filepath.Base(f)
			hub := strings.HasPrefix(base, "hub-")
			switch {
			case base == "kustomization.yaml":
			case hub && listed[f]:
				t.Errorf("%s is hub RBAC: it must not be in a member kustomization.yaml", f)
			case !hub && !listed[f]:
				t.Errorf("%s is in no kustomization.yaml", f)
			}
		}
	}
}

// TestSampleMemberSecret checks the registration Secret sample carries what
// the daemon looks for.
func TestSampleMemberSecret(t *testing.T) {
	var s struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		StringData map[string]string `json:"stringData"`
	}
	readYAML(t, "samples/member-secret.yaml", &s)
	if s.Kind != "Secret" {
		t.Errorf("kind %q", s.Kind)
	}
	if s.Metadata.Labels["endpoint-aggregator.io/member-cluster"] != "true" {
		t.Error("missing label endpoint-aggregator.io/member-cluster: \"true\"")
	}
	if s.Metadata.Annotations["endpoint-aggregator.io/cluster-name"] == "" {
		t.Error("missing annotation endpoint-aggregator.io/cluster-name")
	}
	var kc struct {
		Kind  string `json:"kind"`
		Users []struct {
			User map[string]any `json:"user"`
		} `json:"users"`
	}
	if err := yaml.Unmarshal([]byte(s.StringData["kubeconfig"]), &kc); err != nil {
		t.Fatalf("kubeconfig does not parse: %v", err)
	}
	if kc.Kind != "Config" || len(kc.Users) != 1 || kc.Users[0].User["token"] == nil {
		t.Errorf("kubeconfig should be a Config with one token user, got %+v", kc)
	}
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestApplyToCluster applies config/ and the sample Secret to a real
// apiserver with kubectl, and checks what the member ServiceAccount may do.
// It needs the binaries from `make tools`.
func TestApplyToCluster(t *testing.T) {
	assets := testenv.RequireAssets(t)
	kubectl := filepath.Join(assets, "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("no kubectl in %s: run `make tools`", assets)
	}
	c := testenv.StartT(t, "config", testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	run := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", c.KubeconfigPath}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
	}
	run("apply", "-k", ".")
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "endpoint-aggregator"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	run("apply", "-f", "samples/member-secret.yaml")

	sa := "system:serviceaccount:endpoint-aggregator-member:endpoint-aggregator-member"
	for _, tc := range []struct {
		group, resource, sub, verb string
		allowed                    bool
	}{
		{"", "services", "", "list", true},
		{"", "services", "", "watch", true},
		{"discovery.k8s.io", "endpointslices", "", "list", true},
		{"multicluster.x-k8s.io", "serviceexports", "", "watch", true},
		{"multicluster.x-k8s.io", "serviceexports", "status", "patch", true},
		{"", "services", "", "create", false},
		{"discovery.k8s.io", "endpointslices", "", "delete", false},
		{"multicluster.x-k8s.io", "serviceexports", "", "update", false},
		{"", "secrets", "", "get", false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   sa,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:endpoint-aggregator-member"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: tc.group, Resource: tc.resource, Subresource: tc.sub, Verb: tc.verb, Namespace: "shop",
			},
		}}
		got, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != tc.allowed {
			t.Errorf("%s %s/%s %s: allowed=%v, want %v", tc.verb, tc.group, tc.resource, tc.sub, got.Status.Allowed, tc.allowed)
		}
	}
}

// TestServiceImportCRDKeepsEndpointSliceObjects checks that the stored
// version of the ServiceImport CRD the chart and config/ ship has
// status.endpointSliceObjects, which the daemon sets to Present: a CRD
// without it would prune the field.
func TestServiceImportCRDKeepsEndpointSliceObjects(t *testing.T) {
	data, err := os.ReadFile("crd/multicluster.x-k8s.io_serviceimports.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name    string `json:"name"`
				Storage bool   `json:"storage"`
				Schema  struct {
					OpenAPIV3Schema struct {
						Properties map[string]struct {
							Properties map[string]any `json:"properties"`
						} `json:"properties"`
					} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	for _, v := range crd.Spec.Versions {
		if !v.Storage {
			continue
		}
		if v.Name != "v1beta1" {
			t.Errorf("stored version %s, want v1beta1", v.Name)
		}
		if _, ok := v.Schema.OpenAPIV3Schema.Properties["status"].Properties["endpointSliceObjects"]; !ok {
			t.Errorf("%s status has no endpointSliceObjects", v.Name)
		}
		return
	}
	t.Error("no stored version")
}
