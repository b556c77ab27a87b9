package e2e

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
)

// TestStandbyTakesOverAConvergedHubWithoutWriting runs two replicas with
// leader election. Only the leader writes; when it stops, the standby, whose
// caches are warm, takes over and writes nothing to a converged hub.
func TestStandbyTakesOverAConvergedHubWithoutWriting(t *testing.T) {
	e := startEnv(t)
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	fast := func(o *app.Options) {
		o.LeaderElect = true
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 4*time.Second, 3*time.Second, 500*time.Millisecond
	}
	leader := e.startDaemon(t, fast)
	exportService(t, e.east.Client, "cart")
	exportService(t, e.west.Client, "cart")
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-1", 1, 3, true))
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-1", 2, 2, true))
	waitFor(t, e, "cart", map[string]int{"east": 3, "west": 2}, map[string]int{"east": 3, "west": 2})
	leader.waitSettled(t)

	standby := e.startDaemon(t, fast)
	eventually(t, waitTimeout, func() error {
		if !standby.Ready() {
			return fmt.Errorf("standby not ready (caches not warm)")
		}
		return nil
	})
	// A change while the standby waits is written by the leader alone.
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-1", 1, 4, true))
	waitFor(t, e, "cart", map[string]int{"east": 4, "west": 2}, map[string]int{"east": 4, "west": 2})
	leader.waitSettled(t)
	if n := standby.writes.n.Load(); n != 0 {
		t.Fatalf("standby wrote %d times while another replica led", n)
	}

	before := e.ourObjects(t)
	leader.stop() // releases the lease
	eventually(t, waitTimeout, func() error {
		if standby.Controller.HasStarted() {
			return nil
		}
		return fmt.Errorf("standby has not taken over")
	})
	standby.waitSettled(t)
	if n := standby.writes.n.Load(); n != 0 {
		t.Errorf("takeover of a converged hub sent %d writes, want 0", n)
	}
	if after := e.ourObjects(t); !reflect.DeepEqual(before, after) {
		t.Errorf("hub objects changed across the takeover:\nbefore %v\n after %v", before, after)
	}
	// The new leader follows changes.
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-1", 2, 5, true))
	waitFor(t, e, "cart", map[string]int{"east": 4, "west": 5}, map[string]int{"east": 4, "west": 5})
}
