package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiextensionsv1client "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcscrd "sigs.k8s.io/mcs-api/config/crd"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	"sigs.k8s.io/yaml"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// installPinnedV1alpha1CRD installs the CRD in file of the October 2024
// mcs-api that hack/conformance pins (served as v1alpha1 only, the shape
// mcs-api shipped before v0.5.0), and waits until list succeeds.
func installPinnedV1alpha1CRD(t *testing.T, c *testenv.Cluster, file string, list func() error) {
	t.Helper()
	// go mod download, not go list -m: on a fresh machine the module is
	// not in the module cache before make builds the conformance suite.
	download := exec.Command("go", "mod", "download", "-json", "sigs.k8s.io/mcs-api")
	download.Dir = filepath.Join("..", "..", "hack", "conformance")
	out, err := download.Output()
	if err != nil {
		t.Fatalf("downloading the mcs-api module pinned by hack/conformance: %v", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download said %q (%v), want the module's directory", out, err)
	}
	raw, err := os.ReadFile(filepath.Join(mod.Dir, "config", "crd", file))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(raw, crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != "v1alpha1" {
		t.Fatalf("the pinned CRD %s serves %+v, want v1alpha1 only", crd.Name, crd.Spec.Versions)
	}
	api := apiextensionsclient.NewForConfigOrDie(c.Config).ApiextensionsV1().CustomResourceDefinitions()
	if _, err := api.Create(context.Background(), crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitTimeout, list)
}

// installV1alpha1ServiceExportCRD installs the pinned v1alpha1-only
// ServiceExport CRD.
func installV1alpha1ServiceExportCRD(t *testing.T, c *testenv.Cluster) {
	t.Helper()
	exports := mcsclientset.NewForConfigOrDie(c.Config).MulticlusterV1alpha1().ServiceExports(appNamespace)
	installPinnedV1alpha1CRD(t, c, "multicluster.x-k8s.io_serviceexports.yaml", func() error {
		_, err := exports.List(context.Background(), metav1.ListOptions{})
		return err
	})
}

// statusRow is the part of a status -o json row these tests read.
type statusRow struct {
	Name          string `json:"name"`
	Connected     string `json:"connected"`
	Synced        string `json:"synced"`
	Services      int    `json:"services"`
	LastError     string `json:"lastError"`
	ServiceExport string `json:"serviceExport"`
}

// mustRunCLI runs the command line and returns its output.
func mustRunCLI(t *testing.T, args ...string) string {
	t.Helper()
	stdout, stderr, err := runCLI(context.Background(), args...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return stdout
}

// memberStatusRow waits for status to report cluster as want says.
func memberStatusRow(t *testing.T, kubeconfig, cluster string, want func(statusRow) error) {
	t.Helper()
	eventually(t, waitTimeout, func() error {
		stdout, _, err := runCLI(context.Background(), "status", "--hub-context", "hub", "-o", "json", "--kubeconfig", kubeconfig)
		if err != nil {
			return err
		}
		var report struct {
			Members []statusRow `json:"members"`
		}
		if err := json.Unmarshal([]byte(stdout), &report); err != nil {
			return fmt.Errorf("%v\n%s", err, stdout)
		}
		for _, r := range report.Members {
			if r.Name == cluster {
				return want(r)
			}
		}
		return fmt.Errorf("status lists no %s: %s", cluster, stdout)
	})
}

// TestMembersServingOlderOrNoServiceExports: in serviceexport mode, a
// member whose API server serves no ServiceExport is connected and synced
// with nothing exported, and status says "ServiceExport not served"; once
// the member installs the v1alpha1-only ServiceExport CRD that mcs-api
// shipped before v0.5.0, the same daemon, not restarted, imports its
// export beside a member on the current CRDs, and writes its
// ServiceExport conditions in v1alpha1.
func TestMembersServingOlderOrNoServiceExports(t *testing.T) {
	t.Parallel()
	cs := testenv.StartAllT(t,
		testenv.Spec{Name: "hub", Options: testenv.Options{CRDs: true, Audit: true}},
		testenv.Spec{Name: "east", Options: testenv.Options{CRDs: true}},
		testenv.Spec{Name: "west"}, // no mcs-api CRDs
	)
	e := &env{hub: cs[0], east: cs[1], west: cs[2], hubMCS: mcsclientset.NewForConfigOrDie(cs[0].Config)}
	for _, c := range cs {
		mustCreateNamespace(t, c.Client, appNamespace)
	}
	mustCreateNamespace(t, e.hub.Client, daemonNamespace)
	east, west := mcsMember(e.east), mcsMember(e.west)
	kubeconfig := cliKubeconfig(t, e.hub, e.east, e.west)

	for _, m := range []member{east, west} {
		m.service(t, "web", nil)
	}
	applySlices(t, e.east.Client, "web", endpointSlice("web", "web-east-1", 1, 2, true))
	applySlices(t, e.west.Client, "web", endpointSlice("web", "web-west-1", 2, 3, true))
	east.export(t, "web", nil)
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	d := e.startDaemon(t, func(o *app.Options) {
		o.ExportMode = string(easync.ExportServiceExport)
		o.MemberLeaseDuration = 4 * time.Second // publishes what members serve within a second
	})

	t.Run("a member serving no ServiceExport is synced with nothing exported", func(t *testing.T) {
		eventually(t, waitTimeout, func() error {
			st := e.hubState(t, "web")
			if !slices.Equal(st.importClusters, []string{"east"}) || st.ready["east"] != 2 || st.total["west"] != 0 {
				return fmt.Errorf("import clusters %v, ready %v, total %v; want east's 2 endpoints only", st.importClusters, st.ready, st.total)
			}
			return nil
		})
		d.waitSettled(t)
		memberStatusRow(t, kubeconfig, "west", func(r statusRow) error {
			if r.Connected != "True" || r.Synced != "True" || r.LastError != "" || r.ServiceExport != "none" {
				return fmt.Errorf("west: %+v; want connected, synced, no error, serving no ServiceExport", r)
			}
			return nil
		})
		memberStatusRow(t, kubeconfig, "east", func(r statusRow) error {
			if r.Connected != "True" || r.Synced != "True" || r.ServiceExport != "v1beta1" {
				return fmt.Errorf("east: %+v; want connected, synced, serving v1beta1", r)
			}
			return nil
		})
		table := mustRunCLI(t, "status", "--hub-context", "hub", "--kubeconfig", kubeconfig)
		if !strings.Contains(table, "ServiceExport not served") {
			t.Errorf("status does not say ServiceExport not served:\n%s", table)
		}
		t.Logf("status:\n%s", table)
		explained := mustRunCLI(t, "explain", appNamespace+"/web", "-n", daemonNamespace, "--hub-context", "hub", "--kubeconfig", kubeconfig)
		if !strings.Contains(explained, "ServiceExport not served") {
			t.Errorf("explain does not say ServiceExport not served:\n%s", explained)
		}
		t.Logf("explain:\n%s", explained)
	})

	t.Run("the member's v1alpha1-only CRD is followed without a restart and its export imported", func(t *testing.T) {
		installV1alpha1ServiceExportCRD(t, e.west)
		if _, err := west.mcs.MulticlusterV1alpha1().ServiceExports(appNamespace).Create(context.Background(),
			&mcsv1alpha1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: "web"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, waitTimeout, func() error {
			st := e.hubState(t, "web")
			if !slices.Equal(st.importClusters, []string{"east", "west"}) || st.ready["east"] != 2 || st.ready["west"] != 3 {
				return fmt.Errorf("import clusters %v, ready %v; want east's 2 and west's 3 endpoints", st.importClusters, st.ready)
			}
			return nil
		})
		eventually(t, waitTimeout, func() error {
			se, err := west.mcs.MulticlusterV1alpha1().ServiceExports(appNamespace).Get(context.Background(), "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, typ := range []string{"Valid", "Ready"} {
				if c := meta.FindStatusCondition(se.Status.Conditions, typ); c == nil || c.Status != metav1.ConditionTrue {
					return fmt.Errorf("west's v1alpha1 ServiceExport condition %s = %+v, want True", typ, c)
				}
			}
			return nil
		})
		east.condition(t, "web", "Ready", metav1.ConditionTrue, "Ready")
		memberStatusRow(t, kubeconfig, "west", func(r statusRow) error {
			if r.Connected != "True" || r.Synced != "True" || r.LastError != "" || r.ServiceExport != "v1alpha1" || r.Services != 1 {
				return fmt.Errorf("west: %+v; want connected, synced, 1 service, read as v1alpha1", r)
			}
			return nil
		})
	})

	t.Run("upgrading the member's CRD in place and back rewrites nothing in the hub", func(t *testing.T) {
		d.waitSettled(t)
		before := e.ourObjects(t)
		from := time.Now()
		crds := apiextensionsclient.NewForConfigOrDie(e.west.Config).ApiextensionsV1().CustomResourceDefinitions()
		current := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(mcscrd.ServiceExportCRD, current); err != nil {
			t.Fatal(err)
		}
		// Upgrade: the current CRD (v1alpha1 and v1beta1 served, v1beta1
		// stored), the objects rewritten in v1beta1, v1alpha1 no longer
		// listed as stored.
		replaceCRDSpec(t, crds, current.Spec, nil)
		migrateServiceExports(t, west.mcs)
		replaceCRDSpec(t, crds, current.Spec, []string{"v1beta1"})
		memberStatusRow(t, kubeconfig, "west", func(r statusRow) error {
			if r.ServiceExport != "v1beta1" || r.LastError != "" || r.Synced != "True" {
				return fmt.Errorf("west: %+v; want read as v1beta1, synced, no error", r)
			}
			return nil
		})
		// Downgrade: v1alpha1 stored again, the objects rewritten, then
		// the v1alpha1-only spec.
		down := current.Spec.DeepCopy()
		for i := range down.Versions {
			down.Versions[i].Storage = down.Versions[i].Name == "v1alpha1"
		}
		replaceCRDSpec(t, crds, *down, nil)
		migrateServiceExports(t, west.mcs)
		replaceCRDSpec(t, crds, *down, []string{"v1alpha1"})
		only := down.DeepCopy()
		only.Versions = slices.DeleteFunc(only.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name != "v1alpha1" })
		replaceCRDSpec(t, crds, *only, nil)
		memberStatusRow(t, kubeconfig, "west", func(r statusRow) error {
			if r.ServiceExport != "v1alpha1" || r.LastError != "" || r.Synced != "True" {
				return fmt.Errorf("west: %+v; want read as v1alpha1 again, synced, no error", r)
			}
			return nil
		})
		d.waitSettled(t)
		after := e.ourObjects(t)
		for k, o := range before {
			if a, ok := after[k]; !ok || a.resourceVersion != o.resourceVersion {
				t.Errorf("hub %s (of %q) was rewritten or withdrawn while west's CRD changed: rv %s → %+v", k, o.cluster, o.resourceVersion, a)
			}
		}
		if len(after) != len(before) {
			t.Errorf("hub objects %d before the CRD changes, %d after", len(before), len(after))
		}
		checkNoRoutingWrites(t, e.hub.AuditLogPath, from, time.Now())
		if st := e.hubState(t, "web"); st.ready["west"] != 3 {
			t.Errorf("west's endpoints in the hub: %v, want 3", st.ready)
		}
	})

	t.Run("a member whose CRD serves no version while its exports remain keeps them", func(t *testing.T) {
		d.waitSettled(t)
		before := e.ourObjects(t)
		crds := apiextensionsclient.NewForConfigOrDie(e.west.Config).ApiextensionsV1().CustomResourceDefinitions()
		crd, err := crds.Get(context.Background(), "serviceexports.multicluster.x-k8s.io", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		from := time.Now()
		unserved := crd.Spec.DeepCopy()
		for i := range unserved.Versions {
			unserved.Versions[i].Served = false
		}
		replaceCRDSpec(t, crds, *unserved, nil)
		memberStatusRow(t, kubeconfig, "west", func(r statusRow) error {
			if !strings.Contains(r.LastError, "no longer serves ServiceExport") || r.Synced != "True" {
				return fmt.Errorf("west: %+v; want synced, its last error saying it no longer serves ServiceExport", r)
			}
			return nil
		})
		if st := e.hubState(t, "web"); st.ready["west"] != 3 {
			t.Errorf("west's endpoints in the hub while nothing is served: %v, want 3", st.ready)
		}
		// Served again: a new export is read (the failure itself shows in
		// LAST ERROR until it is two minutes old, as any list failure).
		replaceCRDSpec(t, crds, crd.Spec, nil)
		d.waitSettled(t)
		checkNoRoutingWrites(t, e.hub.AuditLogPath, from, time.Now())
		west.service(t, "api", nil)
		if _, err := west.mcs.MulticlusterV1alpha1().ServiceExports(appNamespace).Create(context.Background(),
			&mcsv1alpha1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: "api"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, waitTimeout, func() error {
			if st := e.hubState(t, "api"); !slices.Equal(st.importClusters, []string{"west"}) {
				return fmt.Errorf("api imported from %v, want west", st.importClusters)
			}
			return nil
		})
		d.waitSettled(t)
		after := e.ourObjects(t)
		for k, o := range before {
			if a, ok := after[k]; !ok || a.resourceVersion != o.resourceVersion {
				t.Errorf("hub %s (of %q) was rewritten or withdrawn while west served no ServiceExport: rv %s → %+v", k, o.cluster, o.resourceVersion, a)
			}
		}
	})

	t.Run("a member's CRD deleted and re-created with its exports withdraws nothing", func(t *testing.T) {
		d.waitSettled(t)
		ctx := context.Background()
		crds := apiextensionsclient.NewForConfigOrDie(e.west.Config).ApiextensionsV1().CustomResourceDefinitions()
		crd, err := crds.Get(ctx, "serviceexports.multicluster.x-k8s.io", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		exports, err := west.mcs.MulticlusterV1alpha1().ServiceExports(appNamespace).List(ctx, metav1.ListOptions{})
		if err != nil || len(exports.Items) != 2 {
			t.Fatalf("west's exports before: %v, %v; want web and api", exports, err)
		}
		before, kept := e.ourObjects(t), readyAddresses(t, e, "west")
		if len(kept) == 0 {
			t.Fatal("west has no slice in the hub: the oracle would check nothing")
		}
		from := time.Now()
		// As an MCS implementation's reinstall does: the CRD goes, with
		// every ServiceExport, then comes back and the exports are applied
		// again.
		if err := crds.Delete(ctx, crd.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, waitTimeout, func() error {
			if _, err := crds.Get(ctx, crd.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("CRD still there: %v", err)
			}
			return nil
		})
		time.Sleep(2 * time.Second) // what the watch told of the deletions has reached the hub
		if st := e.hubState(t, "web"); st.ready["west"] != 3 {
			t.Errorf("west's endpoints in the hub while its CRD is gone: %v, want 3", st.ready)
		}
		if _, err := crds.Create(ctx, &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: crd.Name}, Spec: crd.Spec}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, se := range exports.Items {
			eventually(t, waitTimeout, func() error {
				_, err := west.mcs.MulticlusterV1alpha1().ServiceExports(appNamespace).Create(ctx,
					&mcsv1alpha1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: se.Namespace, Name: se.Name}, Spec: se.Spec}, metav1.CreateOptions{})
				return err
			})
		}
		// The daemon has read them again when it writes their conditions.
		eventually(t, waitTimeout, func() error {
			for _, name := range []string{"web", "api"} {
				se, err := west.mcs.MulticlusterV1alpha1().ServiceExports(appNamespace).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if c := meta.FindStatusCondition(se.Status.Conditions, "Ready"); c == nil || c.Status != metav1.ConditionTrue {
					return fmt.Errorf("re-created %s: Ready = %+v, want True", name, c)
				}
			}
			return nil
		})
		d.waitSettled(t)
		checkNoEndpointDropped(t, e.hub.AuditLogPath, from, time.Now(), kept)
		after := e.ourObjects(t)
		for k, o := range before {
			if a, ok := after[k]; !ok || (a.resourceVersion != o.resourceVersion && !strings.HasPrefix(k, "EndpointSlice/")) {
				t.Errorf("hub %s (of %q) was rewritten or withdrawn while west's CRD was deleted and re-created: rv %s → %+v", k, o.cluster, o.resourceVersion, a)
			}
		}
		if got := readyAddresses(t, e, "west"); !maps.EqualFunc(got, kept, slices.Equal) {
			t.Errorf("west's ready endpoints in the hub: %v after, %v before", got, kept)
		}
	})
}

// TestDaemonRefusesAHubServingServiceImportsAsV1alpha1Only: a hub whose
// ServiceImport CRD is the pre-v0.5.0 copy (v1alpha1 only) is refused at
// start, with a message naming the CRD and the version the daemon writes.
func TestDaemonRefusesAHubServingServiceImportsAsV1alpha1Only(t *testing.T) {
	t.Parallel()
	hub := testenv.StartT(t, "hub", testenv.Options{})
	imports := mcsclientset.NewForConfigOrDie(hub.Config).MulticlusterV1alpha1().ServiceImports(appNamespace)
	installPinnedV1alpha1CRD(t, hub, "multicluster.x-k8s.io_serviceimports.yaml", func() error {
		_, err := imports.List(context.Background(), metav1.ListOptions{})
		return err
	})
	o := app.NewOptions()
	o.Namespace = daemonNamespace
	o.MetricsBindAddress = "0"
	_, err := app.NewDaemon(o, hub.Config, nil)
	if err == nil || !strings.Contains(err.Error(), "serviceimports.multicluster.x-k8s.io serves v1alpha1 but not v1beta1") ||
		!strings.Contains(err.Error(), "multicluster.x-k8s.io/v1beta1") {
		t.Fatalf("NewDaemon on a v1alpha1-only hub: %v; want a refusal naming the CRD and v1beta1", err)
	}
	t.Logf("refused: %v", err)
}

// checkNoRoutingWrites fails the test for any write the hub's audit log at
// path shows to a Service, Endpoints, EndpointSlice or ServiceImport of the
// app namespace, received between from and to: while a member's CRD
// changes and its exports stay, nothing that routes may change. The log
// must show such writes before from (the daemon's first sync): an empty or
// unread log proves nothing.
func checkNoRoutingWrites(t *testing.T, path string, from, to time.Time) {
	t.Helper()
	checkRoutingWrites(t, path, from, to, func(auditEvent) error { return errors.New("no write may happen") })
}

// checkNoEndpointDropped is checkNoRoutingWrites, but for updates of the
// EndpointSlices in kept (by name, each with the addresses it holds ready)
// that keep every such address ready: an export re-created is newer, so
// the export record its slices carry changes, and nothing else may.
func checkNoEndpointDropped(t *testing.T, path string, from, to time.Time, kept map[string][]string) {
	t.Helper()
	checkRoutingWrites(t, path, from, to, func(ev auditEvent) error {
		had, ok := kept[ev.ObjectRef.Name]
		if ev.ObjectRef.Resource != "endpointslices" || ev.Verb != "update" || !ok || ev.RequestObject == nil {
			return errors.New("only an update of a slice that keeps its endpoints may happen")
		}
		var ready []string
		for _, ep := range ev.RequestObject.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				ready = append(ready, ep.Addresses...)
			}
		}
		for _, a := range had {
			if !slices.Contains(ready, a) {
				return fmt.Errorf("it drops ready endpoint %s (ready now: %v)", a, ready)
			}
		}
		return nil
	})
}

