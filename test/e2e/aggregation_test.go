package e2e

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// TestAggregationLifecycle follows one service through its life on a hub and
// two members. The steps share state and run in order.
func TestAggregationLifecycle(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	d := e.startDaemon(t, nil)
	outer := t

	exportService(t, e.east.Client, "cart")
	exportService(t, e.west.Client, "cart")
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-east-1", 1, 3, true))
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-west-1", 2, 2, true))

	t.Run("a service exported from both members is aggregated", func(t *testing.T) {
		eventually(t, waitTimeout, func() error {
			st := e.hubState(t, "cart")
			want := map[string]int{"east": 3, "west": 2}
			if !reflect.DeepEqual(st.total, want) {
				return fmt.Errorf("slice endpoints per cluster %v, want %v", st.total, want)
			}
			if !st.perClusterServices["east"] || !st.perClusterServices["west"] || !st.perClusterEndpoints["east"] || !st.perClusterEndpoints["west"] {
				return fmt.Errorf("per-cluster Services %v, Endpoints %v", st.perClusterServices, st.perClusterEndpoints)
			}
			sort.Strings(st.importClusters)
			if !reflect.DeepEqual(st.importClusters, []string{"east", "west"}) {
				return fmt.Errorf("ServiceImport clusters %v", st.importClusters)
			}
			if st.derived == nil || st.derived.Spec.ClusterIP == "" {
				return fmt.Errorf("derived Service missing or without ClusterIP")
			}
			return nil
		})
		imp, err := e.hubMCS.MulticlusterV1beta1().ServiceImports(appNamespace).Get(ctx, "cart", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		derived := e.hubState(t, "cart").derived
		if !reflect.DeepEqual(imp.Spec.IPs, derived.Spec.ClusterIPs) {
			t.Errorf("ServiceImport ips %v, derived Service ClusterIPs %v", imp.Spec.IPs, derived.Spec.ClusterIPs)
		}
		if len(derived.OwnerReferences) != 1 || derived.OwnerReferences[0].UID != imp.UID {
			t.Errorf("derived Service owner references %v, want the ServiceImport %s", derived.OwnerReferences, imp.UID)
		}
		eps, err := e.hub.Client.CoreV1().Endpoints(appNamespace).Get(ctx, "cart-east", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(eps.Subsets) != 1 || len(eps.Subsets[0].Addresses) != 3 || eps.Subsets[0].Ports[0].Name != "http" || eps.Subsets[0].Ports[0].Port != 8080 {
			t.Errorf("cart-east Endpoints subsets = %+v", eps.Subsets)
		}
		eventually(t, waitTimeout, func() error {
			got := map[string]float64{
				"synced members": gaugeValue(t, d, "endpoint_aggregator_member_clusters", "state", "synced"),
				"east endpoints": gaugeValue(t, d, "endpoint_aggregator_cluster_endpoints", "cluster", "east"),
				"west endpoints": gaugeValue(t, d, "endpoint_aggregator_cluster_endpoints", "cluster", "west"),
				"east services":  gaugeValue(t, d, "endpoint_aggregator_cluster_services", "cluster", "east"),
			}
			want := map[string]float64{"synced members": 2, "east endpoints": 3, "west endpoints": 2, "east services": 1}
			if !reflect.DeepEqual(got, want) {
				return fmt.Errorf("metrics %v, want %v", got, want)
			}
			return nil
		})
	})

	t.Run("scaling 3 to 250 to 0 and flipping readiness is followed", func(t *testing.T) {
		big := []*endpointSliceSpec{{"cart-east-1", 100}, {"cart-east-2", 100}, {"cart-east-3", 50}}
		applySlices(t, e.east.Client, "cart", build("cart", 1, big, true)...)
		waitFor(t, e, "cart", map[string]int{"east": 250, "west": 2}, map[string]int{"east": 250, "west": 2})
		eps, err := e.hub.Client.CoreV1().Endpoints(appNamespace).Get(ctx, "cart-east", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n := countAddresses(eps.Subsets); n != 250 {
			t.Errorf("cart-east Endpoints has %d addresses, want 250", n)
		}

		applySlices(t, e.east.Client, "cart", build("cart", 1, big, false)...)
		waitFor(t, e, "cart", map[string]int{"east": 250, "west": 2}, map[string]int{"west": 2})

		applySlices(t, e.east.Client, "cart")
		waitFor(t, e, "cart", map[string]int{"west": 2}, map[string]int{"west": 2})
		// The per-cluster pair stays, empty: the service is still exported.
		eventually(t, waitTimeout, func() error {
			eps, err := e.hub.Client.CoreV1().Endpoints(appNamespace).Get(ctx, "cart-east", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if n := countAddresses(eps.Subsets); n != 0 {
				return fmt.Errorf("cart-east Endpoints has %d addresses", n)
			}
			return nil
		})
		applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-east-1", 1, 3, true))
		waitFor(t, e, "cart", map[string]int{"east": 3, "west": 2}, map[string]int{"east": 3, "west": 2})
	})

	t.Run("deleting the service in one member withdraws only its objects", func(t *testing.T) {
		exportService(t, e.east.Client, "solo")
		applySlices(t, e.east.Client, "solo", endpointSlice("solo", "solo-1", 3, 4, true))
		waitFor(t, e, "solo", map[string]int{"east": 4}, map[string]int{"east": 4})

		if err := e.west.Client.CoreV1().Services(appNamespace).Delete(ctx, "cart", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, waitTimeout, func() error {
			st := e.hubState(t, "cart")
			if st.total["west"] != 0 || st.perClusterServices["west"] || st.perClusterEndpoints["west"] {
				return fmt.Errorf("west objects remain: %+v", st)
			}
			if st.total["east"] != 3 || !st.perClusterServices["east"] || !reflect.DeepEqual(st.importClusters, []string{"east"}) {
				return fmt.Errorf("east objects changed: %+v", st)
			}
			return nil
		})
		if st := e.hubState(t, "solo"); st.total["east"] != 4 {
			t.Errorf("solo changed: %+v", st)
		}
	})

	t.Run("restarting the daemon against a converged hub writes nothing", func(t *testing.T) {
		d.waitSettled(t)
		before := e.ourObjects(t)
		d.stop()

		d2 := e.startDaemonFor(t, outer, nil)
		d2.waitSettled(t)
		if n := d2.writes.n.Load(); n != 0 {
			t.Errorf("restarted daemon sent %d writes to a converged hub, want 0", n)
		}
		if after := e.ourObjects(t); !reflect.DeepEqual(before, after) {
			t.Errorf("hub objects changed across the restart:\nbefore %v\n after %v", before, after)
		}
		// Both daemons built their caches of our slices and Endpoints from
		// metadata alone: the first from the echoes of its writes, the
		// second from the digests the first wrote.
		for name, dd := range map[string]*daemon{"first": d, "restarted": d2} {
			if reads := labelledCounters(t, dd, "endpoint_aggregator_hub_full_reads_total", "resource"); reads != "endpoints=0 endpointslices=0" {
				t.Errorf("the %s daemon read hub objects in full: %s, want none", name, reads)
			}
		}
		d = d2
	})

	t.Run("an edit of our slice by another manager is read in full and undone", func(t *testing.T) {
		list, err := e.hub.Client.DiscoveryV1().EndpointSlices(appNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: discoveryv1.LabelManagedBy + "=" + endpoints.SliceManagedByValue + ",multicluster.kubernetes.io/service-name=cart,multicluster.kubernetes.io/source-cluster=east"})
		if err != nil || len(list.Items) != 1 {
			t.Fatalf("east's cart slices: %v, err %v", len(list.Items), err)
		}
		slice := list.Items[0]
		want := slice.DeepCopy().Endpoints
		// The edit leaves our content annotation as it was: only the
		// managedFields tell the daemon that the content is not ours.
		slice.Endpoints = slice.Endpoints[1:]
		if _, err := e.hub.Client.DiscoveryV1().EndpointSlices(appNamespace).Update(ctx, &slice, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
			t.Fatal(err)
		}
		eventually(t, waitTimeout, func() error {
			got, err := e.hub.Client.DiscoveryV1().EndpointSlices(appNamespace).Get(ctx, slice.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !reflect.DeepEqual(got.Endpoints, want) {
				return fmt.Errorf("%s has %d endpoints, want %d", got.Name, len(got.Endpoints), len(want))
			}
			// Rewritten with its managedFields reset: no record of the
			// other manager is left to make it read in full again.
			for _, m := range got.ManagedFields {
				if m.Manager == "kubectl-edit" {
					return fmt.Errorf("%s still records kubectl-edit as a manager", got.Name)
				}
			}
			return nil
		})
		if n := labelledCounter(t, d, "endpoint_aggregator_hub_full_reads_total", "resource", "endpointslices"); n < 1 {
			t.Errorf("hub_full_reads_total{resource=endpointslices} = %v, want the edited slice read in full", n)
		}
	})

	t.Run("deleting a member Secret withdraws all its objects", func(t *testing.T) {
		exportService(t, e.west.Client, "wishlist")
		applySlices(t, e.west.Client, "wishlist", endpointSlice("wishlist", "wishlist-1", 4, 5, true))
		waitFor(t, e, "wishlist", map[string]int{"west": 5}, map[string]int{"west": 5})

		if err := e.hub.Client.CoreV1().Secrets(daemonNamespace).Delete(ctx, "east", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, waitTimeout, func() error {
			for name, obj := range e.ourObjects(t) {
				if obj.cluster == "east" {
					return fmt.Errorf("%s of east remains", name)
				}
			}
			// cart was only left in east, solo only ever in east.
			for _, svc := range []string{"cart", "solo"} {
				if _, err := e.hubMCS.MulticlusterV1beta1().ServiceImports(appNamespace).Get(ctx, svc, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return fmt.Errorf("ServiceImport %s still there (err %v)", svc, err)
				}
			}
			return nil
		})
		// west is untouched.
		if st := e.hubState(t, "wishlist"); st.total["west"] != 5 || !st.perClusterServices["west"] || !reflect.DeepEqual(st.importClusters, []string{"west"}) {
			t.Errorf("wishlist of west changed: %+v", st)
		}
	})

	t.Run("a member unregistered while the daemon was down is withdrawn at startup", func(t *testing.T) {
		d.waitSettled(t)
		d.stop()
		if err := e.hub.Client.CoreV1().Secrets(daemonNamespace).Delete(ctx, "west", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if st := e.hubState(t, "wishlist"); st.total["west"] != 5 {
			t.Fatalf("wishlist changed with no daemon running: %+v", st)
		}
		d = e.startDaemonFor(t, outer, nil)
		eventually(t, waitTimeout, func() error {
			if objs := e.ourObjects(t); len(objs) != 0 {
				return fmt.Errorf("%d hub objects remain, e.g. %v", len(objs), objs)
			}
			return nil
		})
	})
}

type endpointSliceSpec struct {
	name string
	n    int
}

// build makes consecutive slices of svc whose addresses do not overlap.
func build(svc string, octet int, specs []*endpointSliceSpec, ready bool) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	offset := 0
	for _, s := range specs {
		out = append(out, endpointSliceAt(svc, s.name, octet, offset, s.n, ready))
		offset += s.n
	}
	return out
}

// waitFor waits until the hub's MCS slices of svc hold total endpoints and
// ready ready endpoints per source cluster.
func waitFor(t *testing.T, e *env, svc string, total, ready map[string]int) {
	t.Helper()
	eventually(t, waitTimeout, func() error {
		st := e.hubState(t, svc)
		if !reflect.DeepEqual(st.total, total) || !reflect.DeepEqual(st.ready, ready) {
			return fmt.Errorf("hub slices of %s: total %v ready %v; want total %v ready %v", svc, st.total, st.ready, total, ready)
		}
		return nil
	})
}

func countAddresses(subsets []corev1.EndpointSubset) int {
	n := 0
	for _, s := range subsets {
		n += len(s.Addresses) + len(s.NotReadyAddresses)
	}
	return n
}
