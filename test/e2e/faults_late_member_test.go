package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// TestFaultMemberReachableOnlyAfterStartupIsImportedAndCaughtUpAtOnce
// starts the daemon while one member's apiserver cannot be reached yet (a
// proxy that accepts connections only some seconds later), with each member
// exporting (ServiceExport) a service the other lacks and both exporting a
// third. Whichever member is late, and whether it comes within its sync
// timeout or after it, every ServiceImport appears listing exactly the
// clusters that export it. Once reachable, the member must be synced within
// one probe interval and 5 s (checked past the timeout, logged always):
// client-go's backoff alone, after ten seconds of refused connections, would
// wait about as long again before retrying.
func TestFaultMemberReachableOnlyAfterStartupIsImportedAndCaughtUpAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		syncTimeout time.Duration
		lateBy      time.Duration // from the daemon's start to the proxy accepting
	}{
		{"within its sync timeout", 30 * time.Second, 3 * time.Second},
		{"past its sync timeout", 5 * time.Second, 11 * time.Second},
	} {
		for _, late := range []string{"east", "west"} {
			t.Run(tc.name+"/"+late+" late", func(t *testing.T) {
				lateMemberAtStartup(t, late, tc.syncTimeout, tc.lateBy)
			})
		}
	}
}

// lateMemberProbeInterval is shorter than the daemon's default (5 s), so that
// probe interval + 5 s stays below what client-go's backoff takes.
const lateMemberProbeInterval = 2 * time.Second

// lateMemberAtStartup runs one case of the test above.
func lateMemberAtStartup(t *testing.T, late string, syncTimeout, lateBy time.Duration) {
	e := startEnv(t)
	members := map[string]*testenv.Cluster{"east": e.east, "west": e.west}
	want := map[string][]string{"east-only": {"east"}, "west-only": {"west"}, "shared": {"east", "west"}}
	for i, name := range []string{"east", "west"} {
		m := mcsMember(members[name])
		for _, svc := range []string{name + "-only", "shared"} {
			m.service(t, svc, nil)
			m.export(t, svc, nil)
			applySlices(t, m.kube, svc, endpointSlice(svc, svc+"-"+name+"-1", i+1, 2, true))
		}
	}
	var proxy *testenv.Proxy
	for name, c := range members {
		if name == late {
			proxy = e.registerViaProxy(t, c)
			proxy.Block() // before the daemon starts: it finds the port closed
		} else {
			e.register(t, name, name, c.Kubeconfig)
		}
	}

	d := e.startDaemon(t, func(o *app.Options) {
		o.ExportMode = string(easync.ExportServiceExport)
		o.MemberSyncTimeout = syncTimeout
		o.ProbeInterval = lateMemberProbeInterval
	})
	started := time.Now()
	eventually(t, waitTimeout, func() error {
		for name := range members {
			if c := d.Registry.Get(name); name != late && (c == nil || !c.HasSynced()) {
				return fmt.Errorf("%s not synced", name)
			}
		}
		return nil
	})
	pastTimeout := lateBy > syncTimeout
	if pastTimeout {
		eventually(t, syncTimeout+5*time.Second, func() error {
			if c := d.Registry.Get(late); c == nil || !c.SyncTimedOut() {
				return fmt.Errorf("%s has not timed out", late)
			}
			if !d.Ready() {
				return errors.New("daemon not ready")
			}
			return nil
		})
	}
	time.Sleep(time.Until(started.Add(lateBy)))
	if c := d.Registry.Get(late); c == nil || c.HasSynced() {
		t.Fatalf("%s synced, or is not registered, while its proxy refuses connections", late)
	}

	if err := proxy.Unblock(); err != nil {
		t.Fatal(err)
	}
	reachable := time.Now()
	if err := waitUntil(2*time.Minute, 20*time.Millisecond, func() error {
		if c := d.Registry.Get(late); c == nil || !c.HasSynced() {
			return fmt.Errorf("%s not synced", late)
		}
		return nil
	}); err != nil {
		t.Fatalf("after its proxy accepts connections: %v", err)
	}
	catchUp := time.Since(reachable)
	t.Logf("catch-up: member synced %.1f s after it became reachable (probe interval %.0f s)",
		catchUp.Seconds(), lateMemberProbeInterval.Seconds())
	if limit := lateMemberProbeInterval + 5*time.Second; pastTimeout && catchUp > limit {
		t.Errorf("%s synced %s after it became reachable past its sync timeout, want at most %s (probe interval + 5s)",
			late, catchUp.Round(100*time.Millisecond), limit)
	}

	eventually(t, waitTimeout, func() error { return e.importsAre(t, want) })
	d.waitSettled(t)
	if err := e.importsAre(t, want); err != nil {
		t.Errorf("once settled: %v", err)
	}
}

// importsAre checks that the hub's ServiceImports are exactly want's keys,
// each listing exactly the clusters of want (sorted) in status.clusters and
// having its derived Service.
func (e *env) importsAre(t *testing.T, want map[string][]string) error {
	t.Helper()
	list, err := e.hubMCS.MulticlusterV1beta1().ServiceImports(appNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err
	}
	got := map[string][]string{}
	for _, imp := range list.Items {
		var clusters []string
		for _, c := range imp.Status.Clusters {
			clusters = append(clusters, c.Cluster)
		}
		slices.Sort(clusters)
		got[imp.Name] = clusters
	}
	if !maps.EqualFunc(got, want, slices.Equal) {
		return fmt.Errorf("ServiceImports (name: clusters) %v, want %v", got, want)
	}
	for svc, clusters := range want {
		if err := e.hubHasImport(t, svc, clusters); err != nil {
			return err
		}
	}
	return nil
}
