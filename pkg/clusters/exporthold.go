package clusters

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// Deleting a member's ServiceExport CRD deletes every ServiceExport, and
// the watch tells of each deletion. Its admin did not unexport anything:
// the CRD is being replaced (an MCS implementation reinstalled, a Helm
// chart that deletes CRDs), and the objects come back with it. Withdrawing
// them would take the member's endpoints out of every consumer's routing
// until then, which is what cilium#47793's users lost.
//
// So a source holds its exports across their CRD's deletion:
//
//  1. A deletion is passed on only once the member's discovery, read
//     deletionConfirm after it, still serves ServiceExport for creation.
//     A CRD being deleted does not (see ServedExportVersion): the exports
//     cached then are held, and deletions no longer reach the cache.
//  2. While no version is served, lists fail (errExportsGone) and the
//     cache keeps what it holds.
//  3. Once a version is served again, each complete list carries the held
//     exports not re-created yet, for exportHold; one re-created, or
//     deleted again, is the member's own again. Then the watch ends, the
//     next list is the member's alone, and what was not re-created is
//     withdrawn.
//
// A held export has no object on the member: its status is not written.

// exportHold is how long held exports stay after their CRD is served
// again, for whoever applied them (a GitOps tool's usual resync is a few
// minutes) to apply them again; a variable for tests.
var exportHold = 5 * time.Minute

// deletionConfirm is how long after a ServiceExport's deletion discovery
// is read, so that the CRD's own deletion shows there first; a variable
// for tests.
var deletionConfirm = time.Second

// heldExports are the exports a source keeps since their CRD went.
type heldExports struct {
	exports map[types.NamespacedName]*mcsv1beta1.ServiceExport
	// until is zero while no version is served, then when the exports not
	// re-created are let go.
	until time.Time
}

// clone is a copy of h, for another source to hold; nil if h is.
func (h *heldExports) clone() *heldExports {
	if h == nil {
		return nil
	}
	return &heldExports{exports: maps.Clone(h.exports), until: h.until}
}

// hold starts holding the cached exports, unless the source does already
// and no version has been served since.
func (s *exportSource) hold(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held != nil && s.held.until.IsZero() {
		return
	}
	h := &heldExports{exports: map[types.NamespacedName]*mcsv1beta1.ServiceExport{}}
	for _, st := range []cache.Store{s.before, s.store} {
		if st == nil {
			continue
		}
		for _, o := range st.List() {
			if se, ok := o.(*mcsv1beta1.ServiceExport); ok {
				h.exports[types.NamespacedName{Namespace: se.Namespace, Name: se.Name}] = se
			}
		}
	}
	s.held = h
	klog.FromContext(ctx).Info("The member's ServiceExport CRD is being deleted or gone: its exports are held, not withdrawn", "exports", len(h.exports))
}

// holding reports whether deletions are held back: the CRD went and no
// version is served since.
func (s *exportSource) holding() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held != nil && s.held.until.IsZero()
}

// holdEnded reports whether held exports are due to be let go.
func (s *exportSource) holdEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held != nil && !s.held.until.IsZero() && !time.Now().Before(s.held.until)
}

// isHeld reports whether namespace/name is held, not on the member.
func (s *exportSource) isHeld(namespace, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held != nil && s.held.exports[types.NamespacedName{Namespace: namespace, Name: name}] != nil
}

// withHeld adds to a complete list of the served version the held exports
// it lacks, until exportHold after the first such list; after that, or
// once none is left, the hold ends. out may be one page of the list: an
// export it holds is no longer held, and the last page carries the rest.
func (s *exportSource) withHeld(ctx context.Context, out *mcsv1beta1.ServiceExportList) *mcsv1beta1.ServiceExportList {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.held
	if h == nil {
		return out
	}
	for i := range out.Items {
		delete(h.exports, types.NamespacedName{Namespace: out.Items[i].Namespace, Name: out.Items[i].Name})
	}
	if out.Continue != "" {
		return out
	}
	logger, now := klog.FromContext(ctx), time.Now()
	if h.until.IsZero() {
		h.until = now.Add(exportHold)
		if len(h.exports) > 0 {
			logger.Info("The member serves ServiceExport again: held exports not re-created are withdrawn when the hold ends",
				"held", len(h.exports), "until", h.until.Format(time.RFC3339))
		}
	}
	keys := slices.SortedFunc(maps.Keys(h.exports), compareNames)
	if len(keys) == 0 || !now.Before(h.until) {
		if len(keys) > 0 {
			logger.Info("Held exports not re-created are withdrawn", "exports", keys)
		}
		s.held = nil
		return out
	}
	for _, k := range keys {
		out.Items = append(out.Items, *h.exports[k])
	}
	return out
}

// compareNames orders held exports by namespace, then name.
func compareNames(a, b types.NamespacedName) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

// gather reads on from in for deletionConfirm after a deletion, so that
// one look at discovery judges a burst of them: a CRD's deletion deletes
// every export at once. open is false once in has closed.
func (s *exportSource) gather(ctx context.Context, events []watch.Event, in <-chan watch.Event) (_ []watch.Event, open bool) {
	if s.holding() {
		return events, true
	}
	timer := time.NewTimer(deletionConfirm)
	defer timer.Stop()
	for {
		select {
		case e, ok := <-in:
			if !ok {
				return events, false
			}
			events = append(events, e)
		case <-timer.C:
			return events, true
		case <-ctx.Done():
			return events, true
		}
	}
}

// pass returns what of events the informer is told: all of them while the
// member serves ServiceExport, none of the deletions once its CRD is being
// deleted (which starts the hold). An export that comes back, or is
// deleted once the CRD is served again, is no longer held.
func (s *exportSource) pass(ctx context.Context, events []watch.Event) []watch.Event {
	deleted := func(e watch.Event) bool { return e.Type == watch.Deleted }
	if slices.ContainsFunc(events, deleted) && !s.holding() {
		if v, err := s.served(ctx); err == nil && v == ExportNotServed {
			s.hold(ctx)
		}
	}
	if s.holding() {
		return slices.DeleteFunc(events, deleted)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held != nil {
		for _, e := range events {
			if se, ok := e.Object.(*mcsv1beta1.ServiceExport); ok {
				delete(s.held.exports, types.NamespacedName{Namespace: se.Namespace, Name: se.Name})
			}
		}
	}
	return events
}
