package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// Fault-injection tests (DESIGN.md §4 and §7): member and hub API servers
// stopped and restarted, watches expired by an etcd compaction, credentials
// rotated and broken, a member unreachable at startup, the daemon killed
// mid-sync. Each ends with the hub converged and nothing lost. `make
// test-faults` runs only these (prefix TestFault).

// reconnectTimeout bounds catching up with a member or hub that was
// unreachable. client-go's reflectors retry with exponential backoff (0.8 s
// doubling up to 30 s, each wait jittered up to twice as long, and a relist
// after 410 Gone may wait out one more step), so after an outage of ten
// seconds or so the daemon can take well over half a minute to catch up.
const reconnectTimeout = 3 * time.Minute

// hubHas checks the hub's view of svc: MCS slice endpoints (total and ready)
// per source cluster, the per-cluster Service and Endpoints of exactly those
// clusters, and a ServiceImport listing them with its derived Service.
func (e *env) hubHas(t *testing.T, svc string, total, ready map[string]int) error {
	t.Helper()
	st := e.hubState(t, svc)
	if err := st.hasSourced(svc, total, ready); err != nil {
		return err
	}
	return st.hasImport(svc, slices.Sorted(maps.Keys(total)))
}

// hubHasSourced is hubHas without the merged objects: only the slices and
// the per-cluster Service and Endpoints.
func (e *env) hubHasSourced(t *testing.T, svc string, total, ready map[string]int) error {
	t.Helper()
	return e.hubState(t, svc).hasSourced(svc, total, ready)
}

// hubHasImport checks that svc's ServiceImport lists exactly the clusters
// want (sorted) and has a derived Service; none of them when want is empty.
func (e *env) hubHasImport(t *testing.T, svc string, want []string) error {
	t.Helper()
	return e.hubState(t, svc).hasImport(svc, want)
}

func (st hubState) hasSourced(svc string, total, ready map[string]int) error {
	if !maps.Equal(st.total, total) || !maps.Equal(st.ready, ready) {
		return fmt.Errorf("hub slices of %s: total %v ready %v; want total %v ready %v", svc, st.total, st.ready, total, ready)
	}
	want := slices.Sorted(maps.Keys(total))
	if got := slices.Sorted(maps.Keys(st.perClusterServices)); !slices.Equal(got, want) {
		return fmt.Errorf("per-cluster Services of %s from %v, want %v", svc, got, want)
	}
	if got := slices.Sorted(maps.Keys(st.perClusterEndpoints)); !slices.Equal(got, want) {
		return fmt.Errorf("per-cluster Endpoints of %s from %v, want %v", svc, got, want)
	}
	return nil
}

func (st hubState) hasImport(svc string, want []string) error {
	got := slices.Sorted(slices.Values(st.importClusters))
	if len(want) == 0 {
		want = nil
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("ServiceImport %s clusters %v, want %v", svc, got, want)
	}
	if (st.derived != nil) != (len(want) > 0) {
		return fmt.Errorf("derived Service of %s present: %v, want %v", svc, st.derived != nil, len(want) > 0)
	}
	return nil
}

