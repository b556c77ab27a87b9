package endpoints

import "maps"

const (
	// LabelManagedBy marks every hub object endpoint-aggregator writes.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of LabelManagedBy on our objects.
	ManagedByValue = "endpoint-aggregator"

	// SliceManagedByValue is the value of discoveryv1.LabelManagedBy on the hub
	// EndpointSlices we write. It is the only way our slices are recognised:
	// LabelManagedBy is copied onto slices mirrored from our Endpoints by the
	// hub's EndpointSlice mirroring controller, so it cannot be used.
	SliceManagedByValue = "endpoint-aggregator.io"

	// LabelServiceName names the member Service of a per-cluster Service or
	// Endpoints.
	LabelServiceName = "endpoint-aggregator.io/service-name"
	// LabelSourceCluster names the member cluster of a per-cluster Service or
	// Endpoints.
	LabelSourceCluster = "endpoint-aggregator.io/source-cluster"

	// AnnotationSource records "<cluster>/<namespace>/<name>" of the member
	// Service on per-cluster objects whose name had to be shortened.
	AnnotationSource = "endpoint-aggregator.io/source"

	// AnnotationContent on our hub EndpointSlices and per-cluster Endpoints
	// holds the digest of their content (see SliceDigest), so that the
	// daemon's hub caches need only their metadata.
	AnnotationContent = "endpoint-aggregator.io/content"

	// AnnotationDerivedService names the derived Service of a ServiceImport.
	AnnotationDerivedService = "multicluster.kubernetes.io/derived-service"

	// AnnotationExportedLabels and AnnotationExportedAnnotations list, comma
	// separated, the keys of the exported labels and annotations copied onto
	// a ServiceImport, so that keys no longer exported can be removed without
	// touching labels and annotations written by others.
	AnnotationExportedLabels      = "endpoint-aggregator.io/exported-labels"
	AnnotationExportedAnnotations = "endpoint-aggregator.io/exported-annotations"

	// AnnotationPreferLocal on a member Service asks, with "true", that
	// clients in the hub use the hub cluster's own endpoints while one is
	// ready ("this cluster first"; see Locality), and with "false" that
	// they do not, whatever the daemon's default. The merged ServiceImport
	// carries the oldest export's value under the same key.
	AnnotationPreferLocal = "endpoint-aggregator.io/prefer-local"

	// AnnotationOverCapacity is set to OverCapacityTruncated on per-cluster
	// Endpoints that hold only MaxEndpointsAddresses of the member's addresses,
	// as the upstream Endpoints controller does.
	AnnotationOverCapacity = "endpoints.kubernetes.io/over-capacity"
	OverCapacityTruncated  = "truncated"

	// MaxEndpointsPerSlice is the maximum number of endpoints in a hub
	// EndpointSlice, the default of kube-controller-manager.
	MaxEndpointsPerSlice = 100
	// MaxEndpointsAddresses is the maximum number of addresses in a per-cluster
	// Endpoints, the limit of the upstream Endpoints controller.
	MaxEndpointsAddresses = 1000
)

// ownedEqual reports whether live carries exactly desired's value, or like
// desired no value, for each of keys. Other keys are ignored.
func ownedEqual(desired, live map[string]string, keys []string) bool {
	for _, k := range keys {
		dv, dok := desired[k]
		lv, lok := live[k]
		if dok != lok || dv != lv {
			return false
		}
	}
	return true
}

// mergeOwned returns a copy of live in which each of keys has desired's value,
// or is removed when desired has none. Other keys are kept.
func mergeOwned(desired, live map[string]string, keys []string) map[string]string {
	out := maps.Clone(live)
	for _, k := range keys {
		if v, ok := desired[k]; ok {
			if out == nil {
				out = make(map[string]string, len(keys))
			}
			out[k] = v
		} else {
			delete(out, k)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
