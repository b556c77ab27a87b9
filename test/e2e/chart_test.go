package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	"sigs.k8s.io/yaml"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/daemonconfig"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

const (
	chartDir = "../../charts/endpoint-aggregator"
	// chartRelease is the release name; the chart names its ServiceAccount,
	// roles and bindings after it.
	chartRelease = "endpoint-aggregator"
)

// chartUser is the identity of the chart's ServiceAccount, as the hub's
// authenticator would present a pod's token.
var chartUser = rest.ImpersonationConfig{
	UserName: "system:serviceaccount:" + daemonNamespace + ":" + chartRelease,
	Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + daemonNamespace, "system:authenticated"},
}

// TestChartRBACIsEnoughForTheDaemonAndNoMore installs the rendered chart on
// the hub (its pods never run: the test hub has no nodes) and runs the daemon
// in-process with the chart's arguments, as the chart's ServiceAccount. The
// daemon must do its whole job (aggregate, report conflicts and missing
// namespaces, withdraw an unregistered member, create namespaces when the
// chart allows it) without a single Forbidden answer, and the ServiceAccount
// must not reach Secrets outside its namespace.
func TestChartRBACIsEnoughForTheDaemonAndNoMore(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	kubectl := filepath.Join(testenv.RequireAssets(t), "kubectl")
	forbidden := &forbiddenRecorder{}

	// Annotation mode, as the other e2e tests; member liveness Leases renewed
	// every second (memberHealth.leaseDuration=4s), so that the test sees
	// them created and deleted quickly.
	values := []string{"--set", "exportMode=annotation", "--set", "memberHealth.leaseDuration=4s"}
	manifests := installChart(t, e, kubectl, values...)
	for _, get := range []func() error{
		func() error {
			_, err := e.hub.Client.CoreV1().ServiceAccounts(daemonNamespace).Get(ctx, chartRelease, metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := e.hub.Client.RbacV1().ClusterRoleBindings().Get(ctx, chartRelease, metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := e.hub.Client.RbacV1().RoleBindings(daemonNamespace).Get(ctx, chartRelease, metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := e.hub.Client.AppsV1().Deployments(daemonNamespace).Get(ctx, chartRelease, metav1.GetOptions{})
			return err
		},
	} {
		if err := get(); err != nil {
			t.Fatalf("chart object missing after apply: %v", err)
		}
	}

	// A user's own Service where a per-cluster one would go, and an export
	// into a namespace the hub lacks: both make the daemon record Events
	// (in the app namespace and in "default").
	if _, err := e.hub.Client.CoreV1().Services(appNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: "lonely-east"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mustCreateNamespace(t, e.east.Client, "billing")
	exportServiceIn(t, e.east, "billing", "invoices")

	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	d := startChartDaemon(t, e, manifests, forbidden)

	exportCartAndLonely(t, e)
	wait := waitUnforbidden(forbidden)

	t.Run("the daemon aggregates both members with the chart's RBAC", func(t *testing.T) {
		wait(t, func() error {
			if err := cartAggregated(t, e); err != nil {
				return err
			}
			// The configuration the daemon publishes, as the chart's values say.
			if c, err := daemonconfig.Read(ctx, e.hub.Client.CoreV1(), daemonNamespace); err != nil || c == nil || c.Flags["export-mode"] != "annotation" {
				return fmt.Errorf("published configuration %+v (%v), want export-mode annotation", c, err)
			}
			// The Leases the Role is for: leader election, member liveness.
			for _, name := range []string{chartRelease, easync.MemberLeasePrefix + "east", easync.MemberLeasePrefix + "west"} {
				if _, err := e.hub.Client.CoordinationV1().Leases(daemonNamespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
					return fmt.Errorf("Lease %s: %w", name, err)
				}
			}
			return nil
		})
		d.waitSettled(t)
	})

	t.Run("conflicts and missing namespaces are reported as Events", func(t *testing.T) {
		wait(t, func() error {
			if ev := eventsAbout(t, e, appNamespace, "Service", "lonely-east"); !strings.Contains(ev, easync.ReasonNameConflict) {
				return fmt.Errorf("no %s Event on the foreign Service; events: %q", easync.ReasonNameConflict, ev)
			}
			if ev := eventsAbout(t, e, metav1.NamespaceDefault, "Namespace", "billing"); !strings.Contains(ev, "NamespaceMissing") {
				return fmt.Errorf("no NamespaceMissing Event in default; events: %q", ev)
			}
			return nil
		})
		if _, err := e.hub.Client.CoreV1().Namespaces().Get(ctx, "billing", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("namespace billing on the hub: %v; the chart's defaults must not let the daemon create it", err)
		}
	})

	t.Run("deleting a member Secret withdraws its objects", func(t *testing.T) {
		if err := e.hub.Client.CoreV1().Secrets(daemonNamespace).Delete(ctx, "west", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		wait(t, func() error {
			st := e.hubState(t, "cart")
			if want := map[string]int{"east": 3}; !reflect.DeepEqual(st.total, want) {
				return fmt.Errorf("hub slice endpoints per cluster %v, want %v", st.total, want)
			}
			if st.perClusterServices["west"] || st.perClusterEndpoints["west"] {
				return fmt.Errorf("west's per-cluster Service/Endpoints still there: %v %v", st.perClusterServices, st.perClusterEndpoints)
			}
			if !reflect.DeepEqual(st.importClusters, []string{"east"}) {
				return fmt.Errorf("ServiceImport status.clusters %v, want [east]", st.importClusters)
			}
			if _, err := e.hub.Client.CoordinationV1().Leases(daemonNamespace).Get(ctx, easync.MemberLeasePrefix+"west", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("west's liveness Lease: %v, want it deleted", err)
			}
			return nil
		})
		d.waitSettled(t)
	})

	t.Run("createNamespaces=true lets the daemon create hub namespaces", func(t *testing.T) {
		d.stop()
		manifests := installChart(t, e, kubectl, append(values, "--set", "createNamespaces=true")...)
		d := startChartDaemon(t, e, manifests, forbidden)
		wait(t, func() error {
			_, err := e.hub.Client.CoreV1().Services("billing").Get(ctx, "invoices-east", metav1.GetOptions{})
			return err
		})
		d.waitSettled(t)
	})

	t.Run("the daemon was never refused", func(t *testing.T) {
		if n, reqs := forbidden.get(); n > 0 {
			t.Errorf("%d requests as the chart's ServiceAccount were Forbidden:\n%s", n, strings.Join(reqs, "\n"))
		}
	})

	t.Run("the ServiceAccount reaches Secrets only in its namespace", func(t *testing.T) {
		for _, tc := range []struct {
			ns, group, resource, sub, verb string
			allowed                        bool
		}{
			{daemonNamespace, "", "secrets", "", "list", true},
			{daemonNamespace, "", "secrets", "", "watch", true},
			{daemonNamespace, "", "secrets", "", "get", true},
			{daemonNamespace, "coordination.k8s.io", "leases", "", "update", true},
			{daemonNamespace, "coordination.k8s.io", "leases", "", "delete", true},
			{appNamespace, "multicluster.x-k8s.io", "serviceimports", "status", "update", true},
			{appNamespace, "discovery.k8s.io", "endpointslices", "", "create", true},
			{metav1.NamespaceDefault, "", "events", "", "create", true},

			{appNamespace, "", "secrets", "", "get", false},
			{appNamespace, "", "secrets", "", "list", false},
			{metav1.NamespaceDefault, "", "secrets", "", "list", false},
			{metav1.NamespaceSystem, "", "secrets", "", "get", false},
			{"", "", "secrets", "", "list", false}, // all namespaces
			{daemonNamespace, "", "secrets", "", "create", false},
			{daemonNamespace, "", "secrets", "", "update", false},
			{daemonNamespace, "", "secrets", "", "delete", false},
			{appNamespace, "coordination.k8s.io", "leases", "", "create", false},
			{appNamespace, "coordination.k8s.io", "leases", "", "delete", false},
			{daemonNamespace, "coordination.k8s.io", "leases", "", "watch", true}, // a standby watches the leader Lease
			{"", "", "namespaces", "", "delete", false},
			{appNamespace, "", "pods", "", "create", false},
			{appNamespace, "", "services", "status", "update", false},
			{appNamespace, "", "configmaps", "", "get", false},
			{daemonNamespace, "", "configmaps", "", "create", true},
			{daemonNamespace, "", "configmaps", "", "list", false},
			{daemonNamespace, "", "configmaps", "", "delete", false},
			{daemonNamespace, "", "configmaps", "", "update", false}, // only its own, by name
			{daemonNamespace, "apps", "deployments", "", "update", false},
			{"", "rbac.authorization.k8s.io", "clusterroles", "", "bind", false},
			{"", "", "users", "", "impersonate", false},
		} {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   chartUser.UserName,
				Groups: chartUser.Groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: tc.ns, Group: tc.group, Resource: tc.resource, Subresource: tc.sub, Verb: tc.verb,
				},
			}}
			got, err := e.hub.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.Allowed != tc.allowed {
				t.Errorf("%s %s/%s%s in namespace %q: allowed=%v, want %v", tc.verb, tc.group, tc.resource, "/"+tc.sub, tc.ns, got.Status.Allowed, tc.allowed)
			}
		}
	})
}

// TestChartRBACCoversTheHubAsAMember installs the chart with hubIsMember in
// the default serviceexport mode: the daemon then also reads the hub as a
// member (Services, EndpointSlices, ServiceExports) and writes ServiceExport
// conditions there, with the member rules the chart binds for it.
func TestChartRBACCoversTheHubAsAMember(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	kubectl := filepath.Join(testenv.RequireAssets(t), "kubectl")
	forbidden := &forbiddenRecorder{}
	manifests := installChart(t, e, kubectl, "--set", "hubIsMember=true", "--set", "exportMode=serviceexport")
	e.register(t, "east", "east", e.east.Kubeconfig)
	startChartDaemon(t, e, manifests, forbidden)

	for _, c := range []*testenv.Cluster{e.hub, e.east} {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: "web"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
		}
		if _, err := c.Client.CoreV1().Services(appNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: "web"}}
		if _, err := mcsclientset.NewForConfigOrDie(c.Config).MulticlusterV1beta1().ServiceExports(appNamespace).Create(ctx, se, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	applySlices(t, e.hub.Client, "web", endpointSlice("web", "web-hub-1", 4, 2, true))
	applySlices(t, e.east.Client, "web", endpointSlice("web", "web-east-1", 5, 1, true))

	eventually(t, waitTimeout, func() error {
		if n, reqs := forbidden.get(); n > 0 {
			t.Fatalf("%d requests as the chart's ServiceAccount were Forbidden:\n%s", n, strings.Join(reqs, "\n"))
		}
		st := e.hubState(t, "web")
		if want := map[string]int{"hub": 2, "east": 1}; !reflect.DeepEqual(st.total, want) {
			return fmt.Errorf("hub slice endpoints per cluster %v, want %v", st.total, want)
		}
		sort.Strings(st.importClusters)
		if !reflect.DeepEqual(st.importClusters, []string{"east", "hub"}) {
			return fmt.Errorf("ServiceImport status.clusters %v", st.importClusters)
		}
		se, err := e.hubMCS.MulticlusterV1beta1().ServiceExports(appNamespace).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if meta.FindStatusCondition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionValid)) == nil {
			return fmt.Errorf("the hub's ServiceExport has no Valid condition: %+v", se.Status.Conditions)
		}
		return nil
	})
	if n, reqs := forbidden.get(); n > 0 {
		t.Errorf("%d requests as the chart's ServiceAccount were Forbidden:\n%s", n, strings.Join(reqs, "\n"))
	}
}

