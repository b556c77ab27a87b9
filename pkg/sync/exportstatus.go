package sync

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
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
// exports queues the keys of its clusters (queueImportReaders).
func (c *Controller) syncExportStatus(ctx context.Context, key Key, st lifecycle.State, m Member, svc *corev1.Service, out *outcome) error {
	if m == nil || st.Unreachable || !c.writesExportStatus() {
		return nil
	}
	se := m.ServiceExport(key.Namespace, key.Name)
	if se == nil {
		return nil
	}
	imp, err := c.read.liveImport(key.Namespace, key.Name)
	blocked := false // this hub cannot import the service
	switch {
	case apierrors.IsNotFound(err):
		imp = nil
		nsExists := func() bool { return c.read.hasNamespace(key.Namespace) }
		if !c.opts.CreateNamespaces && !nsExists() {
			blocked = true
			out.waitFor(waitNamespace(key.Namespace), nsExists)
		}
		// A ServiceImport name taken by someone else: the import's
		// creation, once it is free, queues the key.
		blocked = blocked || c.read.taken.has(objectRef{resourceServiceImport, key.Namespace, key.Name})
	case err != nil:
		return err
	case !ownedBy(imp, key.ClusterSet()):
		imp, blocked = nil, true // someone else's: it says nothing of our merge
	}
	want := endpoints.ExportConditions(svc, imp, key.Cluster, se.Generation)
	if out.exportRefused != "" && svc != nil {
		want = endpoints.RefusedExportConditions(out.exportRefused, se.Generation)
	}
	if blocked && exportable(svc) {
		// Where every cluster is a hub, another daemon may import it: a
		// Pending from this one would fight its Ready. The hub's Event says
		// why this one does not.
		want = slices.DeleteFunc(want, func(c metav1.Condition) bool { return c.Type == string(mcsv1beta1.ServiceExportConditionReady) })
	}
	conds, changed := endpoints.SetConditions(se.Status.Conditions, want)
	if !changed {
		return nil
	}
	err = m.PatchServiceExportConditions(ctx, se, conds)
	c.write.countMemberWrite(err)
	if err != nil {
		klog.V(2).InfoS("Writing ServiceExport conditions failed", "cluster", key.Cluster, "serviceExport", klog.KObj(se), "err", err)
	}
	return err
}

// exportable reports whether svc can be imported at all, so that its Ready
// condition depends on the hub.
func exportable(svc *corev1.Service) bool {
	return svc != nil && svc.Spec.Type != corev1.ServiceTypeExternalName
}
