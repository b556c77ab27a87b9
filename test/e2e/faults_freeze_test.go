package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
)

// TestFaultMemberFrozenIsDetectedByItsProbeAndRecovers freezes a member's
// apiserver with SIGSTOP: its connections hang instead of failing, so only
// the health probe can tell. The member's Secret overrides the grace period
// (west keeps the daemon default: keep forever). The test checks that the
// hang is detected within the probe interval plus its timeout, the Lease
// stops renewing, west keeps syncing meanwhile, east's endpoints turn not
// ready after its grace and, after SIGCONT, come back and follow changes.
func TestFaultMemberFrozenIsDetectedByItsProbeAndRecovers(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	sec, err := e.hub.Client.CoreV1().Secrets(daemonNamespace).Get(ctx, "east", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec.Annotations[clusters.AnnotationUnreachableGrace] = "3s"
	if _, err := e.hub.Client.CoreV1().Secrets(daemonNamespace).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	const probeInterval, probeTimeout = time.Second, time.Second
	e.startDaemon(t, func(o *app.Options) {
		o.ProbeInterval, o.ProbeTimeout = probeInterval, probeTimeout
		o.MemberLeaseDuration = 4 * time.Second
	})
	exportService(t, e.east.Client, "cart")
	exportService(t, e.west.Client, "cart")
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-1", 1, 3, true))
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-1", 2, 2, true))
	waitFor(t, e, "cart", map[string]int{"east": 3, "west": 2}, map[string]int{"east": 3, "west": 2})
	e.waitLeasesHeld(t, "east", "west")

	if err := e.east.FreezeAPIServer(); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	// Detection: the probe times out. Allow the Event write on top of
	// interval + timeout before calling it missed.
	bound := probeInterval + probeTimeout
	eventually(t, bound+5*time.Second, func() error {
		if reason := clusters.ClassTimeout.Reason(); eventCount(t, e, "east", reason) == 0 {
			return fmt.Errorf("no %s Event on east's Secret yet", reason)
		}
		return nil
	})
	detected := time.Since(frozen)
	t.Logf("frozen east detected as unreachable after %s (probe interval %s + timeout %s)", detected.Round(10*time.Millisecond), probeInterval, probeTimeout)

	// West is not held up by the hanging member.
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-1", 2, 4, true))
	waitFor(t, e, "cart", map[string]int{"east": 3, "west": 4}, map[string]int{"west": 4})
	t.Logf("east's endpoints not ready %s after the freeze (grace 3s from its Secret)", time.Since(frozen).Round(100*time.Millisecond))
	if st := e.hubState(t, "cart"); st.total["east"] != 3 {
		t.Errorf("east's last-known endpoints were not kept: %+v", st)
	}

	eastRenew := e.leaseStalls(t, "east", "west")

	if err := e.east.ThawAPIServer(); err != nil {
		t.Fatal(err)
	}
	thawed := time.Now()
	waitFor(t, e, "cart", map[string]int{"east": 3, "west": 4}, map[string]int{"east": 3, "west": 4})
	t.Logf("east ready again %s after SIGCONT", time.Since(thawed).Round(100*time.Millisecond))
	if eventCount(t, e, "east", clusters.ReasonReachable) == 0 {
		t.Errorf("no %s Event on east's Secret after SIGCONT", clusters.ReasonReachable)
	}
	// Its watches work again: a change after the thaw arrives.
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-1", 1, 5, true))
	waitFor(t, e, "cart", map[string]int{"east": 5, "west": 4}, map[string]int{"east": 5, "west": 4})
	eventually(t, waitTimeout, func() error {
		if r, err := e.leaseRenewed("east"); err != nil || !r.After(eastRenew) {
			return fmt.Errorf("east's Lease not renewed since the thaw (err %v)", err)
		}
		return nil
	})
}
