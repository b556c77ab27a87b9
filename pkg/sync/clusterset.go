package sync

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

	for _, name := range pending {
		c.waitFor(key, waitMemberSynced(name), func() bool { return c.memberSynced(name) })
	}
	if len(exports) == 0 && len(pending) > 0 {
		return nil // keep what the hub has until they sync
	}
	var want *endpoints.ImportResult
	if len(exports) > 0 {
		if ok, err := c.ensureNamespace(ctx, key); !ok {
			return err
		}
		var liveImp *mcsv1beta1.ServiceImport
		if len(pending) > 0 {
			var err error
			if liveImp, err = c.liveImport(key.Namespace, key.Name); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		for _, name := range pending {
			if e, ok := endpoints.LastKnownExport(name, liveImp, c.lastKnownPerCluster(key, name)); ok {
				exports = append(exports, e)
			}
		}
		res := endpoints.MergeImport(key.Namespace, key.Name, exports)
		want = &res
	}

	// Plan and apply until the plan is empty: each round plans on what the
	// previous one wrote (see endpoints.ImportPlan).
	for range importRounds {
		view, holder, err := c.readImport(ctx, key)
		if err != nil {
			return err
		}
		plan := endpoints.PlanImport(want, view)
		if plan.Empty() {
			if holder != nil && want != nil {
				return c.conflict(resourceServiceImport, holder, key)
			}
			return c.writeExportStatuses(ctx, statuses, conflicts(want))
		}
		if err := c.applyImport(ctx, key, plan, conflicts(want)); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s: %w", key, errNoFixedPoint)
}

func conflicts(res *endpoints.ImportResult) []endpoints.Conflict {
	if res == nil {
		return nil
	}
	return res.Conflicts
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

// reportConflicts tells about disagreeing exports on the ServiceImport, once
// per write of the import rather than once per sync.
func (c *Controller) reportConflicts(imp *mcsv1beta1.ServiceImport, conflicts []endpoints.Conflict) {
	for _, cf := range conflicts {
		c.recorder.Eventf(imp, corev1.EventTypeWarning, ReasonExportConflict, "%s: %s", cf.Reason, cf.Message)
		klog.InfoS("Export conflict", "serviceImport", klog.KObj(imp), "reason", cf.Reason, "clusters", cf.Clusters)
	}
}