// TestFaultMemberAPIServerDownKeepsLastKnownEndpointsAndLearnsWhatChangedMeanwhile
// stops a member's apiserver: the hub keeps the member's last-known
// endpoints. The apiserver comes back while the daemon is still cut off
// (a proxy in front of it), a slice and a Service are deleted, another slice
// changes and a Service is added; then the daemon reconnects, and must learn
// all of it, deletes included, while the other member's objects are never
// touched.
//
// The proxy is blocked before the apiserver stops: kube-apiserver's
// graceful shutdown waits for open watches (up to --request-timeout), longer
// than testenv waits. To the daemon both look the same: its connections
// drop and new ones are refused.
func TestFaultMemberAPIServerDownKeepsLastKnownEndpointsAndLearnsWhatChangedMeanwhile(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	eastProxy := e.registerViaProxy(t, e.east)
	e.register(t, "west", "west", e.west.Kubeconfig)
	d := e.startDaemon(t, nil)

	exportService(t, e.east.Client, "cart")
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-east-a", 1, 3, true), endpointSliceAt("cart", "cart-east-b", 1, 3, 2, true))
	exportService(t, e.east.Client, "solo")
	applySlices(t, e.east.Client, "solo", endpointSlice("solo", "solo-east", 3, 4, true))
	exportService(t, e.west.Client, "cart")
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-west", 2, 2, true))
	exportService(t, e.west.Client, "solo")
	applySlices(t, e.west.Client, "solo", endpointSlice("solo", "solo-west", 4, 1, true))
	lastKnown := func() error {
		if err := e.hubHas(t, "cart", map[string]int{"east": 5, "west": 2}, map[string]int{"east": 5, "west": 2}); err != nil {
			return err
		}
		return e.hubHas(t, "solo", map[string]int{"east": 4, "west": 1}, map[string]int{"east": 4, "west": 1})
	}
	eventually(t, waitTimeout, lastKnown)
	d.waitSettled(t)
	westBefore := e.clusterObjects(t, "west")
	westDeletes := e.watchDeletes(t, "west")

	// While east's apiserver is down the daemon keeps retrying its watches,
	// ready and keeping east's last-known endpoints, also once it has
	// found east unreachable.
	eastProxy.Block()
	if err := e.east.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitTimeout, func() error {
		if !d.Ready() {
			t.Fatal("daemon not ready while a member is down")
		}
		if err := lastKnown(); err != nil {
			t.Fatalf("while east is down: %v", err)
		}
		if _, down := d.Registry.Get("east").UnreachableSince(); !down {
			return errors.New("the daemon has not found east unreachable yet")
		}
		if n := d.Controller.Pending(); n > 0 {
			return fmt.Errorf("%d keys queued or retrying", n)
		}
		return nil
	})
	if err := lastKnown(); err != nil {
		t.Fatalf("once the daemon found east unreachable: %v", err)
	}

	// Back up, but the daemon still cannot reach it: change things it can
	// only learn from a fresh list (or a replay of what it missed).
	if err := e.east.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	// cart-east-a changes (3 ready → 6, 2 of them not ready), cart-east-b goes.
	applySlices(t, e.east.Client, "cart", markNotReady(endpointSliceAt("cart", "cart-east-a", 1, 10, 6, true), 2))
	if err := e.east.Client.CoreV1().Services(appNamespace).Delete(ctx, "solo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	exportService(t, e.east.Client, "fresh")
	applySlices(t, e.east.Client, "fresh", endpointSlice("fresh", "fresh-east", 5, 5, true))
	if err := lastKnown(); err != nil {
		t.Fatalf("hub changed while the daemon was cut off from east: %v", err)
	}
	if err := eastProxy.Unblock(); err != nil {
		t.Fatal(err)
	}
	reconnected := time.Now()

	eventually(t, reconnectTimeout, func() error {
		if err := e.hubHas(t, "cart", map[string]int{"east": 6, "west": 2}, map[string]int{"east": 4, "west": 2}); err != nil {
			return err
		}
		if _, err := e.sliceSet(t, "cart", "east", memberAddresses(t, e.east.Client, "cart")); err != nil {
			return err
		}
		// solo's slice is still in east, but its Service is gone.
		if err := e.hubHas(t, "solo", map[string]int{"west": 1}, map[string]int{"west": 1}); err != nil {
			return err
		}
		return e.hubHas(t, "fresh", map[string]int{"east": 5}, map[string]int{"east": 5})
	})
	t.Logf("hub converged %s after east became reachable again", time.Since(reconnected).Round(time.Millisecond))
	d.waitSettled(t)
	if err := e.hubHas(t, "solo", map[string]int{"west": 1}, map[string]int{"west": 1}); err != nil {
		t.Error(err)
	}
	westDeletes.check(t)
	if westAfter := e.clusterObjects(t, "west"); !reflect.DeepEqual(westBefore, westAfter) {
		t.Errorf("west's hub objects changed:\nbefore %v\n after %v", westBefore, westAfter)
	}
}

