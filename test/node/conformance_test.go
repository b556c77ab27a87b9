package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

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
// suite's pods; nothing else of the suite is changed. It passes only if
// every spec the suite selected ran and passed (conformanceVerdict): Ginkgo
// itself exits 0 when no spec ran, or when specs skip themselves.
//
// It runs in IPv4 and in dual-stack clusters, never IPv6-only. This copy of
// the suite starts its servers as `socat TCP-LISTEN:42,...` (image
// alpine/socat:1.7.4.4): socat 1.7.4 listens there on IPv4 alone (0.0.0.0;
// its TCP6-LISTEN would take IPv6), and the stand-in does the same. An
// IPv6-only pod has no IPv4 address to be reached at, so the spec
// "Connectivity to remote services with an exported ClusterIP service should
// be accessible through DNS" cannot pass there: the client's
// `nc hello.<ns>.svc.clusterset.local 42` can only reach the IPv6 ClusterSet
// IP, and the pod refuses it. In dual-stack clusters the suite's Services
// are its own, with no ipFamilyPolicy: single-stack IPv4, the clusters'
// primary family, so the imports are IPv4 and the specs pass. Made
// dual-stack, that spec fails there too: the client's busybox nc (glibc
// getaddrinfo, no gai.conf) puts the AAAA record of a unique local address
// before the A record, connects to the IPv6 ClusterSet IP only, and the
// IPv4-only listener refuses it; that is the suite's server, not the
// daemon (TestMCSNewerConformanceSpecs reaches the IPv6 ClusterSet IPs).
func TestMCSConformance(t *testing.T) {
	for _, family := range []testenv.Family{testenv.FamilyIPv4, testenv.FamilyDualStack} {
		t.Run(family.String(), func(t *testing.T) { mcsConformance(t, family) })
	}
}

func mcsConformance(t *testing.T, family testenv.Family) {
	testenv.RequireRoot(t)
	testenv.RequireAssets(t)
	testenv.RequireFamily(t, family)
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
			Node: &testenv.NodeOptions{ClusterDNSAtHost: true, MCSConformance: true, Family: family}}})
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
		runDaemon(t, c)
	}

	report := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(suite, "-kubeconfig", kubeconfig, "-contexts", strings.Join(names, ","),
		"-ginkgo.v", "-ginkgo.no-color", "-ginkgo.json-report", report, "-ginkgo.timeout", "20m")
	cmd.Dir = t.TempDir()
	out, runErr := cmd.CombinedOutput()
	reports, err := readGinkgoReport(report)
	if err != nil {
		t.Fatalf("the conformance suite (exit: %v) left no report: %v\n%s", runErr, err, tailLines(string(out), 80))
	}
	n := tally(reports)
	t.Logf("MCS conformance (%s): %d passed, %d failed, %d skipped\n%s", filepath.Base(suite), n.passed, n.failed, n.skipped, strings.Join(n.lines, "\n"))
	if err := conformanceVerdict(reports); err != nil || runErr != nil {
		t.Errorf("the conformance suite failed: %v (exit: %v)\n%s", err, runErr, tailLines(string(out), 80))
	}
}