// readyAddresses are the ready addresses of cluster's hub EndpointSlices
// in the app namespace, by slice name.
func readyAddresses(t *testing.T, e *env, cluster string) map[string][]string {
	t.Helper()
	list, err := e.hub.Client.DiscoveryV1().EndpointSlices(appNamespace).List(context.Background(),
		metav1.ListOptions{LabelSelector: "multicluster.kubernetes.io/source-cluster=" + cluster})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, es := range list.Items {
		out[es.Name] = []string{}
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				out[es.Name] = append(out[es.Name], ep.Addresses...)
			}
		}
	}
	return out
}

// checkRoutingWrites fails the test for each write to the app namespace's
// routing objects received between from and to that allowed refuses, and
// when the log shows no such write before from.
func checkRoutingWrites(t *testing.T, path string, from, to time.Time, allowed func(auditEvent) error) {
	t.Helper()
	routing := []string{"services", "endpoints", "endpointslices", "serviceimports"}
	earlier := 0
	for _, ev := range auditWrites(t, path) {
		if ev.ObjectRef.Namespace != appNamespace || !slices.Contains(routing, ev.ObjectRef.Resource) {
			continue
		}
		switch at := ev.Received.Time; {
		case at.Before(from):
			earlier++
		case !at.After(to):
			if err := allowed(ev); err != nil {
				t.Errorf("hub audit log: %s %s/%s by %s at %s, while west's CRD changed and its exports stayed: %v",
					ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Name, ev.User.Username, at.Format(time.RFC3339Nano), err)
			}
		}
	}
	if earlier == 0 {
		t.Errorf("hub audit log %s shows no write to the app namespace's routing objects before %s: the oracle reads nothing", path, from.Format(time.RFC3339Nano))
	}
}