// TestFaultMemberWatchExpiredByEtcdCompactionRelistsAndConverges makes the
// daemon's member watches expire: with the daemon cut off from east, east
// changes, its etcd is compacted past every revision the daemon has seen
// and its apiserver restarted (which drops the watch cache that could still
// replay them). Resuming a watch then gets 410 Gone, and only a relist can
// tell the daemon what was deleted.
func TestFaultMemberWatchExpiredByEtcdCompactionRelistsAndConverges(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	eastProxy := e.registerViaProxy(t, e.east)
	e.register(t, "west", "west", e.west.Kubeconfig)
	d := e.startDaemon(t, nil)

	exportService(t, e.east.Client, "cart")
	applySlices(t, e.east.Client, "cart", slicesOf("cart", "east", 1, 150, 0)...)
	exportService(t, e.east.Client, "solo")
	applySlices(t, e.east.Client, "solo", endpointSlice("solo", "solo-east", 3, 4, true))
	exportService(t, e.west.Client, "cart")
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-west", 2, 2, true))
	eventually(t, waitTimeout, func() error {
		if err := e.hubHas(t, "cart", map[string]int{"east": 150, "west": 2}, map[string]int{"east": 150, "west": 2}); err != nil {
			return err
		}
		return e.hubHas(t, "solo", map[string]int{"east": 4}, map[string]int{"east": 4})
	})
	d.waitSettled(t)
	westBefore := e.clusterObjects(t, "west")
	westDeletes := e.watchDeletes(t, "west")

	eastProxy.Block()
	seen, err := e.east.EtcdRevision(ctx) // ≥ every resourceVersion the daemon holds
	if err != nil {
		t.Fatal(err)
	}
	// 150 → 40 endpoints: cart-east-2 is deleted, cart-east-1 shrinks.
	applySlices(t, e.east.Client, "cart", slicesOf("cart", "east", 1, 40, 10)...)
	if err := e.east.Client.CoreV1().Services(appNamespace).Delete(ctx, "solo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	exportService(t, e.east.Client, "fresh")
	applySlices(t, e.east.Client, "fresh", endpointSlice("fresh", "fresh-east", 5, 5, true))
	now, err := e.east.EtcdRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.east.CompactEtcd(ctx, now); err != nil {
		t.Fatal(err)
	}
	if err := e.east.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := e.east.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	// What the daemon's informers meet when they resume: 410 Gone.
	if err := watchGone(ctx, e, seen); err != nil {
		t.Fatal(err)
	}
	t.Logf("east's etcd compacted at revision %d; the daemon's informers hold at most %d", now, seen)
	if err := eastProxy.Unblock(); err != nil {
		t.Fatal(err)
	}
	reconnected := time.Now()

	converged := func(cartEast, cartEastReady int) func() error {
		return func() error {
			if err := e.hubHas(t, "cart", map[string]int{"east": cartEast, "west": 2}, map[string]int{"east": cartEastReady, "west": 2}); err != nil {
				return err
			}
			if _, err := e.sliceSet(t, "cart", "east", memberAddresses(t, e.east.Client, "cart")); err != nil {
				return err
			}
			if err := e.hubHas(t, "solo", nil, nil); err != nil {
				return err
			}
			return e.hubHas(t, "fresh", map[string]int{"east": 5}, map[string]int{"east": 5})
		}
	}
	eventually(t, reconnectTimeout, converged(40, 30))
	t.Logf("hub converged %s after east became reachable again", time.Since(reconnected).Round(time.Millisecond))
	d.waitSettled(t)

	// The relisted informers watch again: a new change flows.
	applySlices(t, e.east.Client, "cart", slicesOf("cart", "east", 1, 120, 0)...)
	eventually(t, waitTimeout, converged(120, 120))
	westDeletes.check(t)
	if westAfter := e.clusterObjects(t, "west"); !reflect.DeepEqual(westBefore, westAfter) {
		t.Errorf("west's hub objects changed:\nbefore %v\n after %v", westBefore, westAfter)
	}
}

// watchGone checks that a watch of east's Services from resourceVersion rv
// is refused with 410 Gone (at once, or as its first event).
func watchGone(ctx context.Context, e *env, rv int64) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w, err := e.east.Client.CoreV1().Services(appNamespace).Watch(ctx, metav1.ListOptions{ResourceVersion: strconv.FormatInt(rv, 10)})
	if err != nil {
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return nil
		}
		return fmt.Errorf("watch from resourceVersion %d: %v, want 410 Gone", rv, err)
	}
	defer w.Stop()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			return fmt.Errorf("watch from resourceVersion %d closed without an event, want 410 Gone", rv)
		}
		if st, isStatus := ev.Object.(*metav1.Status); ev.Type == watch.Error && isStatus && st.Code == 410 {
			return nil
		}
		return fmt.Errorf("watch from resourceVersion %d: first event %s %T, want a 410 Gone error", rv, ev.Type, ev.Object)
	case <-ctx.Done():
		return fmt.Errorf("watch from resourceVersion %d: no event, want 410 Gone", rv)
	}
}

