package endpoints

import (
	"maps"
	"slices"
	"strings"

	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// importAnnotationKeys are the annotations we always own on a ServiceImport.
var importAnnotationKeys = []string{AnnotationDerivedService, AnnotationExportedLabels, AnnotationExportedAnnotations, AnnotationPreferLocal}

// setImportMeta sets the labels and annotations of imp: the exported ones,
// ours on top, and the lists of exported keys that let a later update remove
// the keys no longer exported.
func setImportMeta(imp *mcsv1beta1.ServiceImport, labels, annotations map[string]string) {
	imp.Labels = maps.Clone(labels)
	if imp.Labels == nil {
		imp.Labels = make(map[string]string, 1)
	}
	imp.Labels[LabelManagedBy] = ManagedByValue

	imp.Annotations = maps.Clone(annotations)
	if imp.Annotations == nil {
		imp.Annotations = make(map[string]string, 1)
	}
	for _, k := range importAnnotationKeys {
		delete(imp.Annotations, k)
	}
	if keys := exportedKeys(labels, []string{LabelManagedBy}); keys != "" {
		imp.Annotations[AnnotationExportedLabels] = keys
	}
	if keys := exportedKeys(annotations, importAnnotationKeys); keys != "" {
		imp.Annotations[AnnotationExportedAnnotations] = keys
	}
	imp.Annotations[AnnotationDerivedService] = DerivedServiceName(imp.Namespace, imp.Name)
}

// exportedKeys returns the sorted keys of m but ours, comma separated (keys
// of labels and annotations cannot contain commas).
func exportedKeys(m map[string]string, ours []string) string {
	var keys []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(ours, k) {
			keys = append(keys, k)
		}
	}
	return strings.Join(keys, ",")
}

// ownedImportKeys returns the label and annotation keys we own on live given
// desired: ours, and the exported ones listed on either.
func ownedImportKeys(desired, live *mcsv1beta1.ServiceImport) (labels, annotations []string) {
	labels = []string{LabelManagedBy}
	annotations = slices.Clone(importAnnotationKeys)
	for _, obj := range []*mcsv1beta1.ServiceImport{desired, live} {
		if v := obj.Annotations[AnnotationExportedLabels]; v != "" {
			labels = append(labels, strings.Split(v, ",")...)
		}
		if v := obj.Annotations[AnnotationExportedAnnotations]; v != "" {
			annotations = append(annotations, strings.Split(v, ",")...)
		}
	}
	return labels, annotations
}

// ImportUpToDate reports whether live already has desired's labels and
// annotations we own (ours and the exported ones), spec, IPs included, and
// status clusters. Status conditions are not ours and are ignored.
func ImportUpToDate(desired, live *mcsv1beta1.ServiceImport) bool {
	labels, annotations := ownedImportKeys(desired, live)
	return ownedEqual(desired.Labels, live.Labels, labels) &&
		ownedEqual(desired.Annotations, live.Annotations, annotations) &&
		importSpecEqual(&desired.Spec, &live.Spec) &&
		ImportStatusUpToDate(desired, live)
}

// ImportStatusUpToDate reports whether live already has desired's status
// clusters, in any order, and endpointSliceObjects. ServiceImport status is a
// subresource: the caller uses it to decide on a status update.
func ImportStatusUpToDate(desired, live *mcsv1beta1.ServiceImport) bool {
	return slices.Equal(importClusters(desired), importClusters(live)) &&
		desired.Status.EndpointSliceObjects == live.Status.EndpointSliceObjects
}

func importClusters(imp *mcsv1beta1.ServiceImport) []string {
	out := make([]string, len(imp.Status.Clusters))
	for i, c := range imp.Status.Clusters {
		out[i] = c.Cluster
	}
	slices.Sort(out)
	return out
}

func importSpecEqual(a, b *mcsv1beta1.ServiceImportSpec) bool {
	return a.Type == b.Type &&
		slices.EqualFunc(a.Ports, b.Ports, func(x, y mcsv1beta1.ServicePort) bool {
			return x.Name == y.Name && x.Port == y.Port &&
				protocolOrTCP(x.Protocol) == protocolOrTCP(y.Protocol) &&
				ptr.Equal(x.AppProtocol, y.AppProtocol)
		}) &&
		slices.Equal(a.IPs, b.IPs) &&
		sameAffinity(a.SessionAffinity, a.SessionAffinityConfig, b.SessionAffinity, b.SessionAffinityConfig) &&
		slices.Equal(a.IPFamilies, b.IPFamilies) &&
		ptr.Equal(a.InternalTrafficPolicy, b.InternalTrafficPolicy) &&
		ptr.Equal(a.TrafficDistribution, b.TrafficDistribution)
}

// MergeServiceImport returns a copy of live with desired's labels and
// annotations we own, spec and status clusters applied, ready for an update
// and, if ImportStatusUpToDate is false, a status update. Status conditions
// are kept.
func MergeServiceImport(desired, live *mcsv1beta1.ServiceImport) *mcsv1beta1.ServiceImport {
	labels, annotations := ownedImportKeys(desired, live)
	out := live.DeepCopy()
	out.Labels = mergeOwned(desired.Labels, live.Labels, labels)
	out.Annotations = mergeOwned(desired.Annotations, live.Annotations, annotations)
	desired.Spec.DeepCopyInto(&out.Spec)
	out.Status.Clusters = slices.Clone(desired.Status.Clusters)
	out.Status.EndpointSliceObjects = desired.Status.EndpointSliceObjects
	return out
}
