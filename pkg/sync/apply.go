package sync

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/go-multierror"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// The apply step does a plan's writes, in a fixed order, through createObject,
// updateObject and deleteObject (below), which count each write, track it for
// read-your-writes and echo detection (written.write), and turn a name held
// by someone else into a conflict.

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
		_, err := createObject(ctx, w, ops, key, s)
		errs = multierror.Append(errs, err)
	}
	for _, s := range plan.Slices.Update {
		_, err := updateObject(ctx, w, ops, s)
		errs = multierror.Append(errs, err)
	}
	for _, s := range plan.Slices.Delete {
		errs = multierror.Append(errs, deleteObject(ctx, w, ops, s))
	}
	errs = multierror.Append(errs, w.applyPerCluster(ctx, key, plan))
	return errs.ErrorOrNil()
}

func (w *hubWriter) applyPerCluster(ctx context.Context, key Key, plan endpoints.MemberPlan) error {
	epsOps := w.endpointsOps()
	if e := plan.Endpoints.Delete; e != nil {
		if err := deleteObject(ctx, w, epsOps, e); err != nil {
			return err
		}
	}
	if err := w.applyService(ctx, key, plan.Service); err != nil {
		return err
	}
	var err error
	switch {
	case plan.Endpoints.Create != nil:
		_, err = createObject(ctx, w, epsOps, key, plan.Endpoints.Create)
	case plan.Endpoints.Update != nil:
		_, err = updateObject(ctx, w, epsOps, plan.Endpoints.Update)
	}
	return err
}

// applyService writes one Service change: a recreate deletes first.
func (w *hubWriter) applyService(ctx context.Context, key Key, ch endpoints.ServiceChange) error {
	svcOps := w.serviceOps()
	if ch.Delete != nil {
		if err := deleteObject(ctx, w, svcOps, ch.Delete); err != nil {
			return err
		}
	}
	var err error
	switch {
	case ch.Create != nil:
		_, err = createObject(ctx, w, svcOps, key, ch.Create)
	case ch.Update != nil:
		_, err = updateObject(ctx, w, svcOps, ch.Update)
	}
	return err
}

// applyImport writes one round of a clusterset key's plan: the import's
// create, the derived Service, then the import's spec or status, or for a
// withdrawal the derived Service before the import.
func (w *hubWriter) applyImport(ctx context.Context, key Key, plan endpoints.ImportPlan) error {
	impOps := w.importOps()
	if p := plan.CreateImport; p != nil {
		if _, err := createObject(ctx, w, impOps, key, p); err != nil {
			return err
		}
	}
	if err := w.applyService(ctx, key, plan.Derived); err != nil {
		return err
	}
	if p := plan.Alias.Delete; p != nil && plan.DeleteImport != nil {
		if err := w.applyService(ctx, key, plan.Alias); err != nil {
			return err
		}
		plan.Alias = endpoints.ServiceChange{}
	}
	if p := plan.DeleteImport; p != nil {
		if err := deleteObject(ctx, w, impOps, p); err != nil {
			return err
		}
	}
	if p := plan.UpdateImport; p != nil {
		if _, err := updateObject(ctx, w, impOps, p); err != nil {
			return err
		}
	}
	if p := plan.UpdateImportStatus; p != nil {
		if _, err := sendUpdate(w, resourceServiceImport, verbUpdateStatus, p, func() (*mcsv1beta1.ServiceImport, error) {
			return w.hubMCS.MulticlusterV1beta1().ServiceImports(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{FieldManager: fieldManager})
		}); err != nil {
			return err
		}
	}
	// The alias goes last: a name found taken ends the round, and the
	// import's own writes must not wait for it.
	return w.applyService(ctx, key, plan.Alias)
}

// importRounds bounds the plan-and-apply rounds of one clusterset sync: a
// new import takes four (create it, create its derived Service, set its IPs,
// set its status) and a fifth finds nothing to do.
const importRounds = 6

