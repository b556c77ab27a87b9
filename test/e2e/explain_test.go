package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/explain"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// TestExplainGivesEveryVerdict sets up one service for each way an export
// can end, runs `endpoint-aggregator explain` on it with the hub kubeconfig
// (members read through their registration Secrets) and checks each
// member's verdict.
func TestExplainGivesEveryVerdict(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	east, west := mcsMember(e.east), mcsMember(e.west)
	proxy := e.registerViaProxy(t, e.east)
	e.register(t, "west", "west", e.west.Kubeconfig)
	d := e.startDaemon(t, func(o *app.Options) {
		o.ExportMode = string(easync.ExportServiceExport)
		o.ProbeInterval, o.ProbeTimeout = 500*time.Millisecond, time.Second
		o.MemberLeaseDuration = 4 * time.Second
	})
	kubeconfig := cliKubeconfig(t, e.hub)
	explainJSON := func(t *testing.T, target string) explain.Report {
		t.Helper()
		stdout, stderr, err := runCLI(ctx, "explain", target, "--hub-context", "hub", "--kubeconfig", kubeconfig,
			"-n", daemonNamespace, "--request-timeout", "3s", "-o", "json")
		if err != nil {
			t.Fatalf("explain %s: %v\n%s", target, err, stderr)
		}
		var r explain.Report
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("explain %s -o json: %v\n%s", target, err, stdout)
		}
		return r
	}
	expect := func(t *testing.T, target string, want map[string]string) explain.Report {
		t.Helper()
		var r explain.Report
		eventually(t, waitTimeout, func() error {
			r = explainJSON(t, target)
			for _, m := range r.Members {
				if w, ok := want[m.Cluster]; ok && !strings.Contains(m.Verdict, w) {
					return fmt.Errorf("%s: %s's verdict %q, want %q", target, m.Cluster, m.Verdict, w)
				}
			}
			return nil
		})
		return r
	}
	table := func(t *testing.T, target string) {
		t.Helper()
		stdout, _, err := runCLI(ctx, "explain", target, "--hub-context", "hub", "--kubeconfig", kubeconfig, "-n", daemonNamespace, "--request-timeout", "3s")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("endpoint-aggregator explain %s\n%s", target, stdout)
	}

	// Healthy: both export cart alike.
	for i, m := range []member{east, west} {
		m.service(t, "cart", nil)
		applySlices(t, m.kube, "cart", endpointSlice("cart", "cart-1", 1+i, 2, true))
		m.export(t, "cart", nil)
	}
	r := expect(t, appNamespace+"/cart", map[string]string{"east": "imported: 2 endpoint(s) in the hub, 2 ready", "west": "imported: 2 endpoint(s)"})
	if r.Import == nil || strings.Join(r.Import.Clusters, ",") != "east,west" || r.Members[0].Ready != 2 || r.Members[0].Connected != "True" {
		t.Errorf("healthy cart: %+v", r)
	}
	table(t, appNamespace+"/cart")

	// Conflicted: east exports port 80 first, west 8080 later.
	east.service(t, "pay", nil)
	east.export(t, "pay", nil)
	time.Sleep(1100 * time.Millisecond) // creation times have second resolution
	west.service(t, "pay", func(s *corev1.Service) { s.Spec.Ports[0].Port = 8080 })
	west.export(t, "pay", nil)
	expect(t, appNamespace+"/pay", map[string]string{
		"west": "conflict: port http is 8080/TCP here and 80/TCP in the import, from the oldest export, so this cluster's MCS slices leave it out",
		"east": "imported, in conflict (its values are the ones used): PortConflict (west)",
	})
	table(t, appNamespace+"/pay")

	// Not exported, and why.
	east.service(t, "web", nil) // no ServiceExport
	west.export(t, "ghost", nil)
	east.service(t, "ext", func(s *corev1.Service) {
		s.Spec.Type, s.Spec.ExternalName, s.Spec.Ports = corev1.ServiceTypeExternalName, "example.invalid", nil
	})
	east.export(t, "ext", nil)
	expect(t, appNamespace+"/web", map[string]string{"east": "not exported: no ServiceExport shop/web in this cluster", "west": "not exported: no such Service"})
	expect(t, appNamespace+"/ghost", map[string]string{"west": "not exported: the ServiceExport has no Service of that name"})
	expect(t, appNamespace+"/ext", map[string]string{"east": "not exported: ExternalName Services cannot be exported"})
	expect(t, "kube-system/kube-dns", map[string]string{"east": "not exported: namespace kube-system is excluded by --exclude-namespaces"})

	// Not imported: the hub lacks the namespace.
	mustCreateNamespace(t, e.east.Client, "billing")
	if _, err := e.east.Client.CoreV1().Services("billing").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "billing", Name: "ledger"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := east.mcs.MulticlusterV1beta1().ServiceExports("billing").Create(ctx, &mcsv1beta1.ServiceExport{
		ObjectMeta: metav1.ObjectMeta{Namespace: "billing", Name: "ledger"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r = expect(t, "billing/ledger", map[string]string{
		"east": "not imported: hub namespace billing does not exist (start the daemon with --create-namespaces or create it)"})
	table(t, "billing/ledger")
	if r.Import != nil || !strings.Contains(r.ImportMissing, "hub namespace billing does not exist") {
		t.Errorf("billing/ledger import: %+v %q", r.Import, r.ImportMissing)
	}

	// Not imported: someone else's ServiceImport holds the name.
	if _, err := e.hubMCS.MulticlusterV1beta1().ServiceImports(appNamespace).Create(ctx, &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: "legacy"},
		Spec:       mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	east.service(t, "legacy", nil)
	east.export(t, "legacy", nil)
	expect(t, appNamespace+"/legacy", map[string]string{"east": "not imported: the hub's ServiceImport shop/legacy is not managed by endpoint-aggregator"})

	// Imported, but a per-cluster name is someone else's.
	if _, err := e.hub.Client.CoreV1().Services(appNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: "ship-west"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	west.service(t, "ship", nil)
	west.export(t, "ship", nil)
	expect(t, appNamespace+"/ship", map[string]string{"west": "imported, but the hub Service shop/ship-west is not managed by endpoint-aggregator"})
	d.waitSettled(t)

	// Stale: east stops answering; its Lease lapses.
	proxy.Block()
	r = expect(t, appNamespace+"/cart", map[string]string{"east": "its endpoints are kept (policy keep)", "west": "imported: 2 endpoint(s)"})
	if m := r.Members[0]; m.Healthy != "False" || m.Connected != "False" || !strings.HasPrefix(m.Verdict, "stale: member unreachable for ") {
		t.Errorf("east while cut off: %+v", m)
	}
	table(t, appNamespace+"/cart")
	if err := proxy.Unblock(); err != nil {
		t.Fatal(err)
	}
	expect(t, appNamespace+"/cart", map[string]string{"east": "imported: 2 endpoint(s)"})

	// Reading the hub alone still answers from what the hub holds.
	stdout, _, err := runCLI(ctx, "explain", appNamespace+"/cart", "--hub-context", "hub", "--kubeconfig", kubeconfig,
		"-n", daemonNamespace, "--read-members=false", "-o", "yaml")
	if err != nil || !strings.Contains(stdout, "verdict: 'imported: 2 endpoint(s) in the hub, 2 ready'") {
		t.Errorf("explain --read-members=false: %v\n%s", err, stdout)
	}
	if _, _, err := runCLI(ctx, "explain", "shop", "--hub-context", "hub", "--kubeconfig", kubeconfig); err == nil ||
		!strings.Contains(err.Error(), "want NAMESPACE/SERVICE") {
		t.Errorf("explain with a bad argument: %v", err)
	}
}
