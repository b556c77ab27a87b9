package sync

import (
	"context"
	"errors"

	"github.com/hashicorp/go-multierror"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// The apply step does a plan's writes, in a fixed order, through create,
// update and remove (writes.go), which count them, track them for
// read-your-writes and echo detection, and turn a name held by someone else
// into a conflict.

// applyMember writes a member key's plan. MCS slices go first, as they are
// what the data plane and DNS read, creates and updates before deletes, so
// that endpoints moving between slices are never missing from the hub.
// Then the per-cluster pair: a withdrawn Endpoints before its Service, so
// nothing routes to a half-removed pair, and a new Service before its
// Endpoints. A slice write that fails does not stop the others.
func (w *hubWriter) applyMember(ctx context.Context, key Key, plan endpoints.MemberPlan) error {
	var errs *multierror.Error
	if !plan.Slices.Empty() {
		klog.V(4).InfoS("Writing slices", "key", key.String(), "create", len(plan.Slices.Create), "update", len(plan.Slices.Update), "delete", len(plan.Slices.Delete))
	}
	ops := w.sliceOps()
	for _, s := range plan.Slices.Create {
		_, err := create(ctx, w, ops, key, s)
		errs = multierror.Append(errs, err)
	}
	for _, s := range plan.Slices.Update {
		_, err := update(ctx, w, ops, s)
		errs = multierror.Append(errs, err)
	}
	for _, s := range plan.Slices.Delete {
		errs = multierror.Append(errs, remove(ctx, w, ops, s))
	}
	errs = multierror.Append(errs, w.applyPerCluster(ctx, key, plan))
	return errs.ErrorOrNil()
}

func (w *hubWriter) applyPerCluster(ctx context.Context, key Key, plan endpoints.MemberPlan) error {
	epsOps := w.endpointsOps()
	if e := plan.Endpoints.Delete; e != nil {
		if err := remove(ctx, w, epsOps, e); err != nil {
			return err
		}
	}
	if err := w.applyService(ctx, key, plan.Service); err != nil {
		return err
	}
	var err error
	switch {
	case plan.Endpoints.Create != nil:
		_, err = create(ctx, w, epsOps, key, plan.Endpoints.Create)
	case plan.Endpoints.Update != nil:
		_, err = update(ctx, w, epsOps, plan.Endpoints.Update)
	}
	return err
}

// applyService writes one Service change: a recreate deletes first.
func (w *hubWriter) applyService(ctx context.Context, key Key, ch endpoints.ServiceChange) error {
	svcOps := w.serviceOps()
	if ch.Delete != nil {
		if err := remove(ctx, w, svcOps, ch.Delete); err != nil {
			return err
		}
	}
	var err error
	switch {
	case ch.Create != nil:
		_, err = create(ctx, w, svcOps, key, ch.Create)
	case ch.Update != nil:
		_, err = update(ctx, w, svcOps, ch.Update)
	}
	return err
}

// applyImport writes one round of a clusterset key's plan: the import's
// create, the derived Service, then the import's spec or status, or for a
// withdrawal the derived Service before the import.
func (w *hubWriter) applyImport(ctx context.Context, key Key, plan endpoints.ImportPlan) error {
	impOps := w.importOps()
	if p := plan.CreateImport; p != nil {
		if _, err := create(ctx, w, impOps, key, p); err != nil {
			return err
		}
	}
	if err := w.applyService(ctx, key, plan.Derived); err != nil {
		return err
	}
	if p := plan.DeleteImport; p != nil {
		if err := remove(ctx, w, impOps, p); err != nil {
			return err
		}
	}
	if p := plan.UpdateImport; p != nil {
		if _, err := update(ctx, w, impOps, p); err != nil {
			return err
		}
	}
	if p := plan.UpdateImportStatus; p != nil {
		_, err := sendUpdate(w, resourceServiceImport, verbUpdateStatus, p, func() (*mcsv1beta1.ServiceImport, error) {
			return w.hubMCS.MulticlusterV1beta1().ServiceImports(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{FieldManager: fieldManager})
		})
		return err
	}
	return nil
}

// importRounds bounds the plan-and-apply rounds of one clusterset sync: a
// new import takes four (create it, create its derived Service, set its IPs,
// set its status) and a fifth finds nothing to do.
const importRounds = 6

// errNoFixedPoint says a clusterset sync kept finding writes to make: a bug.
var errNoFixedPoint = errors.New("the import plan did not settle")