// installChart renders the chart into daemonNamespace with helm (CRDs
// included) and applies it to the hub with kubectl's server-side apply, as a
// GitOps tool would. It returns the rendered manifests.
func installChart(t *testing.T, e *env, kubectl string, values ...string) []byte {
	t.Helper()
	out := testenv.HelmTemplate(t, chartDir, chartRelease, daemonNamespace, append([]string{"--include-crds"}, values...)...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", e.hub.KubeconfigPath,
		"apply", "--server-side", "--field-manager=chart-test", "-f", "-")
	cmd.Stdin = bytes.NewReader(out)
	if res, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply of the rendered chart: %v\n%s", err, res)
	}
	return out
}

// startChartDaemon runs the daemon as startDaemon does, but with the
// arguments of the chart's Deployment and a hub config that impersonates the
// chart's ServiceAccount. Every Forbidden answer goes to forbidden.
func startChartDaemon(t *testing.T, e *env, manifests []byte, forbidden *forbiddenRecorder) *daemon {
	t.Helper()
	return startChartDaemonWith(t, e, manifests, forbidden, nil)
}

// startChartDaemonWith is startChartDaemon with mutate applied to the
// options last (a metrics address, say).
func startChartDaemonWith(t *testing.T, e *env, manifests []byte, forbidden *forbiddenRecorder, mutate func(*app.Options)) *daemon {
	t.Helper()
	c := chartContainer(t, manifests)
	o := app.NewOptions()
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(c.Args); err != nil {
		t.Fatalf("the chart's args %q: %v", c.Args, err)
	}
	if !slices.Equal(fs.Args(), []string{"run"}) {
		t.Fatalf("the chart runs %q, want the run subcommand", fs.Args())
	}
	// What differs from a pod: POD_NAMESPACE (the chart takes it from the
	// downward API), no metrics port to collide with other tests, and a
	// shorter wait for members.
	o.Namespace = daemonNamespace
	o.MetricsBindAddress = "0"
	o.MemberSyncTimeout = 10 * time.Second
	if mutate != nil {
		mutate(o)
	}

	cfg := rest.CopyConfig(e.hub.Config)
	cfg.Impersonate = chartUser
	writes := &writeCounter{}
	cfg.Wrap(writes.wrap)
	cfg.Wrap(forbidden.wrap)
	d, err := app.NewDaemon(o, cfg, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	dm := &daemon{Daemon: d, writes: writes, cancel: cancel, done: make(chan error, 1)}
	go func() { dm.done <- d.Run(ctx) }()
	t.Cleanup(dm.stop)
	return dm
}

// chartContainer returns the daemon container of the rendered Deployment.
func chartContainer(t *testing.T, manifests []byte) corev1.Container {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifests)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var d appsv1.Deployment
		if err := yaml.Unmarshal(doc, &d); err != nil {
			t.Fatalf("rendered chart: %v", err)
		}
		if d.Kind == "Deployment" {
			if cs := d.Spec.Template.Spec.Containers; len(cs) == 1 && d.Spec.Template.Spec.ServiceAccountName == chartRelease {
				return cs[0]
			}
			t.Fatalf("Deployment %s: want one container run as ServiceAccount %s", d.Name, chartRelease)
		}
	}
	t.Fatal("the chart renders no Deployment")
	return corev1.Container{}
}

