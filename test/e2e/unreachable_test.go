package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// TestUnreachableMemberLeaseStopsAndGraceMarksEndpointsNotReady cuts the
// daemon off a member (a proxy drops every connection, as a partition does):
// its liveness Lease stops being renewed, and after --unreachable-grace its
// hub endpoints turn not ready while the other member's stay; when it is
// back, readiness and renewals return.
func TestUnreachableMemberLeaseStopsAndGraceMarksEndpointsNotReady(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	proxy := e.registerViaProxy(t, e.east)
	e.register(t, "west", "west", e.west.Kubeconfig)
	const grace = 3 * time.Second
	d := e.startDaemon(t, func(o *app.Options) {
		o.UnreachableGrace = grace
		o.ProbeInterval, o.ProbeTimeout = 500*time.Millisecond, time.Second
		o.MemberLeaseDuration = 4 * time.Second
	})
	exportService(t, e.east.Client, "cart")
	exportService(t, e.west.Client, "cart")
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-1", 1, 3, true))
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-1", 2, 2, true))
	waitFor(t, e, "cart", map[string]int{"east": 3, "west": 2}, map[string]int{"east": 3, "west": 2})

	e.waitLeasesHeld(t, "east", "west")

	proxy.Block()
	stopped := time.Now()
	// Within the grace period the last-known endpoints stay ready: once the
	// daemon has found east unreachable (its probes failed, it said so in
	// an Event) and has nothing left to sync, the hub still has them ready.
	var since time.Time
	eventually(t, waitTimeout, func() error {
		c := d.Registry.Get("east")
		if c == nil {
			return fmt.Errorf("east not registered")
		}
		var down bool
		if since, down = c.UnreachableSince(); !down {
			return fmt.Errorf("east not unreachable yet")
		}
		if reason := clusters.ClassConnectionRefused.Reason(); !strings.Contains(secretEvents(t, e, "east"), reason) {
			return fmt.Errorf("no %s Event on east's Secret; events:\n%s", reason, secretEvents(t, e, "east"))
		}
		if n := d.Controller.Pending(); n > 0 {
			return fmt.Errorf("%d keys queued or retrying", n)
		}
		return nil
	})
	st := e.hubState(t, "cart")
	if inGrace := time.Since(since) < grace; !inGrace {
		t.Fatalf("the daemon took until %s after east's first failed probe to report it unreachable, past the grace period (%s)",
			time.Since(since).Round(100*time.Millisecond), grace)
	}
	if st.ready["east"] != 3 {
		t.Fatalf("east endpoints changed before the grace period ended: %+v", st)
	}
	waitFor(t, e, "cart", map[string]int{"east": 3, "west": 2}, map[string]int{"west": 2})
	t.Logf("east marked not ready %s after it was cut off (grace 3s)", time.Since(stopped).Round(100*time.Millisecond))

	eastRenew := e.leaseStalls(t, "east", "west")

	if err := proxy.Unblock(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, e, "cart", map[string]int{"east": 3, "west": 2}, map[string]int{"east": 3, "west": 2})
	eventually(t, waitTimeout, func() error {
		r, err := e.leaseRenewed("east")
		if err != nil {
			return err
		}
		if !r.After(eastRenew) {
			return fmt.Errorf("east's Lease not renewed since recovery")
		}
		return nil
	})

	// Unregistering east deletes its Lease.
	if err := e.hub.Client.CoreV1().Secrets(daemonNamespace).Delete(ctx, "east", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitTimeout, func() error {
		if _, err := e.leaseRenewed("east"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("east's Lease still there (err %v)", err)
		}
		return nil
	})
}

// waitLeasesHeld waits until every cluster's liveness Lease is held.
func (e *env) waitLeasesHeld(t *testing.T, clusters ...string) {
	t.Helper()
	eventually(t, waitTimeout, func() error {
		for _, c := range clusters {
			if _, err := e.leaseRenewed(c); err != nil {
				return err
			}
		}
		return nil
	})
}

// leaseStalls checks that down's Lease is not renewed while up's is: the
// daemon renews every member's Lease in turn, once a period, so two
// renewals of up's Lease after the start span a whole round, in which
// down's turn came and went. It returns down's last renew time.
func (e *env) leaseStalls(t *testing.T, down, up string) time.Time {
	t.Helper()
	last, err := e.leaseRenewed(down)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var renewals []time.Time
	eventually(t, waitTimeout, func() error {
		r, err := e.leaseRenewed(up)
		if err != nil {
			return err
		}
		if r.After(start) && (len(renewals) == 0 || r.After(renewals[len(renewals)-1])) {
			renewals = append(renewals, r)
		}
		if len(renewals) < 2 {
			return fmt.Errorf("%s's Lease renewed %d times since the check started, want 2", up, len(renewals))
		}
		return nil
	})
	if again, _ := e.leaseRenewed(down); !again.Equal(last) {
		t.Errorf("%s's Lease was renewed while %s was unreachable", down, down)
	}
	return last
}

// leaseRenewed returns when the liveness Lease of a member was last renewed.
func (e *env) leaseRenewed(cluster string) (time.Time, error) {
	l, err := e.hub.Client.CoordinationV1().Leases(daemonNamespace).Get(context.Background(), easync.MemberLeasePrefix+cluster, metav1.GetOptions{})
	if err != nil {
		return time.Time{}, err
	}
	if l.Spec.RenewTime == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return time.Time{}, fmt.Errorf("lease %s has no holder or renew time", l.Name)
	}
	return l.Spec.RenewTime.Time, nil
}
