package endpoints

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// ServiceChange is the write one hub Service needs; the zero value is none.
// Create and Delete together are a recreate: a field that changes is
// immutable, so the old object goes first.
type ServiceChange struct {
	Create, Update, Delete *corev1.Service
}

// EndpointsChange is the write one hub Endpoints needs; the zero value is
// none.
type EndpointsChange struct {
	Create, Update, Delete *corev1.Endpoints
}

func (c ServiceChange) empty() bool   { return c.Create == nil && c.Update == nil && c.Delete == nil }
func (c EndpointsChange) empty() bool { return c.Create == nil && c.Update == nil && c.Delete == nil }

// MemberView is what the hub holds of the objects one member service owns.
type MemberView struct {
	// Service and Endpoints are the per-cluster pair, ours for the source,
	// or nil.
	Service   *corev1.Service
	Endpoints *EndpointsDigest
	// ServiceTaken says someone else's object holds the per-cluster
	// Service's name: we write no Service, and no Endpoints under it.
	ServiceTaken bool
	// Slices are the hub slices that may be ours for the source.
	Slices []*SliceDigest
	// PortClaims are what the service's merged import says of its ports
	// (ImportPortClaims): the MCS slices leave out the ports the member
	// lost to another export.
	PortClaims PortClaims
	// Locality is what the rest of the ClusterSet says of the MCS slices'
	// hints (see HintsFor).
	Locality Locality
}

// MemberPlan lists the hub writes one member service needs.
type MemberPlan struct {
	Slices    SlicePlan
	Service   ServiceChange
	Endpoints EndpointsChange
}

// Empty reports whether the plan has no writes.
func (p MemberPlan) Empty() bool {
	return p.Slices.Empty() && p.Service.empty() && p.Endpoints.empty()
}

// PlanMember returns the writes that bring view to what src asks for: its
// MCS slices, without the ports view.PortClaims gives to another export and
// hinted as view.Locality allows, and, unless mode is off, its per-cluster Service and Endpoints, with all
// its ports. src nil means the member service is not exported (gone,
// unexported, or its member unregistered): everything is withdrawn.
func PlanMember(namespace, service, cluster string, src *Source, mode PerClusterMode, view MemberView) MemberPlan {
	var plan MemberPlan
	if src != nil {
		mcs := *src
		if lost := view.PortClaims.Lost(src.Service); lost != nil {
			mcs = withoutPorts(mcs, lost)
		}
		plan.Slices = PlanSlices(mcs, view.Locality, view.Slices)
	} else {
		plan.Slices = PlanSlicesDelete(namespace, service, cluster, view.Slices)
	}
	var wantSvc *corev1.Service
	if src != nil && mode != PerClusterOff && !view.ServiceTaken {
		wantSvc = PerClusterService(*src, mode)
	}
	if wantSvc == nil {
		if view.Endpoints != nil {
			plan.Endpoints.Delete = view.Endpoints.Meta()
		}
		if view.Service != nil {
			plan.Service.Delete = view.Service
		}
		return plan
	}
	plan.Service = planService(wantSvc, view.Service, ServiceUpToDate, MergeService)
	// The Endpoints are made only to be written.
	if view.Endpoints == nil {
		plan.Endpoints.Create = PerClusterEndpoints(*src)
	} else {
		plan.Endpoints.Update = perClusterEndpointsUpdate(*src, view.Endpoints)
	}
	return plan
}

// ImportView is what the hub holds of the objects one clusterset service
// owns.
type ImportView struct {
	// Import and Derived are ours for the service, or nil.
	Import  *mcsv1beta1.ServiceImport
	Derived *corev1.Service
	// ImportTaken says someone else's ServiceImport holds the name.
	ImportTaken bool
	// Alias is the import's alias (AliasService), ours, or nil;
	// AliasTaken says another object holds its name.
	Alias      *corev1.Service
	AliasTaken bool
}

// ImportOptions are the daemon's choices for the objects of an import.
type ImportOptions struct {
	// AliasDomain is the hub's cluster domain, in which each import gets
	// an alias (AliasService); "" for no alias.
	AliasDomain string
}

// ImportPlan is one round of writes for a clusterset service. Two of the
// desired values are known only once the API server has written an object:
// the ServiceImport's UID (the derived Service's owner) and the derived
// Service's cluster IPs (the import's spec.ips). So a plan covers what its
// view allows, and the caller plans again on the view its writes left,
// until the plan is empty: create the import; create the derived Service;
// update the import's spec; update its status.
type ImportPlan struct {
	CreateImport *mcsv1beta1.ServiceImport
	// UpdateImport updates spec and metadata; UpdateImportStatus status.
	UpdateImport, UpdateImportStatus *mcsv1beta1.ServiceImport
	Derived                          ServiceChange
	// Alias is the write the import's alias needs.
	Alias ServiceChange
	// DeleteImport goes after Derived's and Alias's deletes.
	DeleteImport *mcsv1beta1.ServiceImport
}