// forbiddenRecorder records the requests the API server answered with 403.
type forbiddenRecorder struct {
	mu   sync.Mutex
	reqs []string
}

func (f *forbiddenRecorder) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		if err == nil && resp.StatusCode == http.StatusForbidden {
			f.mu.Lock()
			f.reqs = append(f.reqs, r.Method+" "+r.URL.RequestURI())
			f.mu.Unlock()
		}
		return resp, err
	})
}

// get returns how many requests were refused, and each distinct one with
// its count.
func (f *forbiddenRecorder) get() (int, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	counts := map[string]int{}
	for _, r := range f.reqs {
		counts[r]++
	}
	var out []string
	for r, n := range counts {
		out = append(out, fmt.Sprintf("%dx %s", n, r))
	}
	sort.Strings(out)
	return len(f.reqs), out
}

// exportServiceIn creates an annotated (exported) Service in namespace ns of
// member c.
func exportServiceIn(t *testing.T, c *testenv.Cluster, ns, name string) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{easync.AnnotationExport: "true"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := c.Client.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// eventsAbout returns "reason: message" lines of the hub Events in ns about
// one object.
func eventsAbout(t *testing.T, e *env, ns, kind, name string) string {
	t.Helper()
	list, err := e.hub.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.kind": kind, "involvedObject.name": name}.String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range list.Items {
		out = append(out, ev.Reason+": "+ev.Message)
	}
	return strings.Join(out, "\n")
}

