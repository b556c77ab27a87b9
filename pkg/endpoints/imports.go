package endpoints

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// Export is a member Service exported to the cluster set.
type Export struct {
	// Cluster is the exporting member cluster; unique among the exports of
	// a Service.
	Cluster string
	// Service is the member Service; read-only.
	Service *corev1.Service
	// Created is the export time: the ServiceExport's creation, or the
	// Service's where there is no ServiceExport.
	Created metav1.Time
	// ExportedLabels and ExportedAnnotations are copied onto the
	// ServiceImport. Either may be nil.
	ExportedLabels, ExportedAnnotations map[string]string
}

// ImportResult is the ServiceImport merged from a Service's exports, with
// the conflicts found, sorted by reason.
type ImportResult struct {
	Import    *mcsv1beta1.ServiceImport
	Conflicts []Conflict
}

// MergeImport merges the exports (at least one) of the Service
// namespace/name into its ServiceImport, as KEP-1645 specifies: properties
// are taken from the oldest export (by Created, then by cluster name), and
// every export that disagrees is reported in a Conflict. Ports are the union
// by name; labels and annotations are the oldest export's, as a whole. The
// result does not depend on the order of exports.
//
// The ServiceImport's IPs are left empty: they are the derived Service's
// cluster IPs, which only the API server knows.
func MergeImport(namespace, name string, exports []Export) ImportResult {
	sorted := slices.Clone(exports)
	slices.SortFunc(sorted, func(a, b Export) int {
		return cmp.Or(a.Created.Time.Compare(b.Created.Time), strings.Compare(a.Cluster, b.Cluster))
	})
	oldest := sorted[0]
	var log conflictLog

	ports := mergePorts(sorted, &log)
	labels := mergeExported(sorted, func(e Export) map[string]string { return e.ExportedLabels }, LabelsConflict, "label", &log)
	annotations := mergeExported(sorted, func(e Export) map[string]string { return e.ExportedAnnotations }, AnnotationsConflict, "annotation", &log)

	spec := &oldest.Service.Spec
	imp := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: mcsv1beta1.ServiceImportSpec{
			Ports:                 ports,
			Type:                  importType(oldest.Service),
			SessionAffinity:       spec.SessionAffinity,
			SessionAffinityConfig: spec.SessionAffinityConfig.DeepCopy(),
			IPFamilies:            slices.Clone(spec.IPFamilies),
			InternalTrafficPolicy: clonePtr(spec.InternalTrafficPolicy),
			TrafficDistribution:   clonePtr(spec.TrafficDistribution),
		},
	}
	// The daemon always writes the MCS slices of an import.
	imp.Status.EndpointSliceObjects = mcsv1beta1.EndpointSliceObjectsPresent
	for _, e := range sorted {
		imp.Status.Clusters = append(imp.Status.Clusters, mcsv1beta1.ClusterStatus{Cluster: e.Cluster})
		checkSpec(oldest, e, &log)
	}
	slices.SortFunc(imp.Status.Clusters, func(a, b mcsv1beta1.ClusterStatus) int { return strings.Compare(a.Cluster, b.Cluster) })
	setImportMeta(imp, labels, annotations)
	if v, ok := oldest.Service.Annotations[AnnotationPreferLocal]; ok {
		imp.Annotations[AnnotationPreferLocal] = v
	}
	return ImportResult{Import: imp, Conflicts: log.conflicts()}
}

// importType is the ServiceImport type of a member Service.
func importType(svc *corev1.Service) mcsv1beta1.ServiceImportType {
	if isHeadless(svc) {
		return mcsv1beta1.Headless
	}
	return mcsv1beta1.ClusterSetIP
}

