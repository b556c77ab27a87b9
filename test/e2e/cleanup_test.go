package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/daemonconfig"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/shard"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// cleanupReport is what `cleanup -o json` prints.
type cleanupReport struct {
	DryRun  bool           `json:"dryRun"`
	Counts  map[string]int `json:"counts"`
	Objects []struct {
		Kind      string `json:"kind"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
		Result    string `json:"result"`
	} `json:"objects"`
}

// TestCleanupDeletesWhatTheDaemonWroteAndNothingElse runs the daemon until
// the hub holds two members' services, then `endpoint-aggregator cleanup`:
// refused while the daemon leads, a dry run that deletes nothing once it
// stopped, then the real run, which leaves no managed object and keeps a
// user's Service of a colliding name, a slice the hub's mirroring controller
// would own, and the registration Secrets.
func TestCleanupDeletesWhatTheDaemonWroteAndNothingElse(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	kubeconfig := cliKubeconfig(t, e.hub)
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)

	// A user's Service where west's per-cluster cart would go, and a slice
	// as the hub's mirroring controller makes from our Endpoints (it copies
	// their labels): neither is cleanup's to delete.
	if _, err := e.hub.Client.CoreV1().Services(appNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: "cart-west"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mirrored := endpointSlice("cart-east", "cart-east-mirrored", 9, 1, true)
	mirrored.Labels = map[string]string{
		discoveryv1.LabelServiceName: "cart-east", discoveryv1.LabelManagedBy: "endpointslicemirroring-controller.k8s.io",
		endpoints.LabelManagedBy: endpoints.ManagedByValue, endpoints.LabelSourceCluster: "east",
	}
	if _, err := e.hub.Client.DiscoveryV1().EndpointSlices(appNamespace).Create(ctx, mirrored, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	d := e.startDaemon(t, func(o *app.Options) { o.MemberLeaseDuration = 4 * time.Second })
	for i, c := range []*testenv.Cluster{e.east, e.west} {
		exportService(t, c.Client, "cart")
		applySlices(t, c.Client, "cart", endpointSlice("cart", "cart-"+c.Name+"-1", 1+i, 2, true))
	}
	exportService(t, e.east.Client, "db")
	applySlices(t, e.east.Client, "db", endpointSlice("db", "db-east-1", 3, 1, true))
	waitFor(t, e, "cart", map[string]int{"east": 2, "west": 2}, map[string]int{"east": 2, "west": 2})
	waitFor(t, e, "db", map[string]int{"east": 1}, map[string]int{"east": 1})
	eventually(t, waitTimeout, func() error {
		for _, name := range []string{"endpoint-aggregator", easync.MemberLeasePrefix + "east", easync.MemberLeasePrefix + "west"} {
			if _, err := e.hub.Client.CoordinationV1().Leases(daemonNamespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
	d.waitSettled(t)
	before := e.ourObjects(t)
	// cart: slices from east and west, derived Service, ServiceImport,
	// cart-east Service and Endpoints (cart-west is the user's); db: a slice,
	// derived Service, ServiceImport, db-east Service and Endpoints.
	if len(before) != 11 {
		t.Fatalf("hub objects before cleanup: %v", before)
	}

	cleanup := func(args ...string) (string, string, error) {
		return runCLI(ctx, append([]string{"cleanup", "--hub-context", "hub", "--kubeconfig", kubeconfig, "-n", daemonNamespace}, args...)...)
	}
	leases := func() []string {
		list, err := e.hub.Client.CoordinationV1().Leases(daemonNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range list.Items {
			out = append(out, l.Name)
		}
		return out
	}

	t.Run("refused while the daemon leads", func(t *testing.T) {
		_, stderr, err := cleanup()
		if err == nil || !strings.Contains(err.Error(), "a daemon is running: leader election Lease endpoint-aggregator/endpoint-aggregator is held by") ||
			!strings.Contains(err.Error(), "Nothing was deleted") {
			t.Errorf("cleanup with the daemon leading: %v\n%s", err, stderr)
		}
		if after := e.ourObjects(t); !equalObjects(before, after) {
			t.Errorf("a refused cleanup changed the hub:\nbefore %v\nafter  %v", before, after)
		}
	})

	d.stop()
	leasesBefore := leases()

	t.Run("a dry run lists everything and deletes nothing", func(t *testing.T) {
		stdout, stderr, err := cleanup("--dry-run", "-o", "json")
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		var r cleanupReport
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("%v\n%s", err, stdout)
		}
		listed := map[string]bool{}
		for _, o := range r.Objects {
			listed[o.Kind+"/"+o.Namespace+"/"+o.Name] = true
			if o.Result != "would delete" {
				t.Errorf("%s/%s/%s: %q", o.Kind, o.Namespace, o.Name, o.Result)
			}
		}
		for k := range before {
			if !listed[k] {
				t.Errorf("the dry run does not list %s", k)
			}
		}
		// The leader election Lease, the member liveness Leases and, as
		// the replicas share the members by default, the members' fences.
		for _, l := range []string{"endpoint-aggregator", easync.MemberLeasePrefix + "east", easync.MemberLeasePrefix + "west", shard.FenceName("east"), shard.FenceName("west")} {
			if !listed["Lease/"+daemonNamespace+"/"+l] {
				t.Errorf("the dry run does not list Lease %s", l)
			}
		}
		if !listed["ConfigMap/"+daemonNamespace+"/"+daemonconfig.Name] {
			t.Errorf("the dry run does not list the daemon's published configuration")
		}
		if !r.DryRun || len(r.Objects) != len(before)+6 || r.Counts["Lease"] != 5 || r.Counts["EndpointSlice"] != 3 || r.Counts["ConfigMap"] != 1 {
			t.Errorf("dry run report: %d objects, counts %v", len(r.Objects), r.Counts)
		}
		if !strings.Contains(stderr, "Dry run: would delete 3 EndpointSlices, 2 Endpoints, 4 Services, 2 ServiceImports, 5 Leases, 1 ConfigMap. Nothing was deleted.") {
			t.Errorf("stderr:\n%s", stderr)
		}
		if after := e.ourObjects(t); !equalObjects(before, after) || !slices.Equal(leases(), leasesBefore) {
			t.Errorf("the dry run changed the hub")
		}
	})

	t.Run("cleanup deletes every managed object and only those", func(t *testing.T) {
		// The member Leases lapse 4s after the daemon stopped.
		stdout, stderr, err := cleanup("--wait", "30s")
		t.Logf("endpoint-aggregator cleanup --hub-context hub --wait 30s\n%s%s", stdout, stderr)
		if err != nil {
			t.Fatal(err)
		}
		if objs := e.ourObjects(t); len(objs) > 0 {
			t.Errorf("hub objects left: %v", objs)
		}
		if l := leases(); len(l) > 0 {
			t.Errorf("Leases left: %v", l)
		}
		if _, err := e.hub.Client.CoreV1().ConfigMaps(daemonNamespace).Get(ctx, daemonconfig.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the daemon's published configuration: %v, want it deleted", err)
		}
		if _, err := e.hub.Client.CoreV1().Services(appNamespace).Get(ctx, "cart-west", metav1.GetOptions{}); err != nil {
			t.Errorf("the user's Service cart-west: %v", err)
		}
		if _, err := e.hub.Client.DiscoveryV1().EndpointSlices(appNamespace).Get(ctx, mirrored.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("the mirrored slice: %v", err)
		}
		for _, s := range []string{"east", "west"} {
			if _, err := e.hub.Client.CoreV1().Secrets(daemonNamespace).Get(ctx, s, metav1.GetOptions{}); err != nil {
				t.Errorf("registration Secret %s: %v", s, err)
			}
		}
		if !strings.Contains(stderr, "Deleted 3 EndpointSlices, 2 Endpoints, 4 Services, 2 ServiceImports, 5 Leases, 1 ConfigMap.") {
			t.Errorf("stderr:\n%s", stderr)
		}
		_, stderr, err = cleanup()
		if err != nil || !strings.Contains(stderr, "Nothing to delete") {
			t.Errorf("second cleanup: %v\n%s", err, stderr)
		}
	})
}

func equalObjects(a, b map[string]hubObject) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestChartCleanupHookRBACIsEnough installs the chart with
// cleanup.onUninstall, runs the daemon as the chart's ServiceAccount until it
// has aggregated a member, then runs the hook Job's command line in-process
// as the hook's ServiceAccount: it deletes the Deployment (the test plays the
// garbage collector, which the test hub lacks, once the deletion is
// foreground-pending), waits for the daemon's Leases and deletes everything
// the daemon wrote, all without a Forbidden answer.
func TestChartCleanupHookRBACIsEnough(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	kubectl := filepath.Join(testenv.RequireAssets(t), "kubectl")
	manifests := installChart(t, e, kubectl, "--set", "exportMode=annotation", "--set", "memberHealth.leaseDuration=4s", "--set", "cleanup.onUninstall=true")
	e.register(t, "east", "east", e.east.Kubeconfig)
	forbidden := &forbiddenRecorder{}
	d := startChartDaemon(t, e, manifests, forbidden)
	exportService(t, e.east.Client, "cart")
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-east-1", 1, 2, true))
	waitFor(t, e, "cart", map[string]int{"east": 2}, map[string]int{"east": 2})
	d.waitSettled(t)
	if n, reqs := forbidden.get(); n > 0 {
		t.Fatalf("the daemon was refused: %v", reqs)
	}
	d.stop()

	job := chartCleanupJob(t, manifests)
	args := slices.DeleteFunc(slices.Clone(job.Spec.Template.Spec.Containers[0].Args), func(a string) bool { return a == "--in-cluster" })
	hookUser := rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + daemonNamespace + ":" + job.Spec.Template.Spec.ServiceAccountName,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + daemonNamespace, "system:authenticated"},
	}
	args = append(args, "--hub-context", "hub", "--kubeconfig", impersonatingKubeconfig(t, e.hub, hookUser))

	// The garbage collector's part: a foreground-deleted Deployment goes
	// once its pods have (there are none here).
	gc := make(chan error, 1)
	gcCtx, stopGC := context.WithCancel(ctx)
	defer stopGC()
	go func() {
		gc <- waitUntil(time.Minute, 100*time.Millisecond, func() error {
			if gcCtx.Err() != nil {
				return nil
			}
			dep, err := e.hub.Client.AppsV1().Deployments(daemonNamespace).Get(ctx, chartRelease, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil || dep.DeletionTimestamp == nil {
				return fmt.Errorf("deployment not being deleted (%v)", err)
			}
			dep.Finalizers = nil
			_, err = e.hub.Client.AppsV1().Deployments(daemonNamespace).Update(ctx, dep, metav1.UpdateOptions{})
			return errors.Join(err, errors.New("finalizer removed"))
		})
	}()
	stdout, stderr, err := runCLI(ctx, args...)
	t.Logf("endpoint-aggregator %s\n%s%s", strings.Join(args, " "), stdout, stderr)
	if err != nil {
		t.Fatal(err)
	}
	stopGC()
	if err := <-gc; err != nil {
		t.Errorf("playing the garbage collector: %v", err)
	}
	if strings.Contains(strings.ToLower(stdout+stderr), "forbidden") {
		t.Errorf("the hook's ServiceAccount was refused")
	}
	if _, err := e.hub.Client.AppsV1().Deployments(daemonNamespace).Get(ctx, chartRelease, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Deployment: %v, want it deleted", err)
	}
	if objs := e.ourObjects(t); len(objs) > 0 {
		t.Errorf("hub objects left: %v", objs)
	}
	list, err := e.hub.Client.CoordinationV1().Leases(daemonNamespace).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) > 0 {
		t.Errorf("Leases left: %v (%v)", list.Items, err)
	}
	if _, err := e.hub.Client.CoreV1().ConfigMaps(daemonNamespace).Get(ctx, daemonconfig.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the daemon's published configuration: %v, want it deleted", err)
	}
	if _, err := e.hub.Client.CoreV1().Secrets(daemonNamespace).Get(ctx, "east", metav1.GetOptions{}); err != nil {
		t.Errorf("registration Secret: %v", err)
	}

	// And no more than it needs.
	for _, tc := range []struct {
		ns, group, resource, name, verb string
	}{
		{daemonNamespace, "", "secrets", "", "list"},
		{daemonNamespace, "", "secrets", "east", "delete"},
		{daemonNamespace, "apps", "deployments", "other", "delete"},
		{appNamespace, "", "services", "", "create"},
		{appNamespace, "", "services", "", "update"},
		{"", "", "namespaces", "", "delete"},
		{appNamespace, "coordination.k8s.io", "leases", "", "delete"},
		{daemonNamespace, "", "configmaps", "other", "delete"},
	} {
		if cliAllowedAs(t, e, hookUser, tc.ns, tc.group, tc.resource, tc.name, tc.verb) {
			t.Errorf("the hook may %s %s/%s %q in namespace %q", tc.verb, tc.group, tc.resource, tc.name, tc.ns)
		}
	}
}

// chartCleanupJob returns the cleanup hook's Job of the rendered chart.
func chartCleanupJob(t *testing.T, manifests []byte) batchv1.Job {
	t.Helper()
	for _, doc := range strings.Split(string(manifests), "\n---") {
		var j batchv1.Job
		if err := yaml.Unmarshal([]byte(doc), &j); err != nil {
			continue
		}
		if j.Kind == "Job" && len(j.Spec.Template.Spec.Containers) == 1 {
			return j
		}
	}
	t.Fatal("the chart renders no cleanup Job")
	return batchv1.Job{}
}

// impersonatingKubeconfig writes a kubeconfig with context c.Name that acts
// as user.
func impersonatingKubeconfig(t *testing.T, c *testenv.Cluster, user rest.ImpersonationConfig) string {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(cliKubeconfig(t, c))
	if err != nil {
		t.Fatal(err)
	}
	auth := kc.AuthInfos[kc.Contexts[c.Name].AuthInfo]
	auth.Impersonate, auth.ImpersonateGroups = user.UserName, user.Groups
	path := filepath.Join(t.TempDir(), "kubeconfig")
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// cliAllowedAs asks the hub whether user may verb the resource.
func cliAllowedAs(t *testing.T, e *env, user rest.ImpersonationConfig, ns, group, resource, name, verb string) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.UserName, Groups: user.Groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Group: group, Resource: resource, Name: name, Verb: verb},
	}}
	got, err := e.hub.Client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got.Status.Allowed
}
