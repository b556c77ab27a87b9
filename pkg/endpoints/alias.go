package endpoints

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// An import's alias is a name for it that the cluster DNS resolves as it
// is, without the clusterset.local zone: an ExternalName Service
// "<service>-clusterset" whose name the DNS answers with a CNAME to the
// derived Service, so "<service>-clusterset.<ns>.svc.<cluster domain>"
// reaches the ClusterSet IP (or, for a Headless import, the backends). It
// is an alias, not a second copy of the endpoints: nothing else is
// written for it.

// AliasSuffix ends the name of an import's alias.
const AliasSuffix = "clusterset"

// AliasName returns the name of the alias of service, shortened with a hash
// as per-cluster names are when it is longer than a DNS label.
func AliasName(service string) string {
	name, _ := PerClusterName(service, AliasSuffix)
	return name
}

// aliasLabelKeys are the labels we own on an alias.
var aliasLabelKeys = derivedLabelKeys

// AliasService returns the alias of imp, whose derived Service the cluster
// DNS serves under clusterDomain. The caller sets the owner reference to
// imp, as for the derived Service.
func AliasService(imp *mcsv1beta1.ServiceImport, clusterDomain string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      AliasName(imp.Name),
			Namespace: imp.Namespace,
			Labels: map[string]string{
				mcsv1beta1.LabelServiceName: imp.Name,
				LabelManagedBy:              ManagedByValue,
			},
		},
		Spec: corev1.ServiceSpec{
			Type:         corev1.ServiceTypeExternalName,
			ExternalName: DerivedServiceName(imp.Namespace, imp.Name) + "." + imp.Namespace + ".svc." + clusterDomain,
		},
	}
}

// aliasUpToDate reports whether live, an alias, has desired's labels we
// own, type and external name.
func aliasUpToDate(desired, live *corev1.Service) bool {
	return ownedEqual(desired.Labels, live.Labels, aliasLabelKeys) &&
		live.Spec.Type == desired.Spec.Type && live.Spec.ExternalName == desired.Spec.ExternalName
}

// mergeAlias returns a copy of live with desired's fields we own applied.
func mergeAlias(desired, live *corev1.Service) *corev1.Service {
	out := live.DeepCopy()
	out.Labels = mergeOwned(desired.Labels, live.Labels, aliasLabelKeys)
	out.Spec.Type = desired.Spec.Type
	out.Spec.ExternalName = desired.Spec.ExternalName
	return out
}
