package endpoints

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// derivedLabelKeys are the labels we own on derived Services.
var derivedLabelKeys = []string{mcsv1beta1.LabelServiceName, LabelManagedBy}

// DerivedService returns the hub Service backing imp: the Service that
// kube-proxy and DNS serve for the cluster set, whose endpoints are the hub
// slices planned by PlanSlices. It is selectorless, of type ClusterIP, and
// headless for a Headless import or one without ports (the API takes no
// ClusterIP Service without one); its cluster IPs become imp's IPs. Its IP
// family policy is SingleStack for one family and RequireDualStack for two.
//
// The caller sets the owner reference to imp, which needs imp's UID.
func DerivedService(imp *mcsv1beta1.ServiceImport) *corev1.Service {
	spec := &imp.Spec
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      DerivedServiceName(imp.Namespace, imp.Name),
			Namespace: imp.Namespace,
			Labels: map[string]string{
				mcsv1beta1.LabelServiceName: imp.Name,
				LabelManagedBy:              ManagedByValue,
			},
		},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeClusterIP,
			SessionAffinity:       spec.SessionAffinity,
			SessionAffinityConfig: spec.SessionAffinityConfig.DeepCopy(),
			IPFamilies:            slices.Clone(spec.IPFamilies),
			IPFamilyPolicy:        ipFamilyPolicy(len(spec.IPFamilies)),
			InternalTrafficPolicy: clonePtr(spec.InternalTrafficPolicy),
			TrafficDistribution:   clonePtr(spec.TrafficDistribution),
		},
	}
	if spec.Type == mcsv1beta1.Headless || len(spec.Ports) == 0 {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	for _, p := range spec.Ports {
		svc.Spec.Ports = append(svc.Spec.Ports, servicePort(p.Name, p.Protocol, p.Port, p.AppProtocol))
	}
	return svc
}

func ipFamilyPolicy(families int) *corev1.IPFamilyPolicy {
	var p corev1.IPFamilyPolicy
	switch families {
	case 0:
		return nil
	case 1:
		p = corev1.IPFamilyPolicySingleStack
	default:
		p = corev1.IPFamilyPolicyRequireDualStack
	}
	return &p
}

// DerivedServiceUpToDate reports whether live, a derived Service, already
// has the labels and spec fields of desired that we own. IP families are
// compared only when desired sets them; server-set fields are ignored.
func DerivedServiceUpToDate(desired, live *corev1.Service) bool {
	d, l := &desired.Spec, &live.Spec
	return ownedEqual(desired.Labels, live.Labels, derivedLabelKeys) &&
		baseSpecUpToDate(desired, live) &&
		internalTrafficPolicy(d.InternalTrafficPolicy) == internalTrafficPolicy(l.InternalTrafficPolicy) &&
		(len(d.IPFamilies) == 0 || slices.Equal(d.IPFamilies, l.IPFamilies) && ptr.Equal(d.IPFamilyPolicy, l.IPFamilyPolicy)) &&
		ptr.Equal(d.TrafficDistribution, l.TrafficDistribution)
}

// MergeDerivedService returns a copy of live, a derived Service, with the
// fields of desired that we own applied, ready for an update. The cluster IP
// and primary IP family are immutable: check ServiceNeedsRecreate first.
func MergeDerivedService(desired, live *corev1.Service) *corev1.Service {
	out := live.DeepCopy()
	applyBaseSpec(desired, out)
	if len(desired.Spec.IPFamilies) > 0 {
		out.Spec.IPFamilies = slices.Clone(desired.Spec.IPFamilies)
		out.Spec.IPFamilyPolicy = clonePtr(desired.Spec.IPFamilyPolicy)
	}
	out.Spec.InternalTrafficPolicy = clonePtr(desired.Spec.InternalTrafficPolicy)
	out.Spec.TrafficDistribution = clonePtr(desired.Spec.TrafficDistribution)
	out.Labels = mergeOwned(desired.Labels, live.Labels, derivedLabelKeys)
	return out
}
