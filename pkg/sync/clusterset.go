package sync

import (
	"context"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// ReasonExportConflict is the Event reason on a ServiceImport whose exports disagree.
const ReasonExportConflict = "ExportConflict"

// syncClusterSet writes the objects merged across members for one service:
// the ServiceImport and its derived Service. Nothing is written while a
// registered member is still within its first sync: merging without it would
// drop its ports and cluster entry for a moment on every restart; the key
// waits for the member to settle. A member past its sync timeout no longer
// holds the merge back; until it syncs, its export as the hub last recorded
// it stands in for it, and the key waits for its sync to merge it for real.
func (c *Controller) syncClusterSet(ctx context.Context, key Key) error {
	if !c.members.SecretsSynced() {
		c.waitFor(key, waitRegistrations(), c.members.SecretsSynced)
		return nil
	}
	var exports []endpoints.Export
	var statuses []exportStatus
	var pending []string
	for _, name := range c.members.Names() {
		m := c.members.Member(name)
		if m == nil {
			continue
		}
		if !m.HasSynced() {
			if !m.SyncTimedOut() {
				c.waitFor(key, waitMemberSettled(name), func() bool { return c.memberSettled(name) })
				return nil
			}
			pending = append(pending, name)
			continue
		}
		svc, err := m.ServiceLister().Services(key.Namespace).Get(key.Name)
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if apierrors.IsNotFound(err) {
			svc = nil
		}
		if c.writesExportStatus() {
			if se := m.ServiceExport(key.Namespace, key.Name); se != nil {
				statuses = append(statuses, exportStatus{cluster: name, member: m, export: se, service: svc})
			}
		}
		if e, ok := c.opts.Export.export(name, m, svc); ok {
			exports = append(exports, e)
		}
	}

	liveImp, err := c.liveImport(key.Namespace, key.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	derivedName := endpoints.DerivedServiceName(key.Namespace, key.Name)
	liveSvc, err := c.liveService(key.Namespace, derivedName)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if liveSvc != nil && !ownedBy(liveSvc, key) {
		return c.conflict(resourceService, liveSvc, key)
	}

	for _, name := range pending {
		c.waitFor(key, waitMemberSynced(name), func() bool { return c.memberSynced(name) })
	}
	impOps, svcOps := c.importOps(), c.serviceOps()
	if len(exports) == 0 {
		if len(pending) > 0 {
			return nil // keep what the hub has until they sync
		}
		if liveSvc != nil {
			if err := remove(ctx, c, svcOps, liveSvc); err != nil {
				return err
			}
		}
		if liveImp != nil {
			if err := remove(ctx, c, impOps, liveImp); err != nil {
				return err
			}
		}
		return c.writeExportStatuses(ctx, statuses, nil)
	}
	if ok, err := c.ensureNamespace(ctx, key); !ok {
		return err
	}
	for _, name := range pending {
		if e, ok := endpoints.LastKnownExport(name, liveImp, c.lastKnownPerCluster(key, name)); ok {
			exports = append(exports, e)
		}
	}

	res := endpoints.MergeImport(key.Namespace, key.Name, exports)
	want := res.Import
	if liveImp == nil {
		// Status is a subresource: the API server drops it on create.
		fresh := want.DeepCopy()
		fresh.Status = mcsv1beta1.ServiceImportStatus{}
		created, err := create(ctx, c, impOps, key, fresh)
		if err != nil {
			return err
		}
		liveImp = created
		c.reportConflicts(liveImp, res.Conflicts)
	}

	// The derived Service belongs to the ServiceImport, so the garbage
	// collector removes it with the import too.
	wantSvc := endpoints.DerivedService(want)
	wantSvc.OwnerReferences = []metav1.OwnerReference{importOwner(liveImp)}
	switch {
	case liveSvc == nil:
		if liveSvc, err = create(ctx, c, svcOps, key, wantSvc); err != nil {
			return err
		}
	case endpoints.ServiceNeedsRecreate(wantSvc, liveSvc):
		if err := remove(ctx, c, svcOps, liveSvc); err != nil {
			return err
		}
		if liveSvc, err = create(ctx, c, svcOps, key, wantSvc); err != nil {
			return err
		}
	case !endpoints.DerivedServiceUpToDate(wantSvc, liveSvc) || !apiequality.Semantic.DeepEqual(wantSvc.OwnerReferences, liveSvc.OwnerReferences):
		upd := endpoints.MergeDerivedService(wantSvc, liveSvc)
		upd.OwnerReferences = wantSvc.OwnerReferences
		if liveSvc, err = update(ctx, c, svcOps, upd); err != nil {
			return err
		}
	}

	want.Spec.IPs = importIPs(want, liveSvc)
	// Spec and metadata first (an update ignores status), then status.
	specOnly := want.DeepCopy()
	specOnly.Status.Clusters = liveImp.Status.Clusters
	if !endpoints.ImportUpToDate(specOnly, liveImp) {
		if liveImp, err = update(ctx, c, impOps, endpoints.MergeServiceImport(specOnly, liveImp)); err != nil {
			return err
		}
		c.reportConflicts(liveImp, res.Conflicts)
	}
	conds, condsChanged := endpoints.SetConditions(liveImp.Status.Conditions, endpoints.ImportConditions(res.Conflicts, liveImp.Generation))
	if condsChanged || !endpoints.ImportStatusUpToDate(want, liveImp) {
		upd := endpoints.MergeServiceImport(want, liveImp)
		upd.Status.Conditions = conds
		_, err := sendUpdate(c, resourceServiceImport, verbUpdateStatus, upd, func() (*mcsv1beta1.ServiceImport, error) {
			return c.hubMCS.MulticlusterV1beta1().ServiceImports(upd.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{FieldManager: fieldManager})
		})
		if err != nil {
			return err
		}
	}
	return c.writeExportStatuses(ctx, statuses, res.Conflicts)
}

// lastKnownPerCluster returns the per-cluster Service written for the
// service key in cluster, or nil.
func (c *Controller) lastKnownPerCluster(key Key, cluster string) *corev1.Service {
	name, _ := endpoints.PerClusterName(key.Name, cluster)
	svc, err := c.liveService(key.Namespace, name)
	if err != nil || !ownedBy(svc, Key{Cluster: cluster, Namespace: key.Namespace, Name: key.Name}) {
		return nil
	}
	return svc
}

// importIPs lists the derived Service's ClusterIPs, one per family in the
// import's ipFamilies order; Headless imports have none.
func importIPs(imp *mcsv1beta1.ServiceImport, svc *corev1.Service) []string {
	if imp.Spec.Type == mcsv1beta1.Headless || svc == nil {
		return nil
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone {
		ips = []string{svc.Spec.ClusterIP}
	}
	out := append([]string(nil), ips...)
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
		sort.SliceStable(out, func(i, j int) bool { return rank[fam[out[i]]] < rank[fam[out[j]]] })
	}
	return out
}

func importOwner(imp *mcsv1beta1.ServiceImport) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: mcsv1beta1.GroupVersion.String(),
		Kind:       mcsv1beta1.ServiceImportKindName,
		Name:       imp.Name,
		UID:        imp.UID,
	}
}

// reportConflicts tells about disagreeing exports on the ServiceImport, once
// per write of the import rather than once per sync.
func (c *Controller) reportConflicts(imp *mcsv1beta1.ServiceImport, conflicts []endpoints.Conflict) {
	for _, cf := range conflicts {
		c.recorder.Eventf(imp, corev1.EventTypeWarning, ReasonExportConflict, "%s: %s", cf.Reason, cf.Message)
		klog.InfoS("Export conflict", "serviceImport", klog.KObj(imp), "reason", cf.Reason, "clusters", cf.Clusters)
	}
}
