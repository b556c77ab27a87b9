package sync

import (
	"maps"
	"slices"
	stdsync "sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// Where the hub is a member, "this cluster first" hints the hub cluster's
// endpoints for every zone of the hub's Nodes (endpoints.Locality). The
// daemon reads the Nodes' zone labels, and nothing else of them, and
// rewrites those hints when the set of zones changes.

// hubZones is what the daemon knows of the hub's Nodes, kept by their
// events: how many are in each zone, and how many in none.
type hubZones struct {
	mu      stdsync.Mutex
	count   map[string]int // Nodes per zone
	unzoned int
	zones   []string // the keys of count, sorted; replaced, never modified
}

// get returns the zones, sorted; the caller must not modify them.
func (z *hubZones) get() []string {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.zones
}

// unzonedNodes returns how many Nodes have no zone label.
func (z *hubZones) unzonedNodes() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.unzoned
}

// add counts d more Nodes (one, or minus one) in zone, "" for none, and
// reports whether the set of zones changed.
func (z *hubZones) add(zone string, d int) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	if zone == "" {
		z.unzoned += d
		return false
	}
	if z.count == nil {
		z.count = map[string]int{}
	}
	before := z.count[zone]
	z.count[zone] += d
	if z.count[zone] <= 0 {
		delete(z.count, zone)
	}
	if (before > 0) == (z.count[zone] > 0) {
		return false
	}
	z.zones = slices.Sorted(maps.Keys(z.count))
	return true
}

// watchNodes caches the hub's Nodes, reduced to their names and zone
// labels.
func (h *hubCaches) watchNodes(hub kubernetes.Interface) {
	f := informers.NewSharedInformerFactoryWithOptions(hub, 0, informers.WithTransform(func(obj interface{}) (interface{}, error) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return obj, nil
		}
		out := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion}}
		if zone, ok := n.Labels[corev1.LabelTopologyZone]; ok {
			out.Labels = map[string]string{corev1.LabelTopologyZone: zone}
		}
		return out, nil
	}))
	h.nodeInf = f.Core().V1().Nodes().Informer()
	h.nodesCounted = h.nodeInf.HasSynced
	h.starters = append(h.starters, f.Start)
}

// nodeHandler keeps c.zones by the events of the hub's Nodes and, when
// the set of zones changes after the first list, queues the member keys of
// every import that prefers the hub cluster's endpoints: their hints name
// those zones.
func (c *Controller) nodeHandler() cache.ResourceEventHandler {
	zone := func(obj interface{}) string {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if n, ok := obj.(*corev1.Node); ok {
			return n.Labels[corev1.LabelTopologyZone]
		}
		return ""
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj interface{}, initialList bool) {
			if c.zones.add(zone(obj), 1) && !initialList {
				c.zonesChanged()
			}
		},
		UpdateFunc: func(old, cur interface{}) {
			before, after := zone(old), zone(cur)
			if before == after {
				return
			}
			gone, came := c.zones.add(before, -1), c.zones.add(after, 1)
			if gone || came {
				c.zonesChanged()
			}
		},
		DeleteFunc: func(obj interface{}) {
			if c.zones.add(zone(obj), -1) {
				c.zonesChanged()
			}
		},
	}
}

// zonesChanged queues the member keys of every import that prefers the
// hub cluster's endpoints.
func (c *Controller) zonesChanged() {
	klog.InfoS("The hub's Nodes are in other zones now", "zones", c.zones.get(), "nodesWithoutZone", c.zones.unzonedNodes())
	imports, err := c.caches.imports.List(labels.Everything())
	if err != nil {
		return
	}
	for _, imp := range imports {
		if !endpoints.LocalityOf(imp).PrefersLocal(c.opts.PreferLocal) {
			continue
		}
		for _, s := range imp.Status.Clusters {
			c.queue.add(Key{Cluster: s.Cluster, Namespace: imp.Namespace, Name: imp.Name}, aSweep)
		}
	}
}
