package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/daemonconfig"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/explain"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// TestExplainTakesTheDaemonsPublishedConfiguration runs the daemon with
// --export-mode=annotation. It publishes that on the hub, so explain without
// the flag gives the right verdicts; forced to the wrong mode, explain warns
// and flags the verdicts the hub's objects contradict; with nothing
// published (an older daemon), it says so once and flags them too.
func TestExplainTakesTheDaemonsPublishedConfiguration(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	d := e.startDaemon(t, func(o *app.Options) { o.ExportMode = string(easync.ExportAnnotation) })
	exportService(t, e.east.Client, "cart")
	exportService(t, e.west.Client, "cart")
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-1", 1, 3, true))
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-1", 2, 2, true))
	waitFor(t, e, "cart", map[string]int{"east": 3, "west": 2}, map[string]int{"east": 3, "west": 2})
	d.waitSettled(t)

	published, err := daemonconfig.Read(ctx, e.hub.Client.CoreV1(), daemonNamespace)
	if err != nil || published == nil {
		t.Fatalf("published configuration: %+v, %v", published, err)
	}
	if published.Flags["export-mode"] != "annotation" || published.Version == "" || published.Flags["leader-election-id"] != "endpoint-aggregator" {
		t.Errorf("published configuration %+v", published)
	}

	kubeconfig := cliKubeconfig(t, e.hub)
	explainCart := func(t *testing.T, args ...string) (explain.Report, string) {
		t.Helper()
		args = append([]string{"explain", appNamespace + "/cart", "--hub-context", "hub", "--kubeconfig", kubeconfig, "-n", daemonNamespace, "--request-timeout", "5s"}, args...)
		stdout, stderr, err := runCLI(ctx, args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, stderr)
		}
		var r explain.Report
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, stdout)
		}
		t.Logf("%s\nstderr:\n%s", strings.Join(args, " "), stderr)
		return r, stderr
	}
	verdicts := func(r explain.Report) map[string]explain.MemberRow {
		out := map[string]explain.MemberRow{}
		for _, m := range r.Members {
			out[m.Cluster] = m
		}
		return out
	}

	t.Run("explain without flags takes the daemon's export mode", func(t *testing.T) {
		r, stderr := explainCart(t, "-o", "json")
		v := verdicts(r)
		if !strings.Contains(v["east"].Verdict, "imported: 3 endpoint(s) in the hub, 3 ready") || !strings.Contains(v["west"].Verdict, "imported: 2 endpoint(s)") ||
			v["east"].Contradicted || v["east"].Export != "annotation" {
			t.Errorf("verdicts: east %+v, west %+v", v["east"], v["west"])
		}
		if strings.Contains(stderr, "Warning") {
			t.Errorf("warnings with the daemon's own configuration:\n%s", stderr)
		}
		if !strings.Contains(r.DaemonConfig, "published in ConfigMap "+daemonNamespace+"/"+daemonconfig.Name) {
			t.Errorf("daemonConfig %q", r.DaemonConfig)
		}
	})

	t.Run("explain forced to the wrong mode warns and flags the contradiction", func(t *testing.T) {
		r, stderr := explainCart(t, "-o", "json", "--export-mode=serviceexport")
		if !strings.Contains(stderr, "Warning: --export-mode=serviceexport given, but the daemon runs with --export-mode=annotation") {
			t.Errorf("no warning about the override:\n%s", stderr)
		}
		east := verdicts(r)["east"]
		want := "not exported: no ServiceExport shop/cart in this cluster (--export-mode=serviceexport); but the hub holds 3 endpoint(s) from east for shop/cart: the daemon's configuration may differ from what explain assumed"
		if east.Verdict != want || !east.Contradicted {
			t.Errorf("east's verdict %q (contradicted %v), want %q", east.Verdict, east.Contradicted, want)
		}
	})

	t.Run("status shows the daemon's configuration", func(t *testing.T) {
		_, stderr, err := runCLI(ctx, "status", "--hub-context", "hub", "--kubeconfig", kubeconfig, "-n", daemonNamespace)
		if err != nil || !strings.Contains(stderr, "runs with --export-mode=annotation") {
			t.Errorf("status: %v\n%s", err, stderr)
		}
	})

	t.Run("with nothing published, explain assumes the defaults, says so once and flags the contradiction", func(t *testing.T) {
		if err := e.hub.Client.CoreV1().ConfigMaps(daemonNamespace).Delete(ctx, daemonconfig.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		r, stderr := explainCart(t, "-o", "json")
		if n := strings.Count(stderr, "the daemon publishes no configuration"); n != 1 {
			t.Errorf("said %d times that nothing is published:\n%s", n, stderr)
		}
		if east := verdicts(r)["east"]; !east.Contradicted || !strings.Contains(east.Verdict, "but the hub holds 3 endpoint(s) from east") {
			t.Errorf("east's verdict %q (contradicted %v)", east.Verdict, east.Contradicted)
		}
	})

	t.Run("a restarted daemon publishes it again, and once only", func(t *testing.T) {
		d.stop()
		d2 := e.startDaemon(t, func(o *app.Options) { o.ExportMode = string(easync.ExportAnnotation) })
		d2.waitSettled(t)
		eventually(t, waitTimeout, func() error {
			_, err := e.hub.Client.CoreV1().ConfigMaps(daemonNamespace).Get(ctx, daemonconfig.Name, metav1.GetOptions{})
			return err
		})
		if n := d2.writes.n.Load(); n != 1 {
			t.Errorf("the restarted daemon wrote %d times, want 1 (the ConfigMap)", n)
		}
		d2.stop()
		d3 := e.startDaemon(t, func(o *app.Options) { o.ExportMode = string(easync.ExportAnnotation) })
		d3.waitSettled(t)
		if n := d3.writes.n.Load(); n != 0 {
			t.Errorf("a restart with the same configuration wrote %d times, want 0", n)
		}
	})
}