// replaceCRDSpec sets the ServiceExport CRD's spec and, when stored is not
// nil, its status.storedVersions, and waits until it is established.
func replaceCRDSpec(t *testing.T, crds apiextensionsv1client.CustomResourceDefinitionInterface, spec apiextensionsv1.CustomResourceDefinitionSpec, stored []string) {
	t.Helper()
	ctx := context.Background()
	eventually(t, waitTimeout, func() error {
		crd, err := crds.Get(ctx, "serviceexports.multicluster.x-k8s.io", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if stored != nil {
			crd.Status.StoredVersions = stored
			_, err = crds.UpdateStatus(ctx, crd, metav1.UpdateOptions{})
			return err
		}
		crd.Spec = spec
		_, err = crds.Update(ctx, crd, metav1.UpdateOptions{})
		return err
	})
}

// migrateServiceExports rewrites every ServiceExport in the CRD's storage
// version, as a storage migration does.
func migrateServiceExports(t *testing.T, mcs mcsclientset.Interface) {
	t.Helper()
	ctx := context.Background()
	eventually(t, waitTimeout, func() error {
		list, err := mcs.MulticlusterV1alpha1().ServiceExports(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for i := range list.Items {
			se := &list.Items[i]
			if se.Annotations == nil {
				se.Annotations = map[string]string{}
			}
			se.Annotations["migrated"] = se.ResourceVersion // a real change: a no-op is not written
			if _, err := mcs.MulticlusterV1alpha1().ServiceExports(se.Namespace).Update(ctx, se, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
}
