package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

// TestFaultRestartWithABrokenSecretKeepsTheMemberRegistered restarts the
// daemon, as a rollout or a failover does, after a member's Secret was
// updated to a kubeconfig that does not parse. The running daemon kept its
// previous connection; the new one has none to keep. The member is still
// registered: its hub objects and its place in the ServiceImport stay (the
// default unreachable policy keeps them), it is retried, and once the Secret
// is fixed it connects and its changes flow again. With a withdraw period,
// the same member is withdrawn once the period passes, the other is not.
func TestFaultRestartWithABrokenSecretKeepsTheMemberRegistered(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	d := e.startDaemon(t, nil)
	exportService(t, e.east.Client, "cart")
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-east-1", 1, 3, true))
	exportService(t, e.west.Client, "cart")
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-west-1", 2, 2, true))
	both := map[string]int{"east": 3, "west": 2}
	eventually(t, waitTimeout, func() error { return e.hubHas(t, "cart", both, both) })

	updateSecret(t, e, "east", []byte("{not a kubeconfig: ["))
	eventually(t, waitTimeout, func() error {
		if ev := secretEvents(t, e, "east"); !strings.Contains(ev, "keeping the previous connection") {
			return fmt.Errorf("no Event about the kept connection yet: %s", ev)
		}
		return nil
	})
	d.waitSettled(t)
	d.stop()

	// The replacement daemon cannot connect east.
	d = e.startDaemon(t, nil)
	d.waitSettled(t)
	// Once the replica owns east (it is the only one) it tries to connect.
	eventually(t, waitTimeout, func() error {
		if st, _ := d.Registry.Lookup("east"); st.Phase != lifecycle.Registered || !st.Unreachable {
			return fmt.Errorf("east after the restart: %+v, want registered and unreachable", st)
		}
		return nil
	})
	if err := e.hubHas(t, "cart", both, both); err != nil {
		t.Fatalf("after a restart that could not connect east: %v", err)
	}
	eventually(t, waitTimeout, func() error {
		if ev := secretEvents(t, e, "east"); !strings.Contains(ev, "registered but not connected") {
			return fmt.Errorf("no Event saying east is registered but not connected: %s", ev)
		}
		return nil
	})
	if v := gaugeValue(t, d, "endpoint_aggregator_member_clusters", "state", "not_connected"); v != 1 {
		t.Errorf("member_clusters{state=not_connected} = %v, want 1", v)
	}
	d.stop()

	// With a withdraw period, the unconnected member is withdrawn once it
	// passes, and only it.
	const withdraw = 3 * time.Second
	d = e.startDaemon(t, func(o *app.Options) { o.UnreachableWithdraw = withdraw })
	eventually(t, waitTimeout, func() error {
		return e.hubHas(t, "cart", map[string]int{"west": 2}, map[string]int{"west": 2})
	})

	// The Secret is fixed: east connects, and is aggregated again with
	// what changed in it meanwhile.
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-east-1", 1, 4, true))
	updateSecret(t, e, "east", e.east.Kubeconfig)
	eventually(t, waitTimeout, func() error {
		if st, _ := d.Registry.Lookup("east"); st.Phase != lifecycle.Synced {
			return fmt.Errorf("east is %s", st.Phase)
		}
		return e.hubHas(t, "cart", map[string]int{"east": 4, "west": 2}, map[string]int{"east": 4, "west": 2})
	})
	if ev := secretEvents(t, e, "east"); !strings.Contains(ev, clusters.ReasonConnected) {
		t.Errorf("no %s Event after the fix: %s", clusters.ReasonConnected, ev)
	}
}