// Empty reports whether the plan has no writes.
func (p ImportPlan) Empty() bool {
	return p.CreateImport == nil && p.UpdateImport == nil && p.UpdateImportStatus == nil && p.Derived.empty() && p.Alias.empty() && p.DeleteImport == nil
}

// PlanImport returns the next round of writes that bring view to want, the
// merge of the service's exports, with opts; want nil means nothing exports
// it any more, and every object is withdrawn.
func PlanImport(want *ImportResult, view ImportView, opts ImportOptions) ImportPlan {
	var plan ImportPlan
	if want == nil || view.ImportTaken {
		plan.Derived.Delete = view.Derived
		plan.Alias.Delete = view.Alias
		if !view.ImportTaken {
			plan.DeleteImport = view.Import
		}
		return plan
	}
	if view.Import == nil {
		fresh := want.Import.DeepCopy()
		fresh.Status = mcsv1beta1.ServiceImportStatus{} // a subresource: dropped on create
		plan.CreateImport = fresh
		return plan
	}

	// The derived Service and the alias belong to the ServiceImport.
	owner := ImportOwner(view.Import)
	plan.Derived = planOwnedService(DerivedService(want.Import), view.Derived, owner, DerivedServiceUpToDate, MergeDerivedService)
	if plan.Derived.Create != nil {
		return plan // the import's IPs come from the new Service
	}
	switch {
	case opts.AliasDomain != "" && !view.AliasTaken:
		plan.Alias = planOwnedService(AliasService(want.Import, opts.AliasDomain), view.Alias, owner, aliasUpToDate, mergeAlias)
	case opts.AliasDomain == "":
		plan.Alias.Delete = view.Alias
	}

	imp := want.Import.DeepCopy()
	imp.Spec.IPs = ImportIPs(imp, view.Derived)
	// Spec and metadata first (an update ignores status), then status,
	// from the resourceVersion the spec update leaves.
	specOnly := imp.DeepCopy()
	specOnly.Status.Clusters = view.Import.Status.Clusters
	specOnly.Status.EndpointSliceObjects = view.Import.Status.EndpointSliceObjects
	if !ImportUpToDate(specOnly, view.Import) {
		plan.UpdateImport = MergeServiceImport(specOnly, view.Import)
		return plan
	}
	conds, changed := SetConditions(view.Import.Status.Conditions, ImportConditions(want.Conflicts, view.Import.Generation))
	if changed || !ImportStatusUpToDate(imp, view.Import) {
		upd := MergeServiceImport(imp, view.Import)
		upd.Status.Conditions = conds
		plan.UpdateImportStatus = upd
	}
	return plan
}

// planOwnedService plans a Service of an import, want, against live:
// owned by the import (owner), so that the garbage collector removes it
// with the import too, and compared and merged by upToDate and merge.
func planOwnedService(want, live *corev1.Service, owner metav1.OwnerReference,
	upToDate func(want, live *corev1.Service) bool, merge func(want, live *corev1.Service) *corev1.Service,
) ServiceChange {
	want.OwnerReferences = []metav1.OwnerReference{owner}
	return planService(want, live, func(want, live *corev1.Service) bool {
		return upToDate(want, live) && apiequality.Semantic.DeepEqual(want.OwnerReferences, live.OwnerReferences)
	}, func(want, live *corev1.Service) *corev1.Service {
		out := merge(want, live)
		out.OwnerReferences = want.OwnerReferences
		return out
	})
}

// ImportOwner is the owner reference of a derived Service to its import.
func ImportOwner(imp *mcsv1beta1.ServiceImport) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: mcsv1beta1.GroupVersion.String(),
		Kind:       mcsv1beta1.ServiceImportKindName,
		Name:       imp.Name,
		UID:        imp.UID,
	}
}

// ImportIPs lists the derived Service's cluster IPs, one per family in the
// import's ipFamilies order; Headless imports, and those whose derived
// Service is headless (no ports), have none.
func ImportIPs(imp *mcsv1beta1.ServiceImport, svc *corev1.Service) []string {
	if imp.Spec.Type == mcsv1beta1.Headless || svc == nil || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return nil
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone {
		ips = []string{svc.Spec.ClusterIP}
	}
	out := slices.Clone(ips)
	// ClusterIPs follow the Service's ipFamilies; keep the import's order.
	if len(imp.Spec.IPFamilies) == len(svc.Spec.IPFamilies) && len(out) == len(svc.Spec.IPFamilies) {
		rank := map[corev1.IPFamily]int{}
		for i, f := range imp.Spec.IPFamilies {
			rank[f] = i
		}
		fam := map[string]corev1.IPFamily{}
		for i, ip := range out {
			fam[ip] = svc.Spec.IPFamilies[i]
		}
		slices.SortStableFunc(out, func(a, b string) int { return rank[fam[a]] - rank[fam[b]] })
	}
	return out
}
