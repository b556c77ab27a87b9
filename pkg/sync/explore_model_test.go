package sync

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// checkModel holds the hub to a small model of what shared/DESIGN.md asks,
// written from the design and the members' final state alone: it calls
// neither package endpoints nor the controller's rules, so a bug in them
// cannot cancel itself out (check compares with what package endpoints
// computes). The labels are the design's, spelled out:
//   - a cluster's service is exported when the member has its ServiceExport
//     and Service, the Service is not ExternalName, and the hub has the
//     namespace;
//   - the MCS slices sourced from a cluster (source-cluster and
//     service-name labels, managed by endpoint-aggregator.io) exist only for
//     exported services and carry exactly the member's endpoints, each with
//     the member's ready condition;
//   - those slices carry the member's port names, less the ports it lost:
//     a name whose port (number, protocol) differs from the one of the
//     hub's ServiceImport while that import reports a Conflict (KEP-1645's
//     port conflict; the data plane pairs ports by name);
//   - a ServiceImport exists exactly for the services some cluster exports
//     (unless someone else's holds the name); its status lists exactly the
//     exporting clusters and its ports are the union of their port names;
//   - each exported service has its per-cluster Service name-cluster with
//     the member Service's ports, unless someone else's holds the name.
func (w *world) checkModel() error {
	type svcKey struct{ cluster, ns, name string }
	exported := map[svcKey]*corev1.Service{}
	importers := map[string][]string{} // ns/name → clusters
	portNames := map[string]map[string]bool{}
	for _, cluster := range sortedMemberNames(w.members.members) {
		m := w.members.members[cluster]
		for _, key := range sortedKeys(m.truth[kindService]) {
			svc := m.truth[kindService][key].(*corev1.Service)
			if m.truthExport(svc.Namespace, svc.Name) == nil || svc.Spec.Type == corev1.ServiceTypeExternalName {
				continue
			}
			if _, ok := w.srv.get(resourceNamespace, "", svc.Namespace); !ok {
				continue
			}
			exported[svcKey{cluster, svc.Namespace, svc.Name}] = svc
			k := svc.Namespace + "/" + svc.Name
			importers[k] = append(importers[k], cluster)
			if portNames[k] == nil {
				portNames[k] = map[string]bool{}
			}
			for _, p := range svc.Spec.Ports {
				portNames[k][p.Name] = true
			}
		}
	}

	// MCS slices: only for exported services, with the member's endpoints.
	inHub := map[svcKey]map[string]bool{} // address → ready
	for _, o := range w.srv.list(resourceEndpointSlice) {
		s := o.(*discoveryv1.EndpointSlice)
		if s.Labels["endpointslice.kubernetes.io/managed-by"] != "endpoint-aggregator.io" {
			continue
		}
		cluster := s.Labels["multicluster.kubernetes.io/source-cluster"]
		if cluster == "" {
			continue // a mirrored slice of a per-cluster Endpoints
		}
		k := svcKey{cluster, s.Namespace, s.Labels["multicluster.kubernetes.io/service-name"]}
		if exported[k] == nil {
			return fmt.Errorf("model: hub slice %s/%s for %s/%s/%s, which that cluster does not export", s.Namespace, s.Name, k.cluster, k.ns, k.name)
		}
		if inHub[k] == nil {
			inHub[k] = map[string]bool{}
		}
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				inHub[k][a] = ep.Conditions.Ready == nil || *ep.Conditions.Ready
			}
		}
	}
	for k := range exported {
		want := map[string]bool{}
		seen := map[string]int{}
		for _, s := range w.members.members[k.cluster].truthSlices(k.ns, k.name) {
			for _, ep := range s.Endpoints {
				for _, a := range ep.Addresses {
					want[a] = ep.Conditions.Ready == nil || *ep.Conditions.Ready
					seen[a]++
				}
			}
		}
		got := inHub[k]
		// An address the member lists twice, with different conditions,
		// is one endpoint in the hub; the design does not say which
		// condition wins, so only its presence is held.
		for a, n := range seen {
			if _, ok := got[a]; n > 1 && ok {
				got[a] = want[a]
			}
		}
		if fmt.Sprint(sortedReady(got)) != fmt.Sprint(sortedReady(want)) {
			return fmt.Errorf("model: hub endpoints of %s/%s from %s are %v, the member's %v", k.ns, k.name, k.cluster, sortedReady(got), sortedReady(want))
		}
	}

	// MCS slice ports: the member's names, less the ones it lost.
	for _, o := range w.srv.list(resourceEndpointSlice) {
		s := o.(*discoveryv1.EndpointSlice)
		cluster := s.Labels["multicluster.kubernetes.io/source-cluster"]
		if s.Labels["endpointslice.kubernetes.io/managed-by"] != "endpoint-aggregator.io" || cluster == "" {
			continue
		}
		k := svcKey{cluster, s.Namespace, s.Labels["multicluster.kubernetes.io/service-name"]}
		lost := map[string]bool{}
		if o, ok := w.srv.get(resourceServiceImport, k.ns, k.name); ok {
			imp := o.(*mcsv1beta1.ServiceImport)
			if c := meta.FindStatusCondition(imp.Status.Conditions, "Conflict"); c != nil && c.Status == metav1.ConditionTrue {
				for _, ip := range imp.Spec.Ports {
					for _, mp := range exported[k].Spec.Ports {
						if mp.Name == ip.Name && (mp.Port != ip.Port || mp.Protocol != ip.Protocol) {
							lost[mp.Name] = true
						}
					}
				}
			}
		}
		want := map[string]bool{}
		for _, ms := range w.members.members[k.cluster].truthSlices(k.ns, k.name) {
			for _, p := range ms.Ports {
				if name := ptr.Deref(p.Name, ""); !lost[name] {
					want[name] = true
				}
			}
		}
		got := map[string]bool{}
		for _, p := range s.Ports {
			got[ptr.Deref(p.Name, "")] = true
		}
		if len(s.Endpoints) > 0 && !maps.Equal(got, want) {
			return fmt.Errorf("model: hub slice %s/%s from %s has ports %v, want %v (lost to the import: %v)", s.Namespace, s.Name, cluster, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(lost)))
		}
	}

	// ServiceImports: one per exported service, listing its clusters.
	for _, o := range w.srv.list(resourceServiceImport) {
		imp := o.(*mcsv1beta1.ServiceImport)
		k := imp.Namespace + "/" + imp.Name
		if imp.Labels["app.kubernetes.io/managed-by"] != "endpoint-aggregator" {
			continue
		}
		clusters, ok := importers[k]
		if !ok {
			return fmt.Errorf("model: ServiceImport %s, which no cluster exports", k)
		}
		var got []string
		for _, c := range imp.Status.Clusters {
			got = append(got, c.Cluster)
		}
		sort.Strings(got)
		if !slices.Equal(got, clusters) {
			return fmt.Errorf("model: ServiceImport %s lists clusters %v, want %v", k, got, clusters)
		}
		var names []string
		for _, p := range imp.Spec.Ports {
			names = append(names, p.Name)
		}
		sort.Strings(names)
		if want := slices.Sorted(maps.Keys(portNames[k])); !slices.Equal(names, want) {
			return fmt.Errorf("model: ServiceImport %s has ports %v, want the union %v", k, names, want)
		}
		delete(importers, k)
	}
	for k := range importers {
		if _, foreign := w.foreign[resourceServiceImport+"/"+k]; !foreign {
			return fmt.Errorf("model: no ServiceImport for %s, which %v export", k, importers[k])
		}
	}

	// Per-cluster Services, with the member's ports.
	for k, svc := range exported {
		name := k.name + "-" + k.cluster
		if _, foreign := w.foreign[resourceService+"/"+k.ns+"/"+name]; foreign {
			continue
		}
		o, ok := w.srv.get(resourceService, k.ns, name)
		if !ok {
			return fmt.Errorf("model: no per-cluster Service %s/%s", k.ns, name)
		}
		hub := o.(*corev1.Service)
		if portsOf(hub) != portsOf(svc) {
			return fmt.Errorf("model: per-cluster Service %s/%s has ports %s, the member's %s", k.ns, name, portsOf(hub), portsOf(svc))
		}
	}
	return nil
}

func sortedReady(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for a, ready := range m {
		out = append(out, fmt.Sprintf("%s=%v", a, ready))
	}
	sort.Strings(out)
	return out
}

func portsOf(svc *corev1.Service) string {
	var out []string
	for _, p := range svc.Spec.Ports {
		out = append(out, fmt.Sprintf("%s:%d/%s", p.Name, p.Port, p.Protocol))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}
