package e2e

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
)

// TestFaultMemberUnreachableAtStartupDoesNotBlockReadinessOrLoseItsObjects
// restarts the daemon while a member's apiserver is down, after that member
// changed: the daemon is ready once the member's sync timeout passes, the
// other member is aggregated, the unreachable member's last-known hub
// objects are kept (not garbage collected) and still count in the merged
// ServiceImport, and when it comes back its current state replaces them.
func TestFaultMemberUnreachableAtStartupDoesNotBlockReadinessOrLoseItsObjects(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	d := e.startDaemon(t, nil)
	exportService(t, e.east.Client, "cart")
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-east-1", 1, 3, true))
	// west alone serves a second port: the merged import has both.
	exportService(t, e.west.Client, "cart",
		corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
		corev1.ServicePort{Name: "metrics", Port: 9090, Protocol: corev1.ProtocolTCP})
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-west-1", 2, 2, true))
	bothPorts := []string{"http", "metrics"}
	eventually(t, waitTimeout, func() error {
		if err := e.hubHas(t, "cart", map[string]int{"east": 3, "west": 2}, map[string]int{"east": 3, "west": 2}); err != nil {
			return err
		}
		return e.importPorts(t, "cart", bothPorts)
	})
	d.waitSettled(t)
	d.stop()

	// With no daemon running: east and west change, then west goes down.
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-east-1", 1, 6, true))
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-west-1", 2, 5, true))
	exportService(t, e.west.Client, "wishlist")
	applySlices(t, e.west.Client, "wishlist", endpointSlice("wishlist", "wishlist-west-1", 4, 4, true))
	westBefore := e.clusterObjects(t, "west")
	if err := e.west.StopAPIServer(); err != nil {
		t.Fatal(err)
	}

	const syncTimeout = 5 * time.Second
	t0 := time.Now()
	d = e.startDaemon(t, func(o *app.Options) { o.MemberSyncTimeout = syncTimeout })
	eventually(t, syncTimeout+5*time.Second, func() error {
		if !d.Ready() {
			return errors.New("daemon not ready")
		}
		return nil
	})
	ready := time.Since(t0)
	t.Logf("ready %s after start with west unreachable (sync timeout %s)", ready.Round(time.Millisecond), syncTimeout)
	if ready < syncTimeout {
		t.Errorf("ready after %s, before west could sync or time out (%s)", ready, syncTimeout)
	}
	eventually(t, waitTimeout, func() error {
		if ev := secretEvents(t, e, "west"); !strings.Contains(ev, clusters.ReasonSyncTimeout) {
			return fmt.Errorf("no %s Event on west's Secret; events: %q", clusters.ReasonSyncTimeout, ev)
		}
		return nil
	})
	// east catches up; west's last-known objects stay, untouched.
	eventually(t, waitTimeout, func() error {
		return e.hubHasSourced(t, "cart", map[string]int{"east": 6, "west": 2}, map[string]int{"east": 6, "west": 2})
	})
	// Once the daemon has done all it can (west's keys wait for its sync),
	// west's objects are as they were.
	d.waitSettled(t)
	if got := e.clusterObjects(t, "west"); !reflect.DeepEqual(got, westBefore) {
		t.Errorf("west's hub objects changed while it is unreachable:\nbefore %v\n now %v", westBefore, got)
	}
	// The merged ServiceImport and derived Service still count west's
	// last-known export, whose slices are still served, also once east's
	// Service changes and the merge is recomputed.
	if err := e.hubHasImport(t, "cart", []string{"east", "west"}); err != nil {
		t.Errorf("while west is unreachable after a restart: %v", err)
	}
	if err := e.importPorts(t, "cart", bothPorts); err != nil {
		t.Errorf("while west is unreachable after a restart: %v", err)
	}
	svc, err := e.east.Client.CoreV1().Services(appNamespace).Get(ctx, "cart", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Labels = map[string]string{"touched": "true"}
	if _, err := e.east.Client.CoreV1().Services(appNamespace).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	d.waitSettled(t)
	if err := e.hubHasImport(t, "cart", []string{"east", "west"}); err != nil {
		t.Errorf("after east's Service changed, west still unreachable: %v", err)
	}
	if err := e.importPorts(t, "cart", bothPorts); err != nil {
		t.Errorf("after east's Service changed, west still unreachable: %v", err)
	}
	if got := e.clusterObjects(t, "west"); !reflect.DeepEqual(got, westBefore) {
		t.Errorf("west's hub objects changed while it is unreachable:\nbefore %v\n now %v", westBefore, got)
	}

	if err := e.west.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	eventually(t, reconnectTimeout, func() error {
		if err := e.hubHas(t, "cart", map[string]int{"east": 6, "west": 5}, map[string]int{"east": 6, "west": 5}); err != nil {
			return err
		}
		if err := e.importPorts(t, "cart", bothPorts); err != nil {
			return err
		}
		return e.hubHas(t, "wishlist", map[string]int{"west": 4}, map[string]int{"west": 4})
	})
	t.Logf("west aggregated %s after its apiserver came back", time.Since(back).Round(time.Millisecond))
	d.waitSettled(t)
	if n := eventCount(t, e, "west", clusters.ReasonConnected); n < 2 {
		t.Errorf("%d %s Events on west's Secret, want a second one after it came back; events: %q", n, clusters.ReasonConnected, secretEvents(t, e, "west"))
	}
}