// checkSpec logs the properties of e that differ from the oldest export's.
func checkSpec(oldest, e Export, log *conflictLog) {
	o, s := &oldest.Service.Spec, &e.Service.Spec
	check := func(differs bool, reason ConflictReason, what string) {
		if differs {
			log.add(reason, what, oldest.Cluster, e.Cluster)
		}
	}
	check(importType(oldest.Service) != importType(e.Service), TypeConflict, "type")
	check(affinity(o.SessionAffinity) != affinity(s.SessionAffinity), SessionAffinityConflict, "sessionAffinity")
	check(affinity(o.SessionAffinity) == affinity(s.SessionAffinity) &&
		!sameAffinity(o.SessionAffinity, o.SessionAffinityConfig, s.SessionAffinity, s.SessionAffinityConfig),
		SessionAffinityConfigConflict, "sessionAffinityConfig")
	check(internalTrafficPolicy(o.InternalTrafficPolicy) != internalTrafficPolicy(s.InternalTrafficPolicy),
		InternalTrafficPolicyConflict, "internalTrafficPolicy")
	check(ptr.Deref(o.TrafficDistribution, "") != ptr.Deref(s.TrafficDistribution, ""), TrafficDistributionConflict, "trafficDistribution")
	check(oldest.Service.Annotations[AnnotationPreferLocal] != e.Service.Annotations[AnnotationPreferLocal], PreferLocalConflict, AnnotationPreferLocal)
	// IP families matter only where both have cluster IPs; a headless
	// export differing from a ClusterSetIP one is already a TypeConflict.
	check(!isHeadless(oldest.Service) && !isHeadless(e.Service) && !slices.Equal(o.IPFamilies, s.IPFamilies),
		IPFamilyConflict, "ipFamilies")
}

// mergePorts returns the union of the exports' ports by name, sorted by
// name, as KEP-1645 asks. Exports whose port sets are not identical
// conflict: a port missing from some exports, a port differing from the one
// of an older export with the same name, or reusing the number and protocol
// of an older export's port under another name (the derived Service could
// not have both), which loses.
func mergePorts(sorted []Export, log *conflictLog) []mcsv1beta1.ServicePort {
	type numberProtocol struct {
		port     int32
		protocol corev1.Protocol
	}
	byName := make(map[string]mcsv1beta1.ServicePort)
	owner := make(map[string]string) // port name -> cluster
	first := ""                      // the cluster whose ports came first
	names := make(map[numberProtocol]string)
	for _, e := range sorted {
		for _, sp := range e.Service.Spec.Ports {
			p := mcsv1beta1.ServicePort{
				Name:        sp.Name,
				Protocol:    protocolOrTCP(sp.Protocol),
				AppProtocol: clonePtr(sp.AppProtocol),
				Port:        sp.Port,
			}
			np := numberProtocol{p.Port, p.Protocol}
			_, named := byName[p.Name]
			// A Service may have one unnamed port, or only named ones.
			_, unnamedTaken := byName[""]
			mixes := len(byName) > 0 && !named && (p.Name == "" || unnamedTaken)
			if mixes {
				log.add(PortConflict, fmt.Sprintf("unnamed port beside named ports (%d/%s)", p.Port, p.Protocol), first, e.Cluster)
				continue
			}
			if cur, ok := byName[p.Name]; ok {
				if !samePort(cur, p) {
					log.add(PortConflict, fmt.Sprintf("port %q", p.Name), owner[p.Name], e.Cluster)
				}
				continue
			}
			if other, ok := names[np]; ok {
				log.add(PortConflict, fmt.Sprintf("port %d/%s", p.Port, p.Protocol), owner[other], e.Cluster)
				continue
			}
			byName[p.Name], owner[p.Name], names[np] = p, e.Cluster, p.Name
			if first == "" {
				first = e.Cluster
			}
		}
	}
	out := make([]mcsv1beta1.ServicePort, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		p := byName[name]
		out = append(out, p)
		for _, e := range sorted {
			if !slices.ContainsFunc(e.Service.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Name == name }) {
				log.addMissing(PortConflict, fmt.Sprintf("port %q (%d/%s)", name, p.Port, p.Protocol), owner[name], e.Cluster)
			}
		}
	}
	return out
}

// mergeExported returns the oldest export's map, as a whole: KEP-1645 takes
// labels and annotations from one export. Every other export whose map
// differs in any pair, a key only one of them has included, conflicts.
func mergeExported(sorted []Export, get func(Export) map[string]string, reason ConflictReason, kind string, log *conflictLog) map[string]string {
	oldest := sorted[0]
	want := get(oldest)
	for _, e := range sorted[1:] {
		got := get(e)
		keys := slices.Collect(maps.Keys(want))
		keys = append(keys, slices.Collect(maps.Keys(got))...)
		slices.Sort(keys)
		for _, k := range slices.Compact(keys) {
			wv, wok := want[k]
			gv, gok := got[k]
			if wok != gok || wv != gv {
				log.add(reason, fmt.Sprintf("%s %q", kind, k), oldest.Cluster, e.Cluster)
			}
		}
	}
	return maps.Clone(want)
}