// errNoFixedPoint says a clusterset sync kept finding writes to make: a bug.
var errNoFixedPoint = errors.New("the import plan did not settle")

// createObject writes a new hub object. If the name is taken by an object we do
// not own for key, it reports a conflict instead of touching it; if it is
// ours (our cache lags), the error makes the key retry.
func createObject[T hubObject](ctx context.Context, w *hubWriter, o ops[T], key Key, obj T) (T, error) {
	out, err := send(w, o.resource, verbCreate, obj, func() (T, error) { return o.create(ctx, obj) })
	if apierrors.IsAlreadyExists(err) {
		w.calling()
		live, gerr := o.get(ctx, obj.GetNamespace(), obj.GetName())
		if gerr != nil {
			return out, gerr
		}
		if !ownedBy(live, key) {
			err := newConflict(o.resource, live, key)
			// A name newly found taken: sync again at once, as without the
			// name what the key holds under it must go (see readMember).
			err.resyncNow = live.GetLabels()[endpoints.LabelManagedBy] != endpoints.ManagedByValue && w.taken.set(refOf(o.resource, live), true)
			return out, err
		}
		return out, fmt.Errorf("creating %s %s/%s: %w", o.resource, obj.GetNamespace(), obj.GetName(), errStaleCache)
	}
	return out, err
}

func updateObject[T hubObject](ctx context.Context, w *hubWriter, o ops[T], obj T) (T, error) {
	return sendUpdate(w, o.resource, verbUpdate, obj, func() (T, error) { return o.update(ctx, obj) })
}

// sendUpdate sends an update (or a status update) of obj; a conflict means
// our cache lags, and the watch event that updates it queues the key again.
func sendUpdate[T hubObject](w *hubWriter, resource, verb string, obj T, call func() (T, error)) (T, error) {
	out, err := send(w, resource, verb, obj, call)
	if apierrors.IsConflict(err) {
		return out, fmt.Errorf("%s %s %s/%s: %w", verb, resource, obj.GetNamespace(), obj.GetName(), errStaleCache)
	}
	return out, err
}

// send makes one hub write of obj, counted and tracked (written.write).
func send[T hubObject](w *hubWriter, resource, verb string, obj T, call func() (T, error)) (T, error) {
	var out T
	err := w.written.write(resource, verb, obj, func() (hubObject, error) {
		w.calling()
		var err error
		out, err = call()
		w.countWrite(resource, verb, err)
		if err != nil || verb == verbDelete {
			return nil, err
		}
		return out, nil
	})
	return out, err
}

// deleteObject deletes one of our hub objects, preconditioned on the UID we saw so
// a newer object of the same name is never deleted by mistake. NotFound is
// success.
func deleteObject[T hubObject](ctx context.Context, w *hubWriter, o ops[T], live T) error {
	uid := live.GetUID()
	opts := metav1.DeleteOptions{}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	_, err := send(w, o.resource, verbDelete, live, func() (T, error) {
		var none T
		return none, o.delete(ctx, live.GetNamespace(), live.GetName(), opts)
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// countWrite and countMemberWrite count one write to the hub or to a
// member, by its result: the accounting of the write step itself.
func (w *hubWriter) countWrite(resource, verb string, err error) {
	result := resultOf(err)
	w.metrics.HubWrites.WithLabelValues(resource, verb, result).Inc()
	if result == resultError {
		reason := string(apierrors.ReasonForError(err))
		if reason == "" {
			reason = "Other"
		}
		w.metrics.HubWriteRefusals.WithLabelValues(resource, verb, reason).Inc()
	}
}

func (w *hubWriter) countMemberWrite(err error) {
	w.metrics.MemberWrites.WithLabelValues(resultOf(err)).Inc()
}

// resultOf is the result label of a write.
func resultOf(err error) string {
	switch {
	case err == nil:
		return resultSuccess
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		return resultConflict
	case apierrors.IsNotFound(err):
		return resultNotFound
	}
	return resultError
}
