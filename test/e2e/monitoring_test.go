package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/shard"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// The chart's names with release endpoint-aggregator in the daemon's
// namespace: the alerts select job="<fullname>-metrics" and that namespace,
// the labels a ServiceMonitor scrape attaches.
const (
	monitoringRelease = "endpoint-aggregator"
	monitoringJob     = "endpoint-aggregator-metrics"
	chartPath         = "../../charts/endpoint-aggregator"
	dashboardPath     = "../../config/dashboards/endpoint-aggregator.json"
)

// TestDashboardAndAlertsAgainstRealPrometheus runs a real Prometheus that
// scrapes the daemon (every second) and evaluates the chart's alert rules
// during a scenario that makes every alert's condition true: no leader at
// first (a foreign holder keeps the Lease) while member slices change, so
// the changes take over 5s to reach the hub; a member cut off after it
// synced; a member that never answers; a hub admission policy that refuses
// one service's slices; a hub Service the daemon does not own holding
// a per-cluster name; and two members exporting a service with different
// port numbers. Every dashboard query and every alert expression must
// return data through Prometheus's HTTP API; the no-leader expression must
// return nothing once the daemon leads; and `promtool check metrics` must
// find nothing to say about /metrics.
func TestDashboardAndAlertsAgainstRealPrometheus(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	addr := freeLoopbackAddr(t)

	// The chart's rules, rendered with its defaults, as a rule file.
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	writeChartRules(t, rules)
	prom := testenv.StartPrometheus(t, []testenv.ScrapeTarget{{
		Job: monitoringJob, Addr: addr, Labels: map[string]string{"namespace": daemonNamespace},
	}}, rules)

	// A holder that is not a daemon keeps the leader Lease.
	leases := e.hub.Client.CoordinationV1().Leases(daemonNamespace)
	now := metav1.NewMicroTime(time.Now())
	if _, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "endpoint-aggregator"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("someone-else"), LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime: &now, RenewTime: &now,
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	east, west := mcsMember(e.east), mcsMember(e.west)
	proxy := e.registerViaProxy(t, e.east)
	e.register(t, "west", "west", e.west.Kubeconfig)
	dark, err := testenv.KubeconfigWithServer(e.west.Kubeconfig, "https://"+freeLoopbackAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	e.register(t, "dark", "dark", dark)
	// Nobody may write the fence of member "orphan": it stays without an
	// owner.
	denyFenceOf(t, e, "orphan")
	e.register(t, "orphan", "orphan", e.west.Kubeconfig)
	e.startDaemon(t, func(o *app.Options) {
		o.MetricsBindAddress = addr
		o.ExportMode = string(easync.ExportServiceExport)
		o.LeaderElect, o.ShardMembers = true, true
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 4*time.Second, 3*time.Second, 500*time.Millisecond
		o.ProbeInterval, o.ProbeTimeout = 500*time.Millisecond, time.Second
	})

	// While no replica leads, the hub refuses the slices of service
	// "denied", a user's Service takes the name of west's per-cluster
	// Service of cart, and the members' slices change: those changes reach
	// the hub only after the takeover, more than 5s later.
	denyHubSlicesOf(t, e, "denied")
	if _, err := e.hub.Client.CoreV1().Services(appNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: "cart-west"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	for i, m := range []member{east, west} {
		m.service(t, "cart", nil)
		m.export(t, "cart", nil)
		s := endpointSlice("cart", "cart-1", 1+i, 3, true)
		s.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: changed.UTC().Format(time.RFC3339Nano)}
		applySlices(t, m.kube, "cart", s)
	}
	west.service(t, "denied", nil)
	west.export(t, "denied", nil)
	applySlices(t, west.kube, "denied", endpointSlice("denied", "denied-1", 9, 2, true))
	// West says one endpoint of "pointed" is 10.0.0.200, in the hub's
	// Service range: refused, and counted.
	west.service(t, "pointed", nil)
	west.export(t, "pointed", nil)
	pointed := endpointSlice("pointed", "pointed-1", 8, 2, true)
	pointed.Endpoints[1].Addresses = []string{"10.0.0.200"}
	applySlices(t, west.kube, "pointed", pointed)

	// East and west export "renumbered" with different port numbers: an
	// import in conflict.
	for i, m := range []member{east, west} {
		m.service(t, "renumbered", func(s *corev1.Service) { s.Spec.Ports[0].Port = int32(80 + i) })
		m.export(t, "renumbered", nil)
	}

	alerts := chartAlerts(t, rules)
	noLeader := alerts["EndpointAggregatorNoLeader"]
	t.Run("no leader while another holder keeps the Lease", func(t *testing.T) {
		eventually(t, waitTimeout, func() error { return returnsData(ctx, prom, noLeader) })
		time.Sleep(time.Until(changed.Add(6 * time.Second)))
		if err := leases.Delete(ctx, "endpoint-aggregator", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, waitTimeout, func() error {
			s, err := prom.Query(ctx, noLeader, time.Time{})
			if err != nil {
				return err
			}
			if len(s) > 0 {
				return fmt.Errorf("%s still returns %v after the daemon took the Lease", noLeader, s)
			}
			return nil
		})
	})
	waitFor(t, e, "cart", map[string]int{"east": 3, "west": 3}, map[string]int{"east": 3, "west": 3})
	eventually(t, waitTimeout, func() error {
		imp, err := e.serviceImport(t, "renumbered")
		if err != nil {
			return err
		}
		if c := meta.FindStatusCondition(imp.Status.Conditions, endpoints.ConditionConflict); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("import renumbered: Conflict %+v, want True", c)
		}
		return nil
	})

	// East is cut off after it synced.
	proxy.Block()
	t.Cleanup(func() { _ = proxy.Unblock() })

	queries := dashboardQueries(t)
	t.Run("every dashboard query and alert expression returns data", func(t *testing.T) {
		names := make([]string, 0, len(alerts))
		for name := range alerts {
			names = append(names, name)
		}
		sort.Strings(names)
		var missing []string
		err := waitUntil(2*waitTimeout, time.Second, func() error {
			missing = missing[:0]
			for _, q := range queries {
				if err := returnsData(ctx, prom, q.expr); err != nil {
					missing = append(missing, fmt.Sprintf("panel %q: %v", q.panel, err))
				}
			}
			for _, name := range names {
				if name == "EndpointAggregatorNoLeader" {
					continue // checked above: true before the takeover, false after
				}
				if err := returnsData(ctx, prom, alerts[name]); err != nil {
					missing = append(missing, fmt.Sprintf("alert %s: %v", name, err))
				}
			}
			if len(missing) > 0 {
				return fmt.Errorf("%d queries without data", len(missing))
			}
			return nil
		})
		if err != nil {
			targets, _ := prom.Targets(ctx)
			t.Fatalf("%v (targets %v):\n%s", err, targets, strings.Join(missing, "\n"))
		}
		t.Logf("%d dashboard queries and %d alert expressions returned data", len(queries), len(alerts))
	})

	t.Run("Prometheus evaluated every alert as pending or firing", func(t *testing.T) {
		// ALERTS has a series for each alert whose condition held at an
		// evaluation, pending until its "for" passes.
		for _, name := range []string{"EndpointAggregatorNoLeader", "EndpointAggregatorMemberUnreachable",
			"EndpointAggregatorMemberNotSynced", "EndpointAggregatorSyncErrors", "EndpointAggregatorHubWriteErrors",
			"EndpointAggregatorPropagationSlow", "EndpointAggregatorNameConflicts", "EndpointAggregatorEndpointsRefused",
			"EndpointAggregatorMemberWithoutOwner", "EndpointAggregatorExportConflicts"} {
			if _, ok := alerts[name]; !ok {
				t.Errorf("the chart has no alert %s", name)
				continue
			}
			q := fmt.Sprintf(`max_over_time(ALERTS{alertname=%q}[10m])`, name)
			eventually(t, waitTimeout, func() error { return returnsData(ctx, prom, q) })
		}
	})

	t.Run("status shows a write the hub refuses as west's last error", func(t *testing.T) {
		kubeconfig := cliKubeconfig(t, e.hub, e.east, e.west)
		eventually(t, waitTimeout, func() error {
			stdout, stderr, err := runCLI(ctx, "status", "--hub-context", "hub", "-n", daemonNamespace, "-o", "json", "--kubeconfig", kubeconfig)
			if err != nil {
				return fmt.Errorf("status: %v\n%s", err, stderr)
			}
			var report struct {
				Members []cliMember `json:"members"`
			}
			if err := json.Unmarshal([]byte(stdout), &report); err != nil {
				return fmt.Errorf("status -o json: %v\n%s", err, stdout)
			}
			for _, r := range report.Members {
				// Its newest failing sync: denied's slices, or cart's
				// per-cluster Service, whose name a user's Service holds.
				if r.Name == "west" && strings.HasPrefix(r.LastError, "SyncFailed: writing its hub objects of "+appNamespace+"/") {
					return nil
				}
			}
			return fmt.Errorf("status rows %+v: west's last error does not name a write the hub refuses", report.Members)
		})
	})

	t.Run("promtool check metrics finds nothing", func(t *testing.T) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if out, err := testenv.Promtool(t, "", bytes.NewReader(body), "check", "metrics"); err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	})
}

