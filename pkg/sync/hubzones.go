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
	"k8s.io/klog/v2"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// Where the hub is a member, "this cluster first" hints the hub cluster's
// endpoints for every zone of the hub's Nodes (endpoints.Locality). The
// daemon reads the Nodes' zone labels, and nothing else of them, and
// rewrites those hints when the set of zones changes.

// hubZones is what the daemon knows of the hub's Nodes: their zones and
// how many have none.
type hubZones struct {
	mu      stdsync.Mutex
	zones   []string // sorted, distinct
	unzoned int
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

// set records the zones of nodes and reports whether the set of zones
// changed.
func (z *hubZones) set(nodes []*corev1.Node) bool {
	seen, unzoned := map[string]bool{}, 0
	for _, n := range nodes {
		if zone := n.Labels[corev1.LabelTopologyZone]; zone != "" {
			seen[zone] = true
		} else {
			unzoned++
		}
	}
	zones := slices.Sorted(maps.Keys(seen))
	z.mu.Lock()
	defer z.mu.Unlock()
	changed := !slices.Equal(z.zones, zones)
	z.zones, z.unzoned = zones, unzoned
	return changed
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
	h.nodes = f.Core().V1().Nodes().Lister()
	h.starters = append(h.starters, f.Start)
}

// nodesChanged reads the zones of the hub's Nodes again and, when the set
// changed, queues the member keys of every import that prefers the hub
// cluster's endpoints: their hints name those zones.
func (c *Controller) nodesChanged(interface{}, bool, bool) {
	nodes, err := c.caches.nodes.List(labels.Everything())
	if err != nil || !c.zones.set(nodes) {
		return
	}
	zones := c.zones.get()
	klog.InfoS("The hub's Nodes are in other zones now", "zones", zones, "nodesWithoutZone", c.zones.unzonedNodes())
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
