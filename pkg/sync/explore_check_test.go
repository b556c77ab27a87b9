package sync

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// wantHub is what the hub should hold for the members' state, computed
// from package endpoints alone: the specification the controller is held to.
type wantHub struct {
	perCluster map[Key]*wantSource
	imports    map[Key]*wantImport
}

type wantSource struct {
	svc    *corev1.Service // nil when a foreign object holds its name
	eps    *corev1.Endpoints
	slices []*discoveryv1.EndpointSlice
	record string // the export record every slice carries
}

type wantImport struct {
	imp       *mcsv1beta1.ServiceImport
	conflicts []endpoints.Conflict
}

// simLocality is what the daemon's hints depend on besides the members:
// the hub's own member name ("" when it is none), the daemon's
// --prefer-local, and the zones of the hub's Nodes.
type simLocality struct {
	hubCluster  string
	preferLocal bool
	zones       []string
}

// locality returns the Locality the member sync of a source reads, given
// the service's import (nil for none of ours).
func (l simLocality) locality(imp *mcsv1beta1.ServiceImport) endpoints.Locality {
	var out endpoints.Locality
	if imp == nil {
		return out
	}
	out.TrafficDistribution = ptr.Deref(imp.Spec.TrafficDistribution, "")
	if l.hubCluster != "" && endpoints.LocalityOf(imp).PrefersLocal(l.preferLocal) {
		out.PreferLocal, out.HubCluster, out.HubZones = true, l.hubCluster, l.zones
	}
	return out
}

// expectedHub computes the hub for members' truth. nsExists says which hub
// namespaces exist; foreign holds "resource/namespace/name" of the objects
// of others, which the daemon must leave alone; loc is what the hints
// depend on.
func expectedHub(members map[string]*simMember, nsExists func(string) bool, foreign map[string]string, loc simLocality) wantHub {
	want := wantHub{perCluster: map[Key]*wantSource{}, imports: map[Key]*wantImport{}}
	exports := map[Key][]endpoints.Export{}
	sources := map[Key]endpoints.Source{}
	for _, cluster := range sortedMemberNames(members) {
		m := members[cluster]
		for _, key := range sortedKeys(m.truth[kindService]) {
			svc := m.truth[kindService][key].(*corev1.Service)
			se := m.truthExport(svc.Namespace, svc.Name)
			if se == nil || svc.Spec.Type == corev1.ServiceTypeExternalName || !nsExists(svc.Namespace) {
				continue
			}
			k := Key{Cluster: cluster, Namespace: svc.Namespace, Name: svc.Name}
			src, _ := endpoints.Sanitize(endpoints.Source{Cluster: cluster, Service: svc, Slices: projectAll(m.truthSlices(svc.Namespace, svc.Name))}, nil)
			e := endpoints.Export{Cluster: cluster, Service: svc, Created: se.CreationTimestamp,
				ExportedLabels: se.Spec.ExportedLabels, ExportedAnnotations: se.Spec.ExportedAnnotations}
			src.Record = endpoints.ExportRecord(e)
			ws := &wantSource{record: src.Record}
			name, _ := endpoints.PerClusterName(svc.Name, cluster)
			if _, taken := foreign[resourceService+"/"+svc.Namespace+"/"+name]; !taken {
				ws.svc = endpoints.PerClusterService(src, endpoints.PerClusterMirror)
				ws.eps = endpoints.PerClusterEndpoints(src)
			}
			want.perCluster[k] = ws
			sources[k] = src
			exports[k.ClusterSet()] = append(exports[k.ClusterSet()], e)
		}
	}
	claims := map[Key]endpoints.PortClaims{}
	locs := map[Key]endpoints.Locality{}
	for k, ex := range exports {
		if _, taken := foreign[resourceServiceImport+"/"+k.Namespace+"/"+k.Name]; taken {
			continue
		}
		res := endpoints.MergeImport(k.Namespace, k.Name, ex)
		want.imports[k] = &wantImport{imp: res.Import, conflicts: res.Conflicts}
		imp := res.Import.DeepCopy()
		imp.Status.Conditions = endpoints.ImportConditions(res.Conflicts, 0)
		claims[k] = endpoints.ImportPortClaims(imp)
		locs[k] = loc.locality(imp)
	}
	// The MCS slices leave out the ports an export lost to another, and are
	// hinted when the import asks and no source's hub slices hold a ready
	// endpoint without a zone.
	unzoned := map[Key]bool{}
	for k, src := range sources {
		plan := endpoints.PlanMember(k.Namespace, k.Name, k.Cluster, &src, endpoints.PerClusterOff, endpoints.MemberView{PortClaims: claims[k.ClusterSet()]})
		for _, s := range plan.Slices.Create {
			unzoned[k] = unzoned[k] || slices.ContainsFunc(s.Endpoints, readyWithoutZone)
		}
	}
	for k, src := range sources {
		l := locs[k.ClusterSet()]
		for p := range sources {
			if p.ClusterSet() == k.ClusterSet() && p.Cluster != k.Cluster && unzoned[p] && (l.PeersUnzoned == "" || p.Cluster < l.PeersUnzoned) {
				l.PeersUnzoned = p.Cluster
			}
		}
		plan := endpoints.PlanMember(k.Namespace, k.Name, k.Cluster, &src, endpoints.PerClusterOff, endpoints.MemberView{PortClaims: claims[k.ClusterSet()], Locality: l})
		want.perCluster[k].slices = plan.Slices.Create
	}
	return want
}

