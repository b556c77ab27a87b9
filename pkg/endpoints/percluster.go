package endpoints

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PerClusterMode selects the per-cluster Service written for each member
// Service.
type PerClusterMode string

const (
	// PerClusterMirror mirrors the member Service: headless only if it is.
	PerClusterMirror PerClusterMode = "mirror"
	// PerClusterHeadless always writes a headless Service.
	PerClusterHeadless PerClusterMode = "headless"
	// PerClusterOff writes no per-cluster Service or Endpoints.
	PerClusterOff PerClusterMode = "off"
)

// ParsePerClusterMode parses a PerClusterMode.
func ParsePerClusterMode(s string) (PerClusterMode, error) {
	switch m := PerClusterMode(s); m {
	case PerClusterMirror, PerClusterHeadless, PerClusterOff:
		return m, nil
	}
	return "", fmt.Errorf("invalid per-cluster mode %q: must be %q, %q or %q", s, PerClusterMirror, PerClusterHeadless, PerClusterOff)
}

var (
	// perClusterLabelKeys are the labels we own on per-cluster objects.
	perClusterLabelKeys = []string{LabelManagedBy, LabelServiceName, LabelSourceCluster}
	// serviceAnnotationKeys are the annotations we own on per-cluster Services.
	serviceAnnotationKeys = []string{AnnotationSource}
)

// perClusterMeta returns the metadata shared by the per-cluster Service and
// Endpoints of src.
func perClusterMeta(src Source) metav1.ObjectMeta {
	svc := src.Service
	name, shortened := PerClusterName(svc.Name, src.Cluster)
	meta := metav1.ObjectMeta{
		Name:      name,
		Namespace: svc.Namespace,
		Labels: map[string]string{
			LabelManagedBy:     ManagedByValue,
			LabelServiceName:   svc.Name,
			LabelSourceCluster: src.Cluster,
		},
	}
	if shortened {
		meta.Annotations = map[string]string{AnnotationSource: src.Cluster + "/" + svc.Namespace + "/" + svc.Name}
	}
	return meta
}

// PerClusterService returns the hub Service addressing only the endpoints of
// src's member cluster, or nil when mode is PerClusterOff. Any other mode
// than PerClusterHeadless mirrors.
//
// The Service is selectorless: its endpoints come from PerClusterEndpoints.
// It is always of type ClusterIP, so no node port or load balancer is ever
// allocated in the hub for a member NodePort or LoadBalancer Service. It is
// headless when the member Service is, when mode is PerClusterHeadless, or
// when the member Service has no port (only a lying member sends that: the
// API takes no ClusterIP Service without one). IP families are left to the
// hub's defaults.
func PerClusterService(src Source, mode PerClusterMode) *corev1.Service {
	if mode == PerClusterOff {
		return nil
	}
	member := &src.Service.Spec
	svc := &corev1.Service{
		ObjectMeta: perClusterMeta(src),
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeClusterIP,
			SessionAffinity:       member.SessionAffinity,
			SessionAffinityConfig: member.SessionAffinityConfig.DeepCopy(),
		},
	}
	if mode == PerClusterHeadless || isHeadless(src.Service) || len(member.Ports) == 0 {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	for _, p := range member.Ports {
		svc.Spec.Ports = append(svc.Spec.Ports, servicePort(p.Name, p.Protocol, p.Port, p.AppProtocol))
	}
	return svc
}

// ServiceUpToDate reports whether live, a per-cluster Service, already has
// the labels, annotations and spec fields of desired that we own. Fields set
// by the API server (cluster IPs, IP families, traffic policies, ...) are
// ignored.
func ServiceUpToDate(desired, live *corev1.Service) bool {
	return ownedEqual(desired.Labels, live.Labels, perClusterLabelKeys) &&
		ownedEqual(desired.Annotations, live.Annotations, serviceAnnotationKeys) &&
		baseSpecUpToDate(desired, live)
}

// MergeService returns a copy of live, a per-cluster Service, with the
// fields of desired that we own applied, ready for an update. The cluster IP
// is immutable: check ServiceNeedsRecreate first.
func MergeService(desired, live *corev1.Service) *corev1.Service {
	out := live.DeepCopy()
	out.Labels = mergeOwned(desired.Labels, live.Labels, perClusterLabelKeys)
	out.Annotations = mergeOwned(desired.Annotations, live.Annotations, serviceAnnotationKeys)
	applyBaseSpec(desired, out)
	return out
}