// The judgement of TestMCSConformance on Ginkgo reports of the shape the
// suite writes (`-ginkgo.json-report`). It needs no root: it reads files.
func TestConformanceVerdictPassesOnlyWhenEverySelectedSpecPassed(t *testing.T) {
	spec := func(state string) string {
		return `{"ContainerHierarchyTexts":["Connectivity to remote services"],"LeafNodeText":"should be accessible","LeafNodeType":"It","State":"` + state + `"}`
	}
	specs := func(states ...string) string {
		var out []string
		for _, s := range states {
			out = append(out, spec(s))
		}
		return strings.Join(out, ",")
	}
	suite := func(succeeded bool, total, selected int, reports string) string {
		return fmt.Sprintf(`[{"SuitePath":"/conformance","SuiteDescription":"Conformance Suite","SuiteSucceeded":%t,"SpecialSuiteFailureReasons":null,`+
			`"PreRunStats":{"TotalSpecs":%d,"SpecsThatWillRun":%d},"SpecReports":[%s]}]`, succeeded, total, selected, reports)
	}
	afterSuite := `{"LeafNodeText":"MCS conformance report","LeafNodeType":"ReportAfterSuite","State":"passed"}`
	passed8 := specs("passed", "passed", "passed", "passed", "passed", "passed", "passed", "passed")
	for _, tc := range []struct {
		name, report string
		pass         bool
	}{
		{name: "eight specs selected, eight passed", report: suite(true, 8, 8, passed8+","+afterSuite), pass: true},
		{name: "specs not selected are not counted", report: suite(true, 10, 8, passed8+","+specs("skipped", "pending")), pass: true},
		{name: "no spec in the suite", report: suite(true, 0, 0, "")},
		// What the suite writes with a focus that matches nothing; it exits 0.
		{name: "no spec selected", report: suite(true, 8, 0, specs("skipped", "skipped", "skipped", "skipped", "skipped", "skipped", "skipped", "skipped")+","+afterSuite)},
		{name: "one spec failed", report: suite(false, 2, 2, specs("passed", "failed"))},
		{name: "one spec timed out", report: suite(false, 2, 2, specs("passed", "timedout"))},
		{name: "a selected spec skipped itself", report: suite(true, 2, 2, specs("passed", "skipped"))},
		{name: "fewer specs reported than selected", report: suite(true, 3, 3, specs("passed", "passed"))},
		// What the suite writes when it cannot reach its clusters: its
		// specs are not reported at all.
		{name: "BeforeSuite failed", report: suite(false, 8, 8,
			`{"LeafNodeType":"BeforeSuite","State":"failed","Failure":{"Message":"Expected success, but got an error"}},`+afterSuite)},
		{name: "no suite in the report", report: `[]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "report.json")
			if err := os.WriteFile(path, []byte(tc.report), 0o600); err != nil {
				t.Fatal(err)
			}
			reports, err := readGinkgoReport(path)
			if err != nil {
				t.Fatal(err)
			}
			err = conformanceVerdict(reports)
			if tc.pass && err != nil {
				t.Errorf("judged failed, want passed: %v", err)
			}
			if !tc.pass {
				if err == nil {
					t.Error("judged passed, want failed")
				} else {
					t.Logf("judged failed: %v", err)
				}
			}
		})
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
	conformancePolicy(t, c, "mcs-conformance-never-pull", "pods",
		`Object{spec: Object.spec{containers: object.spec.containers.map(c, Object.spec.containers{name: c.name, imagePullPolicy: "Never"})}}`)
}

// conformancePolicy creates a MutatingAdmissionPolicy, and its binding, that
// applies expression (an ApplyConfiguration) to every resource (of the core
// group) created in the suites' namespaces (mcs-conformance-*).
func conformancePolicy(t *testing.T, c *testenv.Cluster, name, resource, expression string) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Client.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{resource}},
					},
				}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name: "conformance-namespace", Expression: `object.metadata.namespace.startsWith("mcs-conformance-")`,
			}},
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType:          admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: expression},
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

// ginkgoReport is what the tests read of one suite in Ginkgo's JSON report
// (github.com/onsi/ginkgo/v2/types.Report; the file holds a list of them).
type ginkgoReport struct {
	SuiteSucceeded             bool
	SpecialSuiteFailureReasons []string
	// PreRunStats counts the suite's specs and those selected to run: the
	// others (pending, or left out by a focus or skip) are reported as
	// pending or skipped.
	PreRunStats struct{ TotalSpecs, SpecsThatWillRun int }
	// SpecReports holds the specs (LeafNodeType It) and the suite's setup
	// nodes (BeforeSuite, ...).
	SpecReports []struct {
		ContainerHierarchyTexts []string
		LeafNodeText            string
		LeafNodeType            string
		State                   string
		Failure                 *struct{ Message string }
	}
}

func readGinkgoReport(path string) ([]ginkgoReport, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var reports []ginkgoReport
	if err := json.Unmarshal(b, &reports); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return reports, nil
}

// specTally counts the specs of Ginkgo reports by state, with one line per
// spec (and the reason of a failure or skip).
type specTally struct {
	passed, failed, skipped int
	// failedNames names the specs and setup nodes that did not pass.
	failedNames []string
	lines       []string
}

func tally(reports []ginkgoReport) specTally {
	var n specTally
	for _, r := range reports {
		for _, s := range r.SpecReports {
			name := strings.TrimSpace(strings.Join(append(s.ContainerHierarchyTexts, s.LeafNodeText), " "))
			if s.LeafNodeType != "It" {
				// A failed BeforeSuite fails the run; its specs are skipped.
				if s.State != "passed" {
					n.failedNames = append(n.failedNames, strings.TrimSpace(s.LeafNodeType+" "+name))
				}
				continue
			}
			line := fmt.Sprintf("  %-8s %s", s.State, name)
			switch s.State {
			case "passed":
				n.passed++
			case "skipped", "pending":
				n.skipped++
			default: // failed, panicked, timedout, interrupted, aborted
				n.failed++
				n.failedNames = append(n.failedNames, name)
			}
			if s.Failure != nil && s.Failure.Message != "" {
				line += ": " + strings.SplitN(s.Failure.Message, "\n", 2)[0]
			}
			n.lines = append(n.lines, line)
		}
	}
	return n
}

// conformanceVerdict judges a run of the conformance suite from its Ginkgo
// report: it passed only if the suite succeeded, selected at least one spec,
// and every selected spec passed. A suite that ran no spec succeeds in
// Ginkgo's eyes (and exits 0), and so does one whose specs Skip themselves
// (the suite skips specs that need two clusters when it has fewer); neither
// is a conformance pass.
func conformanceVerdict(reports []ginkgoReport) error {
	if len(reports) == 0 {
		return errors.New("the report holds no suite")
	}
	var errs []error
	selected := 0
	for _, r := range reports {
		selected += r.PreRunStats.SpecsThatWillRun
		if !r.SuiteSucceeded {
			err := errors.New("the suite did not succeed")
			if len(r.SpecialSuiteFailureReasons) > 0 {
				err = fmt.Errorf("%w: %s", err, strings.Join(r.SpecialSuiteFailureReasons, "; "))
			}
			errs = append(errs, err)
		}
	}
	n := tally(reports)
	switch {
	case selected == 0:
		errs = append(errs, errors.New("the suite selected no spec to run"))
	case n.passed < selected:
		errs = append(errs, fmt.Errorf("%d of the %d selected specs passed (%d failed, %d skipped)", n.passed, selected, n.failed, n.skipped))
	}
	if len(n.failedNames) > 0 {
		errs = append(errs, fmt.Errorf("did not pass: %s", strings.Join(n.failedNames, "; ")))
	}
	return errors.Join(errs...)
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
