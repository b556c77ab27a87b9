package sync

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/addresses"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// ExportMode selects which member Services are exported.
type ExportMode string

const (
	// ExportServiceExport exports Services that have a ServiceExport (MCS).
	ExportServiceExport ExportMode = "serviceexport"
	// ExportAnnotation exports Services annotated AnnotationExport: "true".
	ExportAnnotation ExportMode = "annotation"
	// ExportAll exports every Service in a selected namespace.
	ExportAll ExportMode = "all"
)

// AnnotationExport marks a member Service as exported in annotation mode.
const AnnotationExport = "endpoint-aggregator.io/export"

// DefaultExcludedNamespaces are never exported by default (the daemon adds
// its own namespace); --exclude-namespaces replaces the list.
var DefaultExcludedNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// isAPIServerService reports whether namespace/name is a cluster's own
// kubernetes Service, its API server: never exported, whatever the policy.
func isAPIServerService(namespace, name string) bool {
	return namespace == metav1.NamespaceDefault && name == "kubernetes"
}

// ParseExportMode validates a --export-mode value.
func ParseExportMode(s string) (ExportMode, error) {
	switch m := ExportMode(s); m {
	case ExportServiceExport, ExportAnnotation, ExportAll:
		return m, nil
	}
	return "", fmt.Errorf("unknown export mode %q (want serviceexport, annotation or all)", s)
}

// ExportPolicy decides which member Services are exported.
type ExportPolicy struct {
	Mode ExportMode
	// Include, when not empty, is the only namespaces exported.
	Include sets.Set[string]
	// Exclude is never exported.
	Exclude sets.Set[string]
	// Own is the daemon's namespace: not exported unless Include lists it.
	Own string
}

// NamespaceSelected reports whether services in ns may be exported.
func (p ExportPolicy) NamespaceSelected(ns string) bool {
	if p.Include.Len() > 0 && !p.Include.Has(ns) {
		return false
	}
	if ns == p.Own && !p.Include.Has(ns) {
		return false
	}
	return !p.Exclude.Has(ns)
}

// export returns the export of svc from member cluster, or false when svc is
// not exported. Objects this daemon wrote are never exported again, so a hub
// that is also a member cannot feed its own output back in; nor is a
// cluster's kubernetes Service. The export's time is the member's claim,
// but never earlier than registered, when the hub first registered the
// member: a member controls its own clock and timestamps, and the oldest
// export wins a conflict.
func (p ExportPolicy) export(cluster string, m Member, svc *corev1.Service, registered time.Time) (endpoints.Export, bool) {
	e, ok := p.claimed(cluster, m, svc)
	if ok && e.Created.Time.Before(registered) {
		e.Created = metav1.NewTime(registered)
	}
	return e, ok
}

// claimed is the export as the member states it.
func (p ExportPolicy) claimed(cluster string, m Member, svc *corev1.Service) (endpoints.Export, bool) {
	if svc == nil || !p.NamespaceSelected(svc.Namespace) || isAPIServerService(svc.Namespace, svc.Name) {
		return endpoints.Export{}, false
	}
	if svc.Labels[endpoints.LabelManagedBy] == endpoints.ManagedByValue || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return endpoints.Export{}, false
	}
	e := endpoints.Export{Cluster: cluster, Service: svc, Created: svc.CreationTimestamp}
	switch p.Mode {
	case ExportAll:
		return e, true
	case ExportAnnotation:
		return e, svc.Annotations[AnnotationExport] == "true"
	case ExportServiceExport:
		se := m.ServiceExport(svc.Namespace, svc.Name)
		if se == nil {
			return endpoints.Export{}, false
		}
		e.Created = se.CreationTimestamp
		e.ExportedLabels = se.Spec.ExportedLabels
		e.ExportedAnnotations = se.Spec.ExportedAnnotations
		return e, true
	}
	return endpoints.Export{}, false
}

// census reads a member's exports from its caches, for its bounds (see
// ledger): each export's time and endpoints, as its key's sync counts them
// (registered and policy as for that sync).
func (p ExportPolicy) census(cluster string, m Member, registered time.Time, policy *addresses.Policy) (map[Key]ledgerEntry, error) {
	svcs, err := m.ServiceLister().List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := make(map[Key]ledgerEntry, len(svcs))
	for _, svc := range svcs {
		if !p.NamespaceSelected(svc.Namespace) {
			continue
		}
		svc, _ = endpoints.SanitizeService(svc)
		e, ok := p.export(cluster, m, svc, registered)
		if !ok {
			continue
		}
		slices, err := m.EndpointSlices(svc.Namespace, svc.Name)
		if err != nil {
			return nil, err
		}
		clean, _ := endpoints.Sanitize(endpoints.Source{Cluster: cluster, Service: svc, Slices: slices}, policy)
		out[Key{Cluster: cluster, Namespace: svc.Namespace, Name: svc.Name}] = ledgerEntry{created: e.Created.Time, endpoints: countEndpoints(&clean)}
	}
	return out, nil
}

// countEndpoints counts the aggregated endpoints of a source; -1 for none.
func countEndpoints(src *endpoints.Source) int {
	if src == nil {
		return -1
	}
	n := 0
	for _, s := range src.Slices {
		n += len(s.Endpoints) // none in other than IPv4 and IPv6 slices
	}
	return n
}
