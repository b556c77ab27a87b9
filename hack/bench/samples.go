package main

import (
	"context"
	"fmt"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// memoryStats are the daemon's memory figures (medians of samples).
type memoryStats struct {
	HeapInuseBytes float64 `json:"heapInuseBytes"`
	HeapAllocBytes float64 `json:"heapAllocBytes"`
	// HeapLiveBytes is the heap the last collection found live; -1 when
	// the daemon does not export it.
	HeapLiveBytes float64 `json:"heapLiveBytes"`
	RSSBytes      float64 `json:"rssBytes"`
	Goroutines    float64 `json:"goroutines"`
}

func sampleMemory(ctx context.Context, d *daemonProc, n int, every time.Duration) (memoryStats, error) {
	var inuse, alloc, live, rss, gr []float64
	for i := range n {
		if i > 0 {
			select {
			case <-ctx.Done():
				return memoryStats{}, ctx.Err()
			case <-time.After(every):
			}
		}
		m, err := d.scrape(ctx)
		if err != nil {
			return memoryStats{}, err
		}
		inuse = append(inuse, m.value("go_memstats_heap_inuse_bytes"))
		alloc = append(alloc, m.value("go_memstats_heap_alloc_bytes"))
		live = append(live, m.value("go_gc_heap_live_bytes"))
		rss = append(rss, m.value("process_resident_memory_bytes"))
		gr = append(gr, m.value("go_goroutines"))
	}
	return memoryStats{HeapInuseBytes: median(inuse), HeapAllocBytes: median(alloc), HeapLiveBytes: median(live), RSSBytes: median(rss), Goroutines: median(gr)}, nil
}

// snapshotRVs lists the aggregated hub objects and returns their
// resourceVersions by kind and name.
func snapshotRVs(ctx context.Context, hub kubernetes.Interface, hubMCS mcsclientset.Interface) (map[string]string, error) {
	out := map[string]string{}
	ours := labels.Set{endpoints.LabelManagedBy: endpoints.ManagedByValue}.String()
	sliceSel := labels.Set{discoveryv1.LabelManagedBy: endpoints.SliceManagedByValue}.String()
	kinds := []struct {
		kind, selector string
		list           func(opts metav1.ListOptions) (runtime.Object, error)
	}{
		{"endpointslices", sliceSel, func(o metav1.ListOptions) (runtime.Object, error) {
			return hub.DiscoveryV1().EndpointSlices(appNamespace).List(ctx, o)
		}},
		{"endpoints", ours, func(o metav1.ListOptions) (runtime.Object, error) {
			return hub.CoreV1().Endpoints(appNamespace).List(ctx, o)
		}},
		{"services", ours, func(o metav1.ListOptions) (runtime.Object, error) {
			return hub.CoreV1().Services(appNamespace).List(ctx, o)
		}},
		{"serviceimports", ours, func(o metav1.ListOptions) (runtime.Object, error) {
			return hubMCS.MulticlusterV1beta1().ServiceImports(appNamespace).List(ctx, o)
		}},
	}
	for _, k := range kinds {
		if err := addRVs(out, k.kind, k.selector, k.list); err != nil {
			return nil, fmt.Errorf("hub: list %s: %w", k.kind, err)
		}
	}
	return out, nil
}

// addRVs lists the objects that match selector page by page and records
// their resourceVersions in out under kind/name.
func addRVs(out map[string]string, kind, selector string, list func(metav1.ListOptions) (runtime.Object, error)) error {
	opts := metav1.ListOptions{LabelSelector: selector, Limit: 500}
	for {
		l, err := list(opts)
		if err != nil {
			return err
		}
		if err := meta.EachListItem(l, func(obj runtime.Object) error {
			o, err := meta.Accessor(obj)
			if err != nil {
				return err
			}
			out[kind+"/"+o.GetName()] = o.GetResourceVersion()
			return nil
		}); err != nil {
			return err
		}
		li, err := meta.ListAccessor(l)
		if err != nil {
			return err
		}
		if li.GetContinue() == "" {
			return nil
		}
		opts.Continue = li.GetContinue()
	}
}

// diffRVs counts the objects created, changed or deleted between snapshots.
func diffRVs(before, after map[string]string) int {
	n := 0
	for k, rv := range after {
		if before[k] != rv {
			n++
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			n++
		}
	}
	return n
}
