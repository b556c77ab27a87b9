package sync

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// outcome is what one sync asks of the controller besides its writes: the
// keys it found work for, the preconditions it waits for, and what an
// operator should see. A sync only fills it in; settle applies it, in one
// place, whatever the sync returned (see the package documentation).
type outcome struct {
	follow []Key
	waits  []pendingWait
	events []event
	// missingNS is set when the hub lacks the key's namespace; unreadable
	// counts export records the merge could not read.
	unreadable int
	missingNS  bool
	// endpoints is what the key contributes to its cluster's gauge (-1:
	// nothing), when the sync got that far, and refused the member
	// endpoints it refused (nil: the key has no source); changed is the
	// newest member change it wrote (zero: none).
	endpoints *int
	refused   *endpoints.Refusals
	changed   time.Time
	// export is the member key's export as the sync judged it against its
	// member's bounds (nil: none); exportRefused says why a Service is not
	// imported although exported (past the bounds, or default/kubernetes).
	export        *ledgerEntry
	exportRefused string
	// census is the member's exports as the sync read them from its
	// caches, to judge its export (nil: not taken); unread is set when it
	// withdrew its key without reading them (see ledger).
	census map[Key]ledgerEntry
	unread bool
	// invalidExport lists what the sync removed from the member's Service
	// and export before building hub objects from them.
	invalidExport []string
	// conflicts are a clusterset key's export conflicts once the hub holds
	// the import the merge planned (nil: the sync did not get that far).
	conflicts *importConflicts
	// drop is set when the sync found that this replica no longer writes
	// its member's keys (not owned here, or unregistered; a clusterset
	// key: not merging): what is kept of them goes (memberStates.drop).
	drop bool
}

// importConflicts are the conflicts of an import's exports, and the import
// they are reported on (nil: the hub has no import of ours).
type importConflicts struct {
	imp  *mcsv1beta1.ServiceImport
	list []endpoints.Conflict
}

// pendingWait is a precondition a sync found missing, and how to tell it
// holds.
type pendingWait struct {
	cond  condition
	holds func() bool
}

// event is an Event to record.
type event struct {
	obj                    runtime.Object
	eventType, reason, msg string
}

func (o *outcome) waitFor(cond condition, holds func() bool) {
	o.waits = append(o.waits, pendingWait{cond, holds})
}

func (o *outcome) queue(key Key) { o.follow = append(o.follow, key) }

func (o *outcome) event(obj runtime.Object, eventType, reason, msg string) {
	o.events = append(o.events, event{obj, eventType, reason, msg})
}

// setConflicts sets the export conflicts of the import the hub holds
// (nil: none of ours).
func (o *outcome) setConflicts(imp *mcsv1beta1.ServiceImport, conflicts []endpoints.Conflict) {
	if imp == nil {
		conflicts = nil
	}
	o.conflicts = &importConflicts{imp: imp, list: conflicts}
}

// applyNotices acts on what the write tracker found: owners to sync again,
// and entries it dropped that a sync may have read.
func (c *Controller) applyNotices() {
	for _, n := range c.written.takeNotices() {
		switch {
		case n.requeue != nil:
			c.enqueue(*n.requeue, aChange)
		case n.unshadowed != nil:
			c.unshadowed(n.unshadowed.ref, n.unshadowed.entry)
		}
	}
}

// expireWrites expires the tracked writes whose echo did not come, and acts
// on what that found.
func (c *Controller) expireWrites() {
	c.written.expire()
	c.applyNotices()
}

// settle applies what a sync of key asked for: Events, metrics and log
// lines, the name conflicts its error carries, the keys it found work for
// and the preconditions it waits for.
func (c *Controller) settle(key Key, out *outcome, err error) {
	for _, e := range out.events {
		c.recorder.Event(e.obj, e.eventType, e.reason, e.msg)
	}
	c.settleState(key, out)
	if out.missingNS {
		c.metrics.SkippedNamespace.Inc()
		klog.V(2).InfoS("Hub namespace missing, skipping", "namespace", key.Namespace, "key", key.String())
	}
	for range out.unreadable {
		c.metrics.UnreadableRecords.Inc()
	}
	// Trigger times from before the daemon started (a cold start catching
	// up) measure downtime, not propagation.
	if out.changed.After(c.startTime) {
		c.metrics.Propagation.Observe(time.Since(out.changed).Seconds())
	}
	conflicts := conflictsIn(err)
	for _, cf := range conflicts {
		c.reportConflict(cf)
	}
	for _, cf := range conflicts {
		if cf.resyncNow {
			c.enqueue(key, aChange)
			break
		}
	}
	for _, k := range out.follow {
		c.enqueue(k, c.foundBy(key, k))
	}
	c.applyNotices()
	for _, w := range out.waits {
		c.waitFor(key, w.cond, w.holds)
	}
}

// settleState keeps what a sync found of its key (see memberStates) and
// reports what changed; a sync that found this replica no longer writes
// its member's keys drops all that is kept of them instead.
func (c *Controller) settleState(key Key, out *outcome) {
	if out.drop {
		c.state.drop(key.Cluster)
		return
	}
	if out.conflicts != nil {
		if before, changed := c.state.recordExportConflicts(key, out.conflicts.list); changed {
			c.reportExportConflicts(key, out.conflicts, before)
		}
	}
	if out.census != nil {
		for _, k := range c.state.seedCensus(key.Cluster, out.census) {
			if k != key {
				c.enqueue(k, c.foundBy(key, k))
			}
		}
	}
	if out.unread {
		c.state.forgetCensus(key.Cluster)
	}
	if out.endpoints == nil || key.IsClusterSet() {
		return
	}
	if c.state.recordRefused(key, out.refused) {
		c.reportRefused(key, out.refused)
	}
	if c.state.recordInvalidExport(key, out.invalidExport) {
		c.reportInvalidExport(key, out.invalidExport)
	}
	again, wasRefused := c.state.recordExport(key, out.export)
	for _, k := range again {
		c.enqueue(k, c.foundBy(key, k))
	}
	if out.export != nil && out.export.admitted == wasRefused {
		c.reportAdmission(key, out.export.admitted, out.exportRefused)
	}
}