// readyWithoutZone reports whether a hub endpoint is ready, as kube-proxy
// reads it, and has no zone.
func readyWithoutZone(ep discoveryv1.Endpoint) bool {
	return ptr.Deref(ep.Conditions.Ready, true) && ptr.Deref(ep.Zone, "") == ""
}

// checkHubHints holds the hub's MCS slices to the hint rule, stated here
// apart from package endpoints. "This cluster first" (the hub a member,
// the import's prefer-local annotation "true", or none and the daemon's
// default true, and the hub's Nodes in 1 to 8 zones): every endpoint of the
// hub cluster is hinted for all those zones, every other one for
// endpoints.RemoteZone alone. Otherwise, where a service's import prefers
// the same zone or close and every ready endpoint of every cluster has a
// zone, each endpoint with a zone is hinted for it alone, and none is
// hinted else. Node hints are never written.
func checkHubHints(hubSlices []*discoveryv1.EndpointSlice, imports map[Key]*mcsv1beta1.ServiceImport, loc simLocality) error {
	zoned := map[Key]bool{}
	for _, s := range hubSlices {
		k, _ := hubKey(s)
		if _, seen := zoned[k.ClusterSet()]; !seen {
			zoned[k.ClusterSet()] = true
		}
		if slices.ContainsFunc(s.Endpoints, readyWithoutZone) {
			zoned[k.ClusterSet()] = false
		}
	}
	for _, s := range hubSlices {
		k, _ := hubKey(s)
		td := ""
		if imp := imports[k.ClusterSet()]; imp != nil {
			td = ptr.Deref(imp.Spec.TrafficDistribution, "")
		}
		hinted := zoned[k.ClusterSet()] && (td == corev1.ServiceTrafficDistributionPreferSameZone || td == corev1.ServiceTrafficDistributionPreferClose)
		local := false
		if imp := imports[k.ClusterSet()]; imp != nil && loc.hubCluster != "" && len(loc.zones) > 0 && len(loc.zones) <= 8 {
			v, set := imp.Annotations[endpoints.AnnotationPreferLocal]
			local = v == "true" || !set && loc.preferLocal
		}
		for _, ep := range s.Endpoints {
			var want []discoveryv1.ForZone
			switch zone := ptr.Deref(ep.Zone, ""); {
			case local && k.Cluster == loc.hubCluster:
				for _, z := range loc.zones {
					want = append(want, discoveryv1.ForZone{Name: z})
				}
			case local:
				want = []discoveryv1.ForZone{{Name: endpoints.RemoteZone}}
			case hinted && zone != "":
				want = []discoveryv1.ForZone{{Name: zone}}
			}
			var got []discoveryv1.ForZone
			if ep.Hints != nil {
				if len(ep.Hints.ForNodes) > 0 {
					return fmt.Errorf("slice %s/%s hints %v for nodes", s.Namespace, s.Name, ep.Addresses)
				}
				got = ep.Hints.ForZones
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("slice %s/%s hints %v for %v, want %v (import %q, every ready endpoint zoned %v, this cluster first %v, hub zones %v)",
					s.Namespace, s.Name, ep.Addresses, got, want, td, zoned[k.ClusterSet()], local, loc.zones)
			}
		}
	}
	return nil
}

