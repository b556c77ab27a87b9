package sync

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// writesExportStatus reports whether ServiceExport conditions are written
// back to members: only in MCS mode, and only when allowed.
func (c *Controller) writesExportStatus() bool {
	return c.opts.Export.Mode == ExportServiceExport && c.opts.WriteExportStatus
}

// syncExportStatus brings the Valid, Ready and Conflict conditions of a
// member key's ServiceExport in line with its Service and the hub's
// ServiceImport, writing only what changed. An unreachable member is
// skipped, so a worker never waits on it: its recovery queues its keys
// again. A clusterset sync that changes what the import says of the
// exports queues the keys of its clusters (queueExportStatuses).
func (c *Controller) syncExportStatus(ctx context.Context, key Key, m Member, svc *corev1.Service) error {
	if m == nil || !c.writesExportStatus() {
		return nil
	}
	se := m.ServiceExport(key.Namespace, key.Name)
	if se == nil {
		return nil
	}
	if _, down := m.UnreachableSince(); down {
		return nil
	}
	imp, err := c.liveImport(key.Namespace, key.Name)
	switch {
	case apierrors.IsNotFound(err):
		imp = nil
	case err != nil:
		return err
	case !ownedBy(imp, key.ClusterSet()):
		imp = nil // someone else's: it says nothing of our merge
	}
	want := endpoints.ExportConditions(svc, imp, key.Cluster, se.Generation)
	conds, changed := endpoints.SetConditions(se.Status.Conditions, want)
	if !changed {
		return nil
	}
	err = m.PatchServiceExportConditions(ctx, se, conds)
	c.metrics.MemberWrites.WithLabelValues(resultOf(err)).Inc()
	if err != nil {
		klog.V(2).InfoS("Writing ServiceExport conditions failed", "cluster", key.Cluster, "serviceExport", klog.KObj(se), "err", err)
	}
	return err
}