// exportCartAndLonely exports cart from east (3 endpoints) and west (2), and
// lonely from east (1), as the chart tests' members do.
func exportCartAndLonely(t *testing.T, e *env) {
	t.Helper()
	exportService(t, e.east.Client, "cart")
	exportService(t, e.west.Client, "cart")
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-east-1", 1, 3, true))
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-west-1", 2, 2, true))
	exportService(t, e.east.Client, "lonely")
	applySlices(t, e.east.Client, "lonely", endpointSlice("lonely", "lonely-east-1", 3, 1, true))
}

// waitUnforbidden returns eventually, failing at once when the daemon was
// refused.
func waitUnforbidden(forbidden *forbiddenRecorder) func(t *testing.T, f func() error) {
	return func(t *testing.T, f func() error) {
		t.Helper()
		eventually(t, waitTimeout, func() error {
			if n, reqs := forbidden.get(); n > 0 {
				t.Fatalf("%d requests as the chart's ServiceAccount were Forbidden:\n%s", n, strings.Join(reqs, "\n"))
			}
			return f()
		})
	}
}

// cartAggregated says what the hub lacks of cart as exportCartAndLonely
// exports it: its MCS slices, per-cluster Services and Endpoints, the
// import's clusters and the derived Service.
func cartAggregated(t *testing.T, e *env) error {
	st := e.hubState(t, "cart")
	if want := map[string]int{"east": 3, "west": 2}; !reflect.DeepEqual(st.total, want) || !reflect.DeepEqual(st.ready, want) {
		return fmt.Errorf("hub slice endpoints per cluster: total %v ready %v, want %v", st.total, st.ready, want)
	}
	if !st.perClusterServices["east"] || !st.perClusterServices["west"] || !st.perClusterEndpoints["east"] || !st.perClusterEndpoints["west"] {
		return fmt.Errorf("per-cluster Services %v, Endpoints %v", st.perClusterServices, st.perClusterEndpoints)
	}
	sort.Strings(st.importClusters)
	if !reflect.DeepEqual(st.importClusters, []string{"east", "west"}) {
		return fmt.Errorf("ServiceImport status.clusters %v", st.importClusters)
	}
	if st.derived == nil || st.derived.Spec.ClusterIP == "" {
		return fmt.Errorf("derived Service missing or without ClusterIP")
	}
	return nil
}
