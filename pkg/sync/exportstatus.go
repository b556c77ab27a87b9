package sync

import (
	"context"

	"github.com/hashicorp/go-multierror"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// exportStatus is one member ServiceExport whose conditions we maintain.
type exportStatus struct {
	cluster string
	member  Member
	export  *mcsv1beta1.ServiceExport // from the member's cache: read-only
	service *corev1.Service           // nil when the member has no such Service
}

// writesExportStatus reports whether ServiceExport conditions are written
// back to members: only in MCS mode, and only when allowed.
func (c *Controller) writesExportStatus() bool {
	return c.opts.Export.Mode == ExportServiceExport && c.opts.WriteExportStatus
}

// writeExportStatuses brings each member ServiceExport's Valid, Ready and
// Conflict conditions in line, writing only those that changed. An
// unreachable member is skipped, so a worker never waits on it: its
// recovery queues the merged keys again.
func (c *Controller) writeExportStatuses(ctx context.Context, statuses []exportStatus, conflicts []endpoints.Conflict) error {
	var errs *multierror.Error
	for _, s := range statuses {
		if _, down := s.member.UnreachableSince(); down {
			continue
		}
		want := endpoints.ExportConditions(s.service, conflicts, s.export.Generation)
		conds, changed := endpoints.SetConditions(s.export.Status.Conditions, want)
		if !changed {
			continue
		}
		err := s.member.PatchServiceExportConditions(ctx, s.export, conds)
		c.metrics.MemberWrites.WithLabelValues(resultOf(err)).Inc()
		if err != nil {
			klog.V(2).InfoS("Writing ServiceExport conditions failed", "cluster", s.cluster, "serviceExport", klog.KObj(s.export), "err", err)
		}
		errs = multierror.Append(errs, err)
	}
	return errs.ErrorOrNil()
}
