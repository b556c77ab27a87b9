package endpoints

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// The hub records each member's export of a service on that member's MCS
// slices: every slice of the source carries the export record (an exported
// service without endpoints has one empty placeholder slice for it). The
// merged ServiceImport is computed from these records alone, not from member
// caches, so whoever syncs a member's keys also publishes what the merge
// needs of it, and a member that is unreachable or not yet synced still
// counts as the hub last recorded it.

// AnnotationExportRecord on a hub MCS slice holds the export record of its
// source: what the merge of the ServiceImport reads of that member's export.
const AnnotationExportRecord = "endpoint-aggregator.io/export-record"

// exportRecord is the JSON of AnnotationExportRecord: the properties of one
// export that KEP-1645 merges, as the member Service and ServiceExport set
// them.
type exportRecord struct {
	Created               metav1.Time                          `json:"created"`
	Type                  mcsv1beta1.ServiceImportType         `json:"type"`
	Ports                 []mcsv1beta1.ServicePort             `json:"ports,omitempty"`
	SessionAffinity       corev1.ServiceAffinity               `json:"sessionAffinity,omitempty"`
	SessionAffinityConfig *corev1.SessionAffinityConfig        `json:"sessionAffinityConfig,omitempty"`
	IPFamilies            []corev1.IPFamily                    `json:"ipFamilies,omitempty"`
	InternalTrafficPolicy *corev1.ServiceInternalTrafficPolicy `json:"internalTrafficPolicy,omitempty"`
	TrafficDistribution   *string                              `json:"trafficDistribution,omitempty"`
	PreferLocal           string                               `json:"preferLocal,omitempty"`
	ExportedLabels        map[string]string                    `json:"exportedLabels,omitempty"`
	ExportedAnnotations   map[string]string                    `json:"exportedAnnotations,omitempty"`
}

// ExportRecord returns the record of e for AnnotationExportRecord. Equal
// exports give equal records (map keys are sorted by encoding/json).
func ExportRecord(e Export) string {
	spec := &e.Service.Spec
	r := exportRecord{
		Created:               e.Created,
		Type:                  importType(e.Service),
		SessionAffinity:       spec.SessionAffinity,
		SessionAffinityConfig: spec.SessionAffinityConfig,
		IPFamilies:            spec.IPFamilies,
		InternalTrafficPolicy: spec.InternalTrafficPolicy,
		TrafficDistribution:   spec.TrafficDistribution,
		PreferLocal:           e.Service.Annotations[AnnotationPreferLocal],
		ExportedLabels:        e.ExportedLabels,
		ExportedAnnotations:   e.ExportedAnnotations,
	}
	for _, p := range spec.Ports {
		r.Ports = append(r.Ports, mcsv1beta1.ServicePort{Name: p.Name, Protocol: protocolOrTCP(p.Protocol), AppProtocol: p.AppProtocol, Port: p.Port})
	}
	// Not json.Marshal: it writes each <, > and & as six bytes, and a member
	// could blow a record up sixfold with them.
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		panic(fmt.Sprintf("encoding an export record: %v", err)) // plain data: cannot fail
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// ParseExportRecord returns the export of service namespace/name from
// cluster that record describes. The export's Service holds only what the
// merge reads.
func ParseExportRecord(cluster, namespace, name, record string) (Export, error) {
	var r exportRecord
	if err := json.Unmarshal([]byte(record), &r); err != nil {
		return Export{}, fmt.Errorf("export record of %s/%s from cluster %s: %w", namespace, name, cluster, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeClusterIP,
			SessionAffinity:       r.SessionAffinity,
			SessionAffinityConfig: r.SessionAffinityConfig,
			IPFamilies:            r.IPFamilies,
			InternalTrafficPolicy: r.InternalTrafficPolicy,
			TrafficDistribution:   r.TrafficDistribution,
		},
	}
	if r.PreferLocal != "" {
		svc.Annotations = map[string]string{AnnotationPreferLocal: r.PreferLocal}
	}
	switch r.Type {
	case mcsv1beta1.Headless:
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	case mcsv1beta1.ClusterSetIP:
	default:
		return Export{}, fmt.Errorf("export record of %s/%s from cluster %s: unknown type %q", namespace, name, cluster, r.Type)
	}
	for _, p := range r.Ports {
		svc.Spec.Ports = append(svc.Spec.Ports, servicePort(p.Name, p.Protocol, p.Port, p.AppProtocol))
	}
	return Export{Cluster: cluster, Service: svc, Created: r.Created,
		ExportedLabels: r.ExportedLabels, ExportedAnnotations: r.ExportedAnnotations}, nil
}

// placeholderAddressType is the address type of the empty slice of a
// source without endpoints: IPv6 for a Service whose primary family is.
func placeholderAddressType(svc *corev1.Service) discoveryv1.AddressType {
	if len(svc.Spec.IPFamilies) > 0 && svc.Spec.IPFamilies[0] == corev1.IPv6Protocol {
		return discoveryv1.AddressTypeIPv6
	}
	return discoveryv1.AddressTypeIPv4
}
