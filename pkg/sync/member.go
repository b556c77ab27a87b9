package sync

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/addresses"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

// syncMemberService writes the hub objects sourced from one member service:
// its MCS EndpointSlices, which also record its export for the merge (see
// endpoints.ExportRecord), and its per-cluster Service and Endpoints. With
// the service gone, unexported, its member unregistered or withdrawn by the
// unreachable policy, it withdraws them. A registered member without a full
// view (not connected, or not synced) keeps what the hub holds. An export
// past its member's bounds is not imported (see ledger). A changed
// record queues the clusterset key, which merges the records; the member's
// ServiceExport conditions follow the merged import.
func (c *Controller) syncMemberService(ctx context.Context, key Key, out *outcome) error {
	st, m := c.members.Lookup(key.Cluster)
	defer func() {
		// The member changed phase while this sync ran (it was
		// unregistered, or lost its connection): what the sync wrote may
		// not be what the key should hold now, and the transition's own
		// queueing may have missed objects not written yet. Again.
		if now, _ := c.members.Lookup(key.Cluster); now.Phase != st.Phase {
			out.queue(key)
		}
	}()
	if !st.Registered() && !c.members.SecretsSynced() {
		// The member may yet be registered.
		out.waitFor(waitRegistrations(), c.members.SecretsSynced)
		return nil
	}
	ctx, done, owned := c.fenced(ctx, key, st, out)
	defer done()
	if !owned {
		return nil // another replica writes them
	}
	// An unregistered member's objects are all withdrawn: nothing of it
	// is kept.
	out.drop = !st.Registered()
	step := c.unreachableStep(st)
	if st.Registered() && st.Phase != lifecycle.Synced && step != lifecycle.Withdraw {
		out.waitFor(waitMemberSynced(key.Cluster), func() bool { return c.memberSynced(key.Cluster) })
		return nil
	}

	var src *endpoints.Source
	var svc *corev1.Service
	if st.Phase == lifecycle.Synced && step != lifecycle.Withdraw {
		var err error
		svc, err = m.ServiceLister().Services(key.Namespace).Get(key.Name)
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if apierrors.IsNotFound(err) {
			svc = nil
		}
		// What the hub would refuse of the Service goes before anything is
		// built from it.
		var problems []string
		svc, problems = endpoints.SanitizeService(svc)
		e, ok := c.opts.Export.export(key.Cluster, m, svc, st.RegisteredAt)
		var more []string
		e, more = endpoints.SanitizeExport(e)
		problems = append(problems, more...)
		// What would not fit in the hub objects is cut for this export
		// alone: one member must not make the shared import unwritable.
		var record, tooBig string
		if ok {
			var cut []string
			e, record, cut, tooBig = endpoints.FitExport(e)
			out.invalidExport = append(problems, cut...)
		}
		if svc != nil && isAPIServerService(key.Namespace, key.Name) {
			out.exportRefused = "default/kubernetes is the cluster's API server: it is never exported"
		}
		if ok {
			slices, err := m.EndpointSlices(key.Namespace, key.Name)
			if err != nil {
				return err
			}
			clean, refused := endpoints.Sanitize(endpoints.Source{Cluster: key.Cluster, Service: svc, Slices: slices}, c.addressPolicy(st))
			out.refused = &refused
			clean.Record = record
			if step == lifecycle.MarkNotReady {
				clean = endpoints.MarkNotReady(clean)
			}
			n := countEndpoints(&clean)
			out.export = &ledgerEntry{created: e.Created.Time, endpoints: n, admitted: true}
			if c.state.needsCensus(key.Cluster) {
				if out.census, err = c.opts.Export.census(key.Cluster, m, st.RegisteredAt, c.addressPolicy(st)); err != nil {
					return err
				}
			}
			why := tooBig
			if why == "" {
				why = c.state.judge(key, e.Created.Time, n, out.census)
			}
			if why != "" {
				// Too big for the hub, or past the member's bounds: not
				// imported, as if not exported; its ServiceExport and an
				// Event say why.
				out.export.admitted, out.exportRefused = false, why
			} else {
				src = &clean
			}
		}
	} else {
		// Withdrawn unread: the ledger no longer knows all its exports.
		out.unread = st.Registered()
	}

	view, holder, err := c.read.readMember(ctx, key)
	if err != nil {
		return err
	}
	if src != nil {
		if ok, err := c.ensureNamespace(ctx, key, out); !ok {
			if err != nil {
				return err
			}
			return c.syncExportStatus(ctx, key, st, m, svc, out)
		}
	}
	if record, had := endpoints.SourceRecord(key.Namespace, key.Name, key.Cluster, view.Slices); had != (src != nil) || (src != nil && record != src.Record) {
		// Queued even if a write below fails: the merge reads whatever
		// record the hub holds then.
		out.queue(key.ClusterSet())
	}
	plan := endpoints.PlanMember(key.Namespace, key.Name, key.Cluster, src, c.opts.PerClusterServices, view)
	if err := c.write.applyMember(ctx, key, plan); err != nil {
		return err
	}
	if src != nil && !plan.Slices.Empty() {
		out.changed = newestChange(src.Slices)
	}
	n := countEndpoints(src)
	out.endpoints = &n
	statusErr := c.syncExportStatus(ctx, key, st, m, svc, out)
	if holder != nil && src != nil && c.opts.PerClusterServices != endpoints.PerClusterOff {
		return newConflict(resourceService, holder, key)
	}
	return statusErr
}

// newestChange is the newest member change of slices: their latest
// last-change-trigger-time, for the propagation metric; zero for none.
func newestChange(slices []*endpoints.MemberSlice) time.Time {
	var newest time.Time
	for _, s := range slices {
		if s.LastChange.After(newest) {
			newest = s.LastChange
		}
	}
	return newest
}

// ensureNamespace reports whether the hub has the key's namespace, creating
// it when --create-namespaces is set. A missing namespace is not an error to
// retry: the key waits for the namespace to appear.
func (c *Controller) ensureNamespace(ctx context.Context, key Key, out *outcome) (bool, error) {
	exists := func() bool { return c.read.hasNamespace(key.Namespace) }
	if exists() {
		return true, nil
	}
	ref := &corev1.ObjectReference{Kind: "Namespace", APIVersion: "v1", Name: key.Namespace}
	if !c.opts.CreateNamespaces {
		out.missingNS = true
		out.event(ref, corev1.EventTypeWarning, "NamespaceMissing",
			fmt.Sprintf("hub has no namespace %q for %s; skipped (start the daemon with --create-namespaces to create it)", key.Namespace, key))
		out.waitFor(waitNamespace(key.Namespace), exists)
		return false, nil
	}
	if err := c.write.createNamespace(ctx, key.Namespace); err != nil {
		return false, err
	}
	return true, nil
}

// unreachableStep is the step of the unreachable policy that applies to a
// member now (see lifecycle.State.UnreachableStep).
func (c *Controller) unreachableStep(st lifecycle.State) lifecycle.Step {
	step, _ := st.UnreachableStep(c.opts.Clock.Now(), c.opts.UnreachableGrace, c.opts.UnreachableWithdraw)
	return step
}

// addressPolicy is the address policy a member is held to now: the
// daemon's, with the hub's Service ranges and the registration's allowed
// ranges.
func (c *Controller) addressPolicy(st lifecycle.State) *addresses.Policy {
	p := c.opts.Addresses
	p.HubServiceRanges = c.read.ranges.get()
	p.MemberAllowed = st.Policy.AllowedEndpoints
	return &p
}
