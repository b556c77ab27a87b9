package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// conformanceEnv names the suite's test binary (`make mcs-conformance`).
const conformanceEnv = "ENDPOINT_AGGREGATOR_MCS_CONFORMANCE"

// TestMCSConformance runs the MCS API conformance suite (its every spec,
// Connectivity and DNS included) on a ClusterSet of three clusters with real
// nodes in which every cluster imports: each runs a daemon that registers
// the others and itself, and CoreDNS serving clusterset.local from its own
// imports as its pods' DNS. The suite's pods name images that cannot be
// pulled here: they are built locally (busybox from Debian's busybox-static,
// a socat stand-in doing what the suite asks of socat), imported, and a
// MutatingAdmissionPolicy in each cluster sets imagePullPolicy Never on the
// suite's pods; nothing else of the suite is changed.
func TestMCSConformance(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireAssets(t)
	suite := os.Getenv(conformanceEnv)
	if suite == "" {
		t.Fatalf("%s is not set: run `make mcs-conformance` and point it at the binary (make test-node does)", conformanceEnv)
	}
	before := testenv.SnapshotHost()
	var dirs []string
	t.Cleanup(func() {
		if left := testenv.Leftovers(before, dirs...); len(left) > 0 {
			t.Errorf("left behind:\n%s", strings.Join(left, "\n"))
		}
	})
	names := []string{"alpha", "beta", "gamma"}
	var specs []testenv.Spec
	for _, n := range names {
		specs = append(specs, testenv.Spec{Name: n, Options: testenv.Options{CRDs: true,
			Node: &testenv.NodeOptions{ClusterDNSAtHost: true, MCSConformance: true}}})
	}
	cs := testenv.StartAllT(t, specs...)
	for _, c := range cs {
		dirs = append(dirs, c.Dir)
	}
	kubeconfig := testenv.MergedKubeconfig(t, cs...)
	for _, c := range cs {
		testenv.StartCoreDNSAt(t, c.KubeconfigPath, c.Node.HostIP)
		mustCreateNamespace(t, c.Client, daemonNS)
		neverPull(t, c)
		for _, other := range cs {
			if other != c {
				register(t, c, daemonNS, other)
			}
		}
		d, err := app.NewDaemon(daemonOptions(c.Name), c.Config, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Logf("daemon of %s: %v", c.Name, err)
			}
		})
		eventually(t, 2*time.Minute, func() error {
			if !d.Ready() {
				return fmt.Errorf("daemon of %s not ready", c.Name)
			}
			return nil
		})
	}

	report := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(suite, "-kubeconfig", kubeconfig, "-contexts", strings.Join(names, ","),
		"-ginkgo.v", "-ginkgo.no-color", "-ginkgo.json-report", report, "-ginkgo.timeout", "20m")
	cmd.Dir = t.TempDir()
	out, runErr := cmd.CombinedOutput()
	passed, failed, skipped, lines := summarize(t, report)
	t.Logf("MCS conformance (%s): %d passed, %d failed, %d skipped\n%s", filepath.Base(suite), passed, failed, skipped, strings.Join(lines, "\n"))
	if runErr != nil || failed > 0 {
		t.Errorf("the conformance suite failed: %v\n%s", runErr, tailLines(string(out), 80))
	}
}

func daemonOptions(cluster string) *app.Options {
	o := app.NewOptions()
	o.Namespace = daemonNS
	o.ExportMode = string(easync.ExportServiceExport)
	o.HubIsMember = true
	o.HubClusterName = cluster
	o.MetricsBindAddress = "0"
	o.LeaderElect = false
	// The suite creates and deletes a namespace per spec.
	o.CreateNamespaces = true
	return o
}

// neverPull makes the cluster's API server set imagePullPolicy Never on the
// conformance suite's pods (namespaces mcs-conformance-*): their images are
// imported, and pulling would leave the machine.
func neverPull(t *testing.T, c *testenv.Cluster) {
	t.Helper()
	ctx := context.Background()
	name := "mcs-conformance-never-pull"
	mp := c.Client.AdmissionregistrationV1().MutatingAdmissionPolicies()
	if _, err := mp.Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
					},
				}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name: "conformance-namespace", Expression: `object.metadata.namespace.startsWith("mcs-conformance-")`,
			}},
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{
					Expression: `Object{spec: Object.spec{containers: object.spec.containers.map(c, Object.spec.containers{name: c.name, imagePullPolicy: "Never"})}}`,
				},
			}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: name},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// summarize reads Ginkgo's JSON report: counts by state, and one line per
// spec (with the reason of a skip or failure).
func summarize(t *testing.T, path string) (passed, failed, skipped int, lines []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("no Ginkgo report: %v", err)
		return
	}
	var reports []struct {
		SpecReports []struct {
			ContainerHierarchyTexts []string
			LeafNodeText            string
			LeafNodeType            string
			State                   string
			Failure                 *struct{ Message string }
		}
	}
	if err := json.Unmarshal(b, &reports); err != nil {
		t.Errorf("Ginkgo report: %v", err)
		return
	}
	for _, r := range reports {
		for _, s := range r.SpecReports {
			if s.LeafNodeType != "It" {
				continue
			}
			name := strings.TrimSpace(strings.Join(append(s.ContainerHierarchyTexts, s.LeafNodeText), " "))
			line := fmt.Sprintf("  %-8s %s", s.State, name)
			switch s.State {
			case "passed":
				passed++
			case "skipped", "pending":
				skipped++
			default:
				failed++
			}
			if s.Failure != nil && s.Failure.Message != "" {
				line += ": " + strings.SplitN(s.Failure.Message, "\n", 2)[0]
			}
			lines = append(lines, line)
		}
	}
	return passed, failed, skipped, lines
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