// TestFaultHubAPIServerRestartedWhileAMemberChangesConvergesWithoutDuplicates
// restarts the hub's apiserver while a member changes one service's
// endpoints 30 times in 6 seconds. Writes fail, hub watches break and
// expire (the new apiserver's watch cache starts afresh); the daemon must
// stay up, and the hub end with exactly one slice set per source cluster
// holding the member's final endpoints.
func TestFaultHubAPIServerRestartedWhileAMemberChangesConvergesWithoutDuplicates(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	// Leader election stays on, with a renew deadline longer than the
	// outage: a leader that cannot renew for RenewDeadline exits by design.
	const renewDeadline = 45 * time.Second
	d, hubProxy := e.startDaemonViaProxy(t, func(o *app.Options) {
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 60*time.Second, renewDeadline, 2*time.Second
	})
	exportService(t, e.east.Client, "cart")
	applySlices(t, e.east.Client, "cart", slicesOf("cart", "east", 1, 10, 0)...)
	exportService(t, e.west.Client, "cart")
	applySlices(t, e.west.Client, "cart", slicesOf("cart", "west", 2, 7, 0)...)
	waitFor(t, e, "cart", map[string]int{"east": 10, "west": 7}, map[string]int{"east": 10, "west": 7})
	d.waitSettled(t)

	const changes = 30
	size := func(i int) (n, notReady int) { return 1 + (i*53)%230, (i * 7) % 5 }
	errc := make(chan error, 1)
	var made atomic.Int64
	writesBefore := d.writes.n.Load()
	go func() {
		var err error
		for i := 0; i < changes && err == nil; i++ {
			n, notReady := size(i)
			err = setSlices(ctx, e.east.Client, "cart", slicesOf("cart", "east", 1, n, notReady)...)
			made.Add(1)
			time.Sleep(200 * time.Millisecond) // the pace of the member's changes
		}
		errc <- err
	}()

	// The outage starts while the daemon is writing the changes to the hub.
	eventually(t, waitTimeout, func() error {
		if m, w := made.Load(), d.writes.n.Load()-writesBefore; m < 5 || w == 0 {
			return fmt.Errorf("east made %d of %d changes, the daemon %d hub writes since", m, changes, w)
		}
		return nil
	})
	t.Logf("cutting the hub off after %d of %d changes and %d hub writes", made.Load(), changes, d.writes.n.Load()-writesBefore)
	t0 := time.Now()
	hubProxy.Block()
	if err := e.hub.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := e.hub.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := hubProxy.Unblock(); err != nil {
		t.Fatal(err)
	}
	outage := time.Since(t0)
	t.Logf("hub apiserver was down for %s", outage.Round(time.Millisecond))
	if err := <-errc; err != nil {
		t.Fatalf("changing east: %v", err)
	}
	if outage >= renewDeadline {
		t.Fatalf("the hub outage (%s) outlasted the leader election renew deadline; the test cannot tell a crash from a lost lease", outage)
	}

	n, notReady := size(changes - 1)
	converged := func() error {
		select {
		case err := <-d.done:
			d.done <- err // for stop, at cleanup
			t.Fatalf("daemon stopped: %v", err)
		default:
		}
		if err := e.hubHas(t, "cart", map[string]int{"east": n, "west": 7}, map[string]int{"east": n - notReady, "west": 7}); err != nil {
			return err
		}
		if _, err := e.sliceSet(t, "cart", "east", memberAddresses(t, e.east.Client, "cart")); err != nil {
			return err
		}
		if _, err := e.sliceSet(t, "cart", "west", memberAddresses(t, e.west.Client, "cart")); err != nil {
			return err
		}
		eps, err := e.hub.Client.CoreV1().Endpoints(appNamespace).Get(ctx, "cart-east", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := countAddresses(eps.Subsets); got != n {
			return fmt.Errorf("cart-east Endpoints has %d addresses, want %d", got, n)
		}
		return nil
	}
	eventually(t, reconnectTimeout, converged)
	d.waitSettled(t)
	if err := converged(); err != nil {
		t.Fatalf("after settling: %v", err)
	}
	if !d.Ready() {
		t.Error("daemon not ready after the hub came back")
	}
	// Hub and member watches all work again.
	applySlices(t, e.east.Client, "cart", slicesOf("cart", "east", 1, 3, 0)...)
	waitFor(t, e, "cart", map[string]int{"east": 3, "west": 7}, map[string]int{"east": 3, "west": 7})
}

// TestFaultCredentialRotationWithdrawsNothingAndABrokenKubeconfigKeepsTheConnection
// rotates a member's Secret to another identity: the new connection syncs
// before the old stops, so the hub never loses an object of that member and
// gets no write at all. A second rotation cannot sync at first (its server
// does not answer): the old connection keeps working until the new one can.
// Then the Secret is broken: the daemon says so and keeps the working
// connection.
func TestFaultCredentialRotationWithdrawsNothingAndABrokenKubeconfigKeepsTheConnection(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	d := e.startDaemon(t, nil)

	exportService(t, e.east.Client, "cart")
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-east-1", 1, 3, true))
	exportService(t, e.east.Client, "big")
	applySlices(t, e.east.Client, "big", slicesOf("big", "east", 3, 250, 50)...)
	exportService(t, e.west.Client, "cart")
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-west-1", 2, 2, true))
	complete := func(cartEast int) func() error {
		return func() error {
			if err := e.hubHas(t, "cart", map[string]int{"east": cartEast, "west": 2}, map[string]int{"east": cartEast, "west": 2}); err != nil {
				return err
			}
			return e.hubHas(t, "big", map[string]int{"east": 250}, map[string]int{"east": 200})
		}
	}
	eventually(t, waitTimeout, complete(3))
	d.waitSettled(t)
	eastBefore := e.clusterObjects(t, "east")
	writesBefore := d.writes.n.Load()
	syncsBefore := counterValue(t, d, "endpoint_aggregator_syncs_total")
	eastDeletes := e.watchDeletes(t, "east")

	rotated, err := e.east.UserKubeconfig("endpoint-aggregator-rotated", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	updateSecret(t, e, "east", rotated)
	// Poll the hub through the swap until the daemon reports it.
	checks := 0
	eventually(t, waitTimeout, func() error {
		checks++
		if err := complete(3)(); err != nil {
			t.Fatalf("hub incomplete during the rotation (check %d): %v", checks, err)
		}
		if ev := secretEvents(t, e, "east"); !strings.Contains(ev, clusters.ReasonRotated) {
			return fmt.Errorf("no %s Event on the Secret yet; events: %q", clusters.ReasonRotated, ev)
		}
		return nil
	})
	// After the swap the daemon syncs east's services (cart, big) again,
	// from the new connection.
	eventually(t, waitTimeout, func() error {
		if n := counterValue(t, d, "endpoint_aggregator_syncs_total") - syncsBefore; n < 2 {
			return fmt.Errorf("%v syncs since the rotation, want east's 2 services at least", n)
		}
		return nil
	})
	d.waitSettled(t)
	if err := complete(3)(); err != nil {
		t.Errorf("hub incomplete once the daemon settled after the rotation: %v", err)
	}
	t.Logf("hub complete in %d checks through the rotation", checks)
	eastDeletes.check(t)
	if n := d.writes.n.Load() - writesBefore; n != 0 {
		t.Errorf("the rotation caused %d hub writes, want 0 (nothing changed in the member)", n)
	}
	if eastAfter := e.clusterObjects(t, "east"); !reflect.DeepEqual(eastBefore, eastAfter) {
		t.Errorf("east's hub objects changed across the rotation:\nbefore %v\n after %v", eastBefore, eastAfter)
	}
	// The new connection carries changes.
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-east-1", 1, 4, true))
	eventually(t, waitTimeout, complete(4))

	// Make-before-break: a new kubeconfig whose server does not answer yet.
	eastProxy := testenv.StartProxyT(t, e.east)
	eastProxy.Block()
	third, err := e.east.UserKubeconfig("endpoint-aggregator-third", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	if third, err = testenv.KubeconfigWithServer(third, eastProxy.URL()); err != nil {
		t.Fatal(err)
	}
	rotations := eventCount(t, e, "east", clusters.ReasonRotated)
	updateSecret(t, e, "east", third)
	eventually(t, waitTimeout, func() error {
		if err := complete(4)(); err != nil {
			t.Fatalf("hub incomplete while a rotation is pending: %v", err)
		}
		if n := eventCount(t, e, "east", clusters.ReasonRotationRejected); n == 0 {
			return fmt.Errorf("no %s Event yet", clusters.ReasonRotationRejected)
		}
		return nil
	})
	// The old connection still carries changes.
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-east-1", 1, 5, true))
	eventually(t, waitTimeout, complete(5))
	if n := eventCount(t, e, "east", clusters.ReasonRotated); n != rotations {
		t.Fatalf("%s Events went from %d to %d with the new connection unable to sync", clusters.ReasonRotated, rotations, n)
	}
	if err := eastProxy.Unblock(); err != nil {
		t.Fatal(err)
	}
	eventually(t, reconnectTimeout, func() error {
		if err := complete(5)(); err != nil {
			t.Fatalf("hub incomplete during the delayed swap: %v", err)
		}
		if n := eventCount(t, e, "east", clusters.ReasonRotated); n == rotations {
			return fmt.Errorf("no new %s Event yet", clusters.ReasonRotated)
		}
		return nil
	})
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-east-1", 1, 6, true))
	eventually(t, waitTimeout, complete(6))
	d.waitSettled(t)
	writesBefore = d.writes.n.Load()

	updateSecret(t, e, "east", []byte("\x00\x01 this is not a kubeconfig {{{"))
	eventually(t, waitTimeout, func() error {
		ev := secretEvents(t, e, "east")
		for _, line := range strings.Split(ev, "\n") {
			if strings.HasPrefix(line, clusters.ReasonInvalidConfig+":") && strings.Contains(line, "keeping the previous connection") {
				return nil
			}
		}
		return fmt.Errorf("no %s Event keeping the previous connection; events: %q", clusters.ReasonInvalidConfig, ev)
	})
	d.waitSettled(t)
	if err := complete(6)(); err != nil {
		t.Errorf("hub incomplete once the daemon settled after the broken Secret: %v", err)
	}
	if n := d.writes.n.Load() - writesBefore; n != 0 {
		t.Errorf("the broken Secret caused %d hub writes, want 0", n)
	}
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-east-1", 1, 7, true))
	eventually(t, waitTimeout, complete(7))
	d.waitSettled(t)
	eastDeletes.check(t)
	if !d.Ready() {
		t.Error("daemon not ready with a broken Secret and a working previous connection")
	}
}

// importPorts checks the port names of svc's ServiceImport and derived
// Service.
func (e *env) importPorts(t *testing.T, svc string, want []string) error {
	t.Helper()
	imp, err := e.hubMCS.MulticlusterV1beta1().ServiceImports(appNamespace).Get(context.Background(), svc, metav1.GetOptions{})
	if err != nil {
		return err
	}
	derived, err := e.hub.Client.CoreV1().Services(appNamespace).Get(context.Background(), endpoints.DerivedServiceName(appNamespace, svc), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("derived Service for %s: %w", svc, err)
	}
	var impPorts, svcPorts []string
	for _, p := range imp.Spec.Ports {
		impPorts = append(impPorts, p.Name)
	}
	for _, p := range derived.Spec.Ports {
		svcPorts = append(svcPorts, p.Name)
	}
	sort.Strings(impPorts)
	sort.Strings(svcPorts)
	if !slices.Equal(impPorts, want) || !slices.Equal(svcPorts, want) {
		return fmt.Errorf("ports of ServiceImport %s %v and of its derived Service %v, want %v", svc, impPorts, svcPorts, want)
	}
	return nil
}

// eventCount counts the Events with reason about a registration Secret,
// including repeats the recorder folded into one Event.
func eventCount(t *testing.T, e *env, secret, reason string) int {
	t.Helper()
	list, err := e.hub.Client.CoreV1().Events(daemonNamespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Secret,involvedObject.name=" + secret + ",reason=" + reason,
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range list.Items {
		n += int(max(ev.Count, 1))
	}
	return n
}

// updateSecret replaces the kubeconfig of a registration Secret.
func updateSecret(t *testing.T, e *env, name string, kubeconfig []byte) {
	t.Helper()
	ctx := context.Background()
	s, err := e.hub.Client.CoreV1().Secrets(daemonNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data = map[string][]byte{clusters.KubeconfigKey: kubeconfig}
	if _, err := e.hub.Client.CoreV1().Secrets(daemonNamespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestFaultExportGoneFromAMemberThatSyncsLateLeavesTheImport restarts the
// daemon after a member stopped exporting a service that no hub object but
// the merged ServiceImport remembers (no per-cluster objects, no
// endpoints): the state a daemon killed between withdrawing a member's
// objects and updating the import leaves behind. That member is slow to
// sync at startup. Once it has synced, the import must no longer list it.
func TestFaultExportGoneFromAMemberThatSyncsLateLeavesTheImport(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	e.register(t, "east", "east", e.east.Kubeconfig)
	westProxy := e.registerViaProxy(t, e.west)
	opts := func(o *app.Options) {
		o.PerClusterServices = string(endpoints.PerClusterOff)
		o.MemberSyncTimeout = 30 * time.Second
	}
	d := e.startDaemon(t, opts)
	exportService(t, e.east.Client, "cart")
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-east-1", 1, 3, true))
	exportService(t, e.west.Client, "cart") // no endpoints yet
	eventually(t, waitTimeout, func() error { return e.hubHasImport(t, "cart", []string{"east", "west"}) })
	d.waitSettled(t)
	d.stop()

	if err := e.west.Client.CoreV1().Services(appNamespace).Delete(ctx, "cart", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The next daemon gets east at once and west only once it has done
	// all it can with east, well within west's sync timeout.
	westProxy.Block()
	d = e.startDaemon(t, opts)
	eventually(t, waitTimeout, func() error {
		if c := d.Registry.Get("east"); c == nil || !c.HasSynced() || !d.Controller.HasStarted() || d.Controller.Pending() > 0 {
			return errors.New("east not synced or keys still queued")
		}
		return nil
	})
	// The daemon has done all it can with east alone: west is late. Until
	// west syncs, the import keeps it, as the hub remembers it.
	if c := d.Registry.Get("west"); c == nil || c.HasSynced() {
		t.Fatal("west synced, or is not registered, while its proxy refuses connections")
	}
	if err := e.hubHasImport(t, "cart", []string{"east", "west"}); err != nil {
		t.Fatalf("before west synced: %v", err)
	}
	if err := westProxy.Unblock(); err != nil {
		t.Fatal(err)
	}
	eventually(t, reconnectTimeout, func() error {
		if c := d.Registry.Get("west"); c == nil || !c.HasSynced() {
			return errors.New("west not synced")
		}
		return nil
	})
	d.waitSettled(t)
	eventually(t, waitTimeout, func() error { return e.hubHasImport(t, "cart", []string{"east"}) })
}

// TestFaultDaemonKilledMidSyncRestartsWithoutOrphansOrDuplicates runs the
// daemon binary and kills it with SIGKILL twice while it writes: during the
// initial aggregation of 20 services × 250 endpoints in each of two members,
// and during a change that withdraws half of it and shrinks the rest. Each
// restarted daemon must converge on exactly the expected hub objects — no
// orphans, no duplicate slices, the members' endpoint counts — and a last
// restart against the converged hub must write nothing.
func TestFaultDaemonKilledMidSyncRestartsWithoutOrphansOrDuplicates(t *testing.T) {
	t.Parallel()
	bin := buildDaemon(t)
	e := startEnv(t)
	ctx := context.Background()
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	members := map[string]kubernetes.Interface{"east": e.east.Client, "west": e.west.Client}
	// A slow hub client stretches the writes over seconds, so the kills
	// land mid-sync.
	slow := []string{"--kube-api-qps", "20", "--kube-api-burst", "20"}

	const services, size = 20, 250
	name := func(i int) string { return fmt.Sprintf("s%02d", i) }
	want := fleet{}
	for i := 0; i < services; i++ {
		want[name(i)] = map[string]int{}
		for c, octet := range map[string]int{"east": 10 + i, "west": 40 + i} {
			exportService(t, members[c], name(i))
			applySlices(t, members[c], name(i), slicesOf(name(i), c, octet, size, 0)...)
			want[name(i)][c] = size
		}
	}
	const allSlices = 2 * services * 3 // 250 endpoints: 100 + 100 + 50

	first := e.startDaemonProcess(t, bin, slow...)
	n := e.killMidSync(t, first, 0, allSlices)
	t.Logf("killed the first daemon with %d of %d hub slices written", n, allSlices)

	second := e.startDaemonProcess(t, bin, slow...)
	t0 := time.Now()
	eventually(t, waitTimeout, func() error { return e.exactly(t, want, members) })
	t.Logf("the second daemon converged in %s", time.Since(t0).Round(time.Millisecond))

	// A change the second daemon is killed in the middle of: east unexports
	// s00-s09, west deletes s10-s19 and shrinks s00-s09 to 120 endpoints.
	for i := 0; i < services/2; i++ {
		svc, err := e.east.Client.CoreV1().Services(appNamespace).Get(ctx, name(i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		delete(svc.Annotations, easync.AnnotationExport)
		if _, err := e.east.Client.CoreV1().Services(appNamespace).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		delete(want[name(i)], "east")
		applySlices(t, e.west.Client, name(i), slicesOf(name(i), "west", 40+i, 120, 0)...)
		want[name(i)]["west"] = 120
	}
	for i := services / 2; i < services; i++ {
		if err := e.west.Client.CoreV1().Services(appNamespace).Delete(ctx, name(i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		delete(want[name(i)], "west")
	}
	const fewerSlices = services/2*3 + services/2*2 // east's 250 in 3 slices, west's 120 in 2
	n = e.killMidSync(t, second, allSlices, fewerSlices)
	t.Logf("killed the second daemon with %d hub slices left on the way from %d to %d", n, allSlices, fewerSlices)

	third := e.startDaemonProcess(t, bin)
	t0 = time.Now()
	eventually(t, waitTimeout, func() error { return e.exactly(t, want, members) })
	t.Logf("the third daemon converged in %s", time.Since(t0).Round(time.Millisecond))
	if w, found, err := third.metric("endpoint_aggregator_hub_writes_total"); err != nil || !found || w == 0 {
		t.Fatalf("third daemon's hub_writes_total = %v (found %v, err %v), want > 0", w, found, err)
	}
	third.terminate(t)

	// A restart against the converged hub writes nothing.
	before := e.ourObjects(t)
	fourth := e.startDaemonProcess(t, bin)
	var syncs float64
	quiet := 0
	eventually(t, waitTimeout, func() error {
		if err := fourth.ready(); err != nil {
			quiet = 0
			return err
		}
		s, _, err := fourth.metric("endpoint_aggregator_syncs_total")
		if err != nil {
			return err
		}
		if s != syncs || s < 2*services {
			syncs, quiet = s, 0
			return fmt.Errorf("%v syncs so far", s)
		}
		if quiet++; quiet < 30 {
			return fmt.Errorf("syncs unchanged for %d checks", quiet)
		}
		return nil
	})
	// Member liveness Leases are renewed by every run, like the leader
	// Lease: they are not hub objects of the aggregation.
	if w, _, err := fourth.metric("endpoint_aggregator_hub_writes_total", `resource="leases"`); err != nil || w != 0 {
		t.Errorf("a daemon restarted against a converged hub wrote %v times (err %v), want 0", w, err)
	}
	if after := e.ourObjects(t); !reflect.DeepEqual(before, after) {
		t.Errorf("hub objects changed across the restart:\nbefore %v\n after %v", before, after)
	}
	if err := e.exactly(t, want, members); err != nil {
		t.Error(err)
	}
	fourth.terminate(t)
}

// killMidSync kills a daemon with SIGKILL once the number of our hub slices
// has moved between a quarter and three quarters of the way from one count
// to another, and returns the count it was killed at.
func (e *env) killMidSync(t *testing.T, p *daemonProcess, from, to int) int {
	t.Helper()
	meta := metadata.NewForConfigOrDie(e.hub.Config)
	res := discoveryv1.SchemeGroupVersion.WithResource("endpointslices")
	lo, hi := from+(to-from)/4, from+3*(to-from)/4
	if lo > hi {
		lo, hi = hi, lo
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		if p.exited() {
			t.Fatalf("daemon exited before it could be killed: %v\n%s", p.err, p.logTail(40))
		}
		list, err := meta.Resource(res).Namespace(appNamespace).List(context.Background(), metav1.ListOptions{
			LabelSelector: discoveryv1.LabelManagedBy + "=" + endpoints.SliceManagedByValue,
		})
		if err != nil {
			t.Fatal(err)
		}
		n := len(list.Items)
		if n >= lo && n <= hi {
			p.kill()
			if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("daemon was not killed by SIGKILL: %v", p.err)
			}
			return n
		}
		if (to > from && n > hi) || (to < from && n < lo) {
			t.Fatalf("missed the window: %d hub slices, wanted to kill between %d and %d on the way from %d to %d", n, lo, hi, from, to)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d hub slices after %s, wanted between %d and %d", n, waitTimeout, lo, hi)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fleet is what the members export: service → cluster → endpoints.
type fleet map[string]map[string]int

// exactly checks that the hub holds exactly the objects of want: a
// per-cluster Service and Endpoints (with all addresses) per exporting
// cluster, a ServiceImport listing those clusters and its derived Service
// per service, one slice set per source with the member's endpoints, and
// nothing else of ours.
func (e *env) exactly(t *testing.T, want fleet, members map[string]kubernetes.Interface) error {
	t.Helper()
	ctx := context.Background()
	wantKeys := map[string]bool{}
	for svc, cs := range want {
		if len(cs) == 0 {
			continue
		}
		wantKeys["ServiceImport/"+appNamespace+"/"+svc] = true
		wantKeys["Service/"+appNamespace+"/"+endpoints.DerivedServiceName(appNamespace, svc)] = true
		for c := range cs {
			n, _ := endpoints.PerClusterName(svc, c)
			wantKeys["Service/"+appNamespace+"/"+n] = true
			wantKeys["Endpoints/"+appNamespace+"/"+n] = true
		}
	}
	var missing, extra []string
	objs := e.ourObjects(t)
	for k := range wantKeys {
		if _, ok := objs[k]; !ok {
			missing = append(missing, k)
		}
	}
	for k := range objs {
		if !strings.HasPrefix(k, "EndpointSlice/") && !wantKeys[k] {
			extra = append(extra, k)
		}
	}
	if len(missing)+len(extra) > 0 {
		sort.Strings(missing)
		sort.Strings(extra)
		return fmt.Errorf("hub objects: %d missing %v, %d not expected %v", len(missing), abbrev(missing), len(extra), abbrev(extra))
	}

	list, err := e.hub.Client.DiscoveryV1().EndpointSlices(appNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelManagedBy + "=" + endpoints.SliceManagedByValue,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		svc, c := s.Labels["multicluster.kubernetes.io/service-name"], s.Labels[labelMCSSourceCluster]
		if _, ok := want[svc][c]; !ok {
			return fmt.Errorf("orphaned hub slice %s (service %q, cluster %q)", s.Name, svc, c)
		}
	}
	for svc, cs := range want {
		for c, n := range cs {
			addrs := memberAddresses(t, members[c], svc)
			if len(addrs) != n {
				t.Fatalf("member %s has %d endpoints of %s, the test expects %d", c, len(addrs), svc, n)
			}
			if _, err := e.sliceSet(t, svc, c, addrs); err != nil {
				return err
			}
		}
	}

	eps, err := e.hub.Client.CoreV1().Endpoints(appNamespace).List(ctx, metav1.ListOptions{LabelSelector: endpoints.LabelManagedBy + "=" + endpoints.ManagedByValue})
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range eps.Items {
		svc, c := ep.Labels[endpoints.LabelServiceName], ep.Labels[endpoints.LabelSourceCluster]
		if got := countAddresses(ep.Subsets); got != want[svc][c] {
			return fmt.Errorf("hub Endpoints %s has %d addresses, want %d", ep.Name, got, want[svc][c])
		}
	}
	imps, err := e.hubMCS.MulticlusterV1beta1().ServiceImports(appNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range imps.Items {
		var got []string
		for _, c := range imp.Status.Clusters {
			got = append(got, c.Cluster)
		}
		sort.Strings(got)
		if w := slices.Sorted(maps.Keys(want[imp.Name])); !slices.Equal(got, w) {
			return fmt.Errorf("ServiceImport %s clusters %v, want %v", imp.Name, got, w)
		}
	}
	return nil
}