func sortedMemberNames(members map[string]*simMember) []string {
	out := make([]string, 0, len(members))
	for n := range members {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// check compares the hub with what the members' final state asks for.
func (w *world) check() error {
	for ref, rv := range w.foreign {
		resource, rest, _ := strings.Cut(ref, "/")
		ns, name, _ := strings.Cut(rest, "/")
		o, ok := w.srv.get(resource, ns, name)
		if !ok {
			return fmt.Errorf("foreign %s was deleted", ref)
		}
		if m, _ := meta.Accessor(o); m.GetResourceVersion() != rv {
			return fmt.Errorf("foreign %s was changed", ref)
		}
	}
	nsExists := func(ns string) bool { _, ok := w.srv.get(resourceNamespace, "", ns); return ok }
	loc := simLocality{hubCluster: w.opts.HubCluster, preferLocal: w.opts.PreferLocal, zones: w.hubZones()}
	want := expectedHub(w.members.members, nsExists, w.foreign, loc)

	// Services: per-cluster and derived.
	imports := map[Key]*mcsv1beta1.ServiceImport{}
	for _, o := range w.srv.list(resourceServiceImport) {
		if imp := o.(*mcsv1beta1.ServiceImport); watched(resourceServiceImport, imp) {
			imports[Key{Namespace: imp.Namespace, Name: imp.Name}] = imp
		}
	}
	derived := map[Key]*corev1.Service{}
	gotSvc := map[Key]bool{}
	for _, o := range w.srv.list(resourceService) {
		svc := o.(*corev1.Service)
		if !watched(resourceService, svc) {
			continue
		}
		k, ok := hubKey(svc)
		if !ok {
			return fmt.Errorf("hub Service %s/%s is labelled ours but names no source", svc.Namespace, svc.Name)
		}
		if k.IsClusterSet() {
			wi := want.imports[k]
			if wi == nil || svc.Name != endpoints.DerivedServiceName(k.Namespace, k.Name) {
				return fmt.Errorf("hub has derived Service %s/%s for %s, which nothing exports", svc.Namespace, svc.Name, k)
			}
			if !endpoints.DerivedServiceUpToDate(endpoints.DerivedService(wi.imp), svc) {
				return fmt.Errorf("derived Service %s/%s differs from the import of %s: %+v", svc.Namespace, svc.Name, k, svc.Spec)
			}
			imp := imports[k]
			if imp == nil || len(svc.OwnerReferences) != 1 || svc.OwnerReferences[0].UID != imp.UID {
				return fmt.Errorf("derived Service %s/%s is not owned by its ServiceImport", svc.Namespace, svc.Name)
			}
			derived[k] = svc
			continue
		}
		ws := want.perCluster[k]
		name, _ := endpoints.PerClusterName(k.Name, k.Cluster)
		if ws == nil || ws.svc == nil || svc.Name != name {
			return fmt.Errorf("hub has per-cluster Service %s/%s for %s, which is not exported", svc.Namespace, svc.Name, k)
		}
		if !endpoints.ServiceUpToDate(ws.svc, svc) || endpoints.ServiceNeedsRecreate(ws.svc, svc) {
			return fmt.Errorf("per-cluster Service %s/%s differs from %s: %+v", svc.Namespace, svc.Name, k, svc.Spec)
		}
		gotSvc[k] = true
	}
	for k, ws := range want.perCluster {
		if ws.svc != nil && !gotSvc[k] {
			return fmt.Errorf("per-cluster Service of %s is missing", k)
		}
	}

	// Endpoints.
	gotEps := map[Key]bool{}
	for _, o := range w.srv.list(resourceEndpoints) {
		eps := o.(*corev1.Endpoints)
		if !watched(resourceEndpoints, eps) {
			continue
		}
		k, _ := hubKey(eps)
		ws := want.perCluster[k]
		if ws == nil || ws.eps == nil || eps.Name != ws.eps.Name {
			return fmt.Errorf("hub has Endpoints %s/%s for %s, which is not exported", eps.Namespace, eps.Name, k)
		}
		if !endpoints.EndpointsUpToDate(ws.eps, endpoints.DigestEndpoints(eps)) {
			return fmt.Errorf("Endpoints %s/%s differ from %s", eps.Namespace, eps.Name, k)
		}
		gotEps[k] = true
	}
	for k, ws := range want.perCluster {
		if ws.eps != nil && !gotEps[k] {
			return fmt.Errorf("Endpoints of %s are missing", k)
		}
	}

	// MCS slices, compared endpoint by endpoint: how they are packed is the
	// planner's business.
	got := map[Key][]string{}
	recorded := map[Key]bool{}
	var hubSlices []*discoveryv1.EndpointSlice
	for _, o := range w.srv.list(resourceEndpointSlice) {
		s := o.(*discoveryv1.EndpointSlice)
		if !watched(resourceEndpointSlice, s) {
			continue
		}
		hubSlices = append(hubSlices, s)
		k, ok := hubKey(s)
		if !ok || want.perCluster[k] == nil {
			return fmt.Errorf("hub has slice %s/%s for %v, which is not exported", s.Namespace, s.Name, k)
		}
		if len(s.Endpoints) > endpoints.MaxEndpointsPerSlice {
			return fmt.Errorf("slice %s/%s holds %d endpoints", s.Namespace, s.Name, len(s.Endpoints))
		}
		if r := s.Annotations[endpoints.AnnotationExportRecord]; r != want.perCluster[k].record {
			return fmt.Errorf("slice %s/%s records export %s, want %s", s.Namespace, s.Name, r, want.perCluster[k].record)
		}
		recorded[k] = true
		got[k] = append(got[k], sliceContent(s)...)
	}
	for k, ws := range want.perCluster {
		if !recorded[k] {
			return fmt.Errorf("no hub slice records the export of %s", k)
		}
		var exp []string
		for _, s := range ws.slices {
			exp = append(exp, sliceContent(s)...)
		}
		sort.Strings(exp)
		sort.Strings(got[k])
		if !slices.Equal(exp, got[k]) {
			return fmt.Errorf("slices of %s hold %v, want %v", k, got[k], exp)
		}
	}

	if err := checkHubHints(hubSlices, imports, loc); err != nil {
		return err
	}

	// ServiceImports.
	for k, imp := range imports {
		wi := want.imports[k]
		if wi == nil {
			return fmt.Errorf("hub has ServiceImport %s, which nothing exports", k)
		}
		exp := wi.imp.DeepCopy()
		exp.Spec.IPs = endpoints.ImportIPs(exp, derived[k])
		if derived[k] == nil {
			return fmt.Errorf("ServiceImport %s has no derived Service", k)
		}
		if !endpoints.ImportUpToDate(exp, imp) {
			return fmt.Errorf("ServiceImport %s is %+v %+v, want %+v %+v", k, imp.Spec, imp.Status.Clusters, exp.Spec, exp.Status.Clusters)
		}
		for _, c := range endpoints.ImportConditions(wi.conflicts, imp.Generation) {
			got := meta.FindStatusCondition(imp.Status.Conditions, c.Type)
			if got == nil || got.Status != c.Status || got.Reason != c.Reason {
				return fmt.Errorf("ServiceImport %s condition %s is %+v, want %s/%s", k, c.Type, got, c.Status, c.Reason)
			}
		}
	}
	for k := range want.imports {
		if imports[k] == nil {
			return fmt.Errorf("ServiceImport %s is missing", k)
		}
	}
	if !w.opts.WriteExportStatus {
		return nil
	}
	return checkExportStatus(w.members.members, want, nsExists, w.foreign)
}

// checkExportStatus compares each member ServiceExport's conditions with
// what its export and the expected import ask for. Where the hub cannot
// import (no namespace, a foreign ServiceImport), Ready is left alone.
func checkExportStatus(members map[string]*simMember, want wantHub, nsExists func(string) bool, foreign map[string]string) error {
	for _, cluster := range sortedMemberNames(members) {
		m := members[cluster]
		for _, key := range sortedKeys(m.truth[kindExport]) {
			se := m.truth[kindExport][key].(*mcsv1beta1.ServiceExport)
			k := Key{Namespace: se.Namespace, Name: se.Name}
			var imp *mcsv1beta1.ServiceImport
			if wi := want.imports[k]; wi != nil {
				imp = wi.imp.DeepCopy()
				imp.Status.Conditions = endpoints.ImportConditions(wi.conflicts, 1)
			}
			_, taken := foreign[resourceServiceImport+"/"+k.Namespace+"/"+k.Name]
			svc := m.truthService(se.Namespace, se.Name)
			blocked := (taken || !nsExists(k.Namespace)) && exportable(svc)
			for _, c := range endpoints.ExportConditions(svc, imp, cluster, se.Generation) {
				if blocked && c.Type == string(mcsv1beta1.ServiceExportConditionReady) {
					continue
				}
				got := meta.FindStatusCondition(se.Status.Conditions, c.Type)
				if got == nil || got.Status != c.Status || got.Reason != c.Reason || got.Message != c.Message || got.ObservedGeneration != c.ObservedGeneration {
					return fmt.Errorf("%s: ServiceExport %s condition %s is %+v, want %s/%s %q", cluster, key, c.Type, got, c.Status, c.Reason, c.Message)
				}
			}
		}
	}
	return nil
}

// sliceContent lists a slice's endpoints, each with its address type and
// ports.
func sliceContent(s *discoveryv1.EndpointSlice) []string {
	ports, _ := json.Marshal(s.Ports)
	out := make([]string, 0, len(s.Endpoints))
	for _, e := range s.Endpoints {
		ep, _ := json.Marshal(e)
		out = append(out, string(s.AddressType)+" "+string(ports)+" "+string(ep))
	}
	return out
}
