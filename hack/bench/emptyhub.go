package main

import (
	"context"
	"fmt"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// emptyHub deletes the aggregated objects from a hub, and the labelled
// member Leases in the daemon's namespace (the floor's are not labelled and
// stay), so that a cold convergence can be run again. What it deletes is
// what `endpoint-aggregator cleanup` would, with many deletes at a time.
func emptyHub(ctx context.Context, cfg *rest.Config) error {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 1000, 2000
	hub, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	hubMCS, err := mcsclientset.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ours := labels.Set{endpoints.LabelManagedBy: endpoints.ManagedByValue}.String()
	sliceSel := labels.Set{discoveryv1.LabelManagedBy: endpoints.SliceManagedByValue}.String()
	type del func(ctx context.Context, name string) error
	kinds := []struct {
		kind, ns, selector string
		list               func(opts metav1.ListOptions) (runtime.Object, error)
		del                del
	}{
		{"endpointslices", appNamespace, sliceSel, func(o metav1.ListOptions) (runtime.Object, error) {
			return hub.DiscoveryV1().EndpointSlices(appNamespace).List(ctx, o)
		}, func(ctx context.Context, name string) error {
			return hub.DiscoveryV1().EndpointSlices(appNamespace).Delete(ctx, name, metav1.DeleteOptions{})
		}},
		{"endpoints", appNamespace, ours, func(o metav1.ListOptions) (runtime.Object, error) {
			return hub.CoreV1().Endpoints(appNamespace).List(ctx, o)
		}, func(ctx context.Context, name string) error {
			return hub.CoreV1().Endpoints(appNamespace).Delete(ctx, name, metav1.DeleteOptions{})
		}},
		{"services", appNamespace, ours, func(o metav1.ListOptions) (runtime.Object, error) {
			return hub.CoreV1().Services(appNamespace).List(ctx, o)
		}, func(ctx context.Context, name string) error {
			return hub.CoreV1().Services(appNamespace).Delete(ctx, name, metav1.DeleteOptions{})
		}},
		{"serviceimports", appNamespace, ours, func(o metav1.ListOptions) (runtime.Object, error) {
			return hubMCS.MulticlusterV1beta1().ServiceImports(appNamespace).List(ctx, o)
		}, func(ctx context.Context, name string) error {
			return hubMCS.MulticlusterV1beta1().ServiceImports(appNamespace).Delete(ctx, name, metav1.DeleteOptions{})
		}},
		{"leases", daemonNamespace, ours, func(o metav1.ListOptions) (runtime.Object, error) {
			return hub.CoordinationV1().Leases(daemonNamespace).List(ctx, o)
		}, func(ctx context.Context, name string) error {
			return hub.CoordinationV1().Leases(daemonNamespace).Delete(ctx, name, metav1.DeleteOptions{})
		}},
	}
	t0 := time.Now()
	n := 0
	for _, k := range kinds {
		names := map[string]string{}
		if err := addRVs(names, k.kind, k.selector, k.list); err != nil {
			return fmt.Errorf("emptying the hub: list %s: %w", k.kind, err)
		}
		var todo []string
		for key := range names {
			todo = append(todo, key[len(k.kind)+1:])
		}
		if err := parallel(ctx, 16, len(todo), func(ctx context.Context, i int) error {
			if err := k.del(ctx, todo[i]); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("emptying the hub: delete %s %s: %w", k.kind, todo[i], err)
			}
			return nil
		}); err != nil {
			return err
		}
		n += len(todo)
	}
	logf("deleted %d hub objects in %s", n, time.Since(t0).Round(time.Millisecond))
	return nil
}