// returnsData evaluates query now and fails unless it returns at least one
// sample that is a number.
func returnsData(ctx context.Context, prom *testenv.Prometheus, query string) error {
	s, err := prom.Query(ctx, query, time.Time{})
	if err != nil {
		return err
	}
	for _, x := range s {
		if !math.IsNaN(x.Value) {
			return nil
		}
	}
	return fmt.Errorf("%s returned %d samples, none a number", query, len(s))
}

// writeChartRules renders the chart's PrometheusRule with its defaults and
// writes its groups as a Prometheus rule file.
func writeChartRules(t *testing.T, path string) {
	t.Helper()
	out := testenv.HelmTemplate(t, chartPath, monitoringRelease, daemonNamespace,
		"--set", "prometheusRule.enabled=true", "--show-only", "templates/prometheusrule.yaml")
	var pr struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := yaml.Unmarshal(out, &pr); err != nil {
		t.Fatal(err)
	}
	b, err := yaml.JSONToYAML(pr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// chartAlerts returns the expression of each alert in the rule file.
func chartAlerts(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out[r.Alert] = r.Expr
		}
	}
	if len(out) == 0 {
		t.Fatalf("no alerts in %s", path)
	}
	return out
}

type panelQuery struct{ panel, expr string }

// dashboardQueries returns every query of the dashboard with Grafana's
// variables expanded: all jobs, and a rate window that spans the scenario.
func dashboardQueries(t *testing.T) []panelQuery {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	expand := strings.NewReplacer(`$job`, `.+`, `$__rate_interval`, `5m`)
	var out []panelQuery
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			out = append(out, panelQuery{p.Title, expand.Replace(q.Expr)})
		}
	}
	return out
}

