package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/explain"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// TestMemberFailuresNameTheirCause registers east with the identity
// `register` creates and then revokes it (deletes its ServiceAccount),
// registers "dead" at a port where nothing listens, a Secret whose
// kubeconfig does not parse, and west, which is then frozen (SIGSTOP).
// Events, the member error metric and `status` name each cause
// (Unauthorized, ConnectionRefused, Timeout); the refused registration is
// counted; and the frozen member shows unreachable in `status` and
// `explain` while its Lease is still live, not only once it lapses.
func TestMemberFailuresNameTheirCause(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	kubeconfig := cliKubeconfig(t, e.hub, e.east, e.west)
	cli := func(t *testing.T, args ...string) string {
		t.Helper()
		stdout, stderr, err := runCLI(ctx, append(args, "--kubeconfig", kubeconfig)...)
		if err != nil {
			t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout, stderr)
		}
		return stdout
	}
	cli(t, "register", "--member-context", "east", "--hub-context", "hub", "--name", "east", "--token-wait", "2s")
	e.register(t, "west", "west", e.west.Kubeconfig)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := ln.Addr().String()
	_ = ln.Close()
	dead, err := testenv.KubeconfigWithServer(e.west.Kubeconfig, "https://"+deadAddr)
	if err != nil {
		t.Fatal(err)
	}
	e.register(t, "dead", "dead", dead)
	e.register(t, "garbage", "garbage", []byte("{not yaml: ["))

	// A Lease long enough that it cannot lapse while the test looks.
	const leaseDuration = 2 * time.Minute
	d := e.startDaemon(t, func(o *app.Options) {
		o.ProbeInterval, o.ProbeTimeout = time.Second, time.Second
		o.MemberLeaseDuration = leaseDuration
		o.MemberSyncTimeout = 5 * time.Second
	})
	exportService(t, e.east.Client, "cart")
	exportService(t, e.west.Client, "cart")
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-1", 1, 3, true))
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-1", 2, 2, true))
	waitFor(t, e, "cart", map[string]int{"east": 3, "west": 2}, map[string]int{"east": 3, "west": 2})
	e.waitLeasesHeld(t, "east", "west")

	// Revoke east's token: its ServiceAccount goes.
	if err := e.east.Client.CoreV1().ServiceAccounts(cliMemberNamespace).Delete(ctx, cliMemberSA, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	status := func() (map[string]cliMember, error) {
		stdout, stderr, err := runCLI(ctx, "status", "--hub-context", "hub", "-o", "json", "--kubeconfig", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("status: %v\n%s", err, stderr)
		}
		var report struct {
			Members []cliMember `json:"members"`
		}
		if err := json.Unmarshal([]byte(stdout), &report); err != nil {
			return nil, fmt.Errorf("%v\n%s", err, stdout)
		}
		out := map[string]cliMember{}
		for _, m := range report.Members {
			out[m.Name] = m
		}
		return out, nil
	}
	causes := map[string]clusters.ErrorClass{"east": clusters.ClassUnauthorized, "dead": clusters.ClassConnectionRefused}
	checkCauses := func(causes map[string]clusters.ErrorClass) error {
		rows, err := status()
		if err != nil {
			return err
		}
		for cluster, class := range causes {
			if n := eventCount(t, e, cluster, class.Reason()); n == 0 {
				return fmt.Errorf("no %s Event on %s's Secret; events:\n%s", class.Reason(), cluster, secretEvents(t, e, cluster))
			}
			if v := gaugeSum(t, d, "endpoint_aggregator_member_cluster_error", map[string]string{"cluster": cluster, "reason": class.Label()}); v != 1 {
				return fmt.Errorf("endpoint_aggregator_member_cluster_error{cluster=%q,reason=%q} = %v, want 1", cluster, class.Label(), v)
			}
			if r := rows[cluster]; r.Connected != "False" || !strings.HasPrefix(r.LastError, string(class)+": ") {
				return fmt.Errorf("status of %s: connected %s, last error %q; want False and the cause %s", cluster, r.Connected, r.LastError, class)
			}
		}
		return nil
	}
	eventually(t, waitTimeout, func() error { return checkCauses(causes) })
	if v := gaugeValue(t, d, "endpoint_aggregator_rejected_registrations", "reason", "invalid_kubeconfig"); v != 1 {
		t.Errorf("endpoint_aggregator_rejected_registrations{reason=invalid_kubeconfig} = %v, want 1", v)
	}
	t.Logf("status with a revoked and a refusing member:\n%s", cli(t, "status", "--hub-context", "hub"))
	// dead never synced: its sync timeout says why too.
	if ev := secretEvents(t, e, "dead"); !strings.Contains(ev, "did not sync within 5s (ConnectionRefused: ") {
		t.Errorf("dead's sync timeout does not name the cause; events:\n%s", ev)
	}

	// West hangs: the daemon sees it within a few probes, and status and
	// explain say so while its Lease is still live.
	if err := e.west.FreezeAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.west.ThawAPIServer() })
	frozen := time.Now()
	causes["west"] = clusters.ClassTimeout
	eventually(t, 20*time.Second, func() error { return checkCauses(causes) })
	seen := time.Since(frozen)
	renewed, err := e.leaseRenewed("west")
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(renewed) >= leaseDuration {
		t.Fatalf("west's Lease lapsed (renewed %s ago) before the check; the test proves nothing", time.Since(renewed))
	}
	t.Logf("status with west frozen:\n%s", cli(t, "status", "--hub-context", "hub"))
	t.Logf("frozen west shown unreachable by status %s after SIGSTOP; its Lease was renewed %s ago, for %s",
		seen.Round(100*time.Millisecond), time.Since(renewed).Round(100*time.Millisecond), leaseDuration)

	stdout := cli(t, "explain", appNamespace+"/cart", "--hub-context", "hub", "--export-mode", "annotation", "--read-members=false", "-o", "json")
	var r explain.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("explain -o json: %v\n%s", err, stdout)
	}
	for _, m := range r.Members {
		if m.Cluster != "west" {
			continue
		}
		if m.Healthy != "False" || !strings.HasPrefix(m.Cause, "Timeout: ") || !strings.HasPrefix(m.Verdict, "stale: member unreachable for ") {
			t.Errorf("explain's row of frozen west: healthy %s, cause %q, verdict %q", m.Healthy, m.Cause, m.Verdict)
		}
	}
	l, err := e.hub.Client.CoordinationV1().Leases(daemonNamespace).Get(ctx, easync.MemberLeasePrefix+"west", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Annotations[easync.AnnotationReachable] != "false" || l.Annotations[easync.AnnotationErrorReason] != string(clusters.ClassTimeout) {
		t.Errorf("west's Lease annotations %v", l.Annotations)
	}

	// Thawed, it is reachable again: the Lease, status and the metric say so.
	if err := e.west.ThawAPIServer(); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitTimeout, func() error {
		rows, err := status()
		if err != nil {
			return err
		}
		if r := rows["west"]; r.Connected != "True" || r.LastError != "" {
			return fmt.Errorf("status of thawed west: connected %s, last error %q", r.Connected, r.LastError)
		}
		if v := gaugeSum(t, d, "endpoint_aggregator_member_cluster_error", map[string]string{"cluster": "west"}); v != 0 {
			return fmt.Errorf("endpoint_aggregator_member_cluster_error of thawed west = %v", v)
		}
		return nil
	})
}