// denyFenceOf installs an admission policy that refuses every write of a
// member's fence Lease, as a mistaken policy or quota would: no replica can
// take the member.
func denyFenceOf(t *testing.T, e *env, cluster string) {
	t.Helper()
	probe := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: daemonNamespace, Name: shard.FenceName(cluster)}}
	denyWrites(t, e, "deny-fence-"+cluster,
		admissionregistrationv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"leases"}},
		fmt.Sprintf(`object.metadata.name != %q`, shard.FenceName(cluster)), "the test's admission policy refuses this fence",
		func(ctx context.Context) error {
			_, err := e.hub.Client.CoordinationV1().Leases(daemonNamespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		})
}

// denyHubSlicesOf makes the hub's API server refuse EndpointSlices of the
// MCS service name (a ValidatingAdmissionPolicy, as an operator's policy
// would), and waits until it does.
func denyHubSlicesOf(t *testing.T, e *env, service string) {
	t.Helper()
	probe := endpointSlice(service, "policy-probe", 1, 1, true)
	probe.Namespace = appNamespace
	probe.Labels = map[string]string{"multicluster.kubernetes.io/service-name": service}
	denyWrites(t, e, "deny-"+service,
		admissionregistrationv1.Rule{APIGroups: []string{"discovery.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"endpointslices"}},
		fmt.Sprintf(`!has(object.metadata.labels) || object.metadata.labels[?'multicluster.kubernetes.io/service-name'].orValue('') != %q`, service),
		"the test's admission policy refuses these slices",
		func(ctx context.Context) error {
			_, err := e.hub.Client.DiscoveryV1().EndpointSlices(appNamespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		})
}

// denyWrites installs a ValidatingAdmissionPolicy, with its binding, that
// refuses creates and updates of rule's resources for which expression is
// false, saying message, and waits until the API server applies it: until
// the dry-run write probe is refused with message.
func denyWrites(t *testing.T, e *env, name string, rule admissionregistrationv1.Rule, expression, message string, probe func(context.Context) error) {
	t.Helper()
	ctx := context.Background()
	policies := e.hub.Client.AdmissionregistrationV1()
	if _, err := policies.ValidatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
						Rule:       rule,
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: expression, Message: message}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := policies.ValidatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitTimeout, func() error {
		err := probe(ctx)
		if err == nil {
			return fmt.Errorf("the hub still admits what policy %s refuses", name)
		}
		if !strings.Contains(err.Error(), message) {
			return fmt.Errorf("dry-run create: %v", err)
		}
		return nil
	})
}
