package sync

import (
	"time"

	"k8s.io/klog/v2"
)

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
			c.queue.add(key, aChange)
			break
		}
	}
	for _, k := range out.follow {
		c.queue.addFound(key, k)
	}
	c.applyNotices()
	for _, w := range out.waits {
		c.waits.waitFor(key, w.cond, w.holds)
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
	kept := c.state.keep(key, out)
	if kept.conflictsChanged {
		c.reportExportConflicts(key, out.conflicts, kept.conflictsBefore)
	}
	for _, k := range kept.seeded {
		if k != key {
			c.queue.addFound(key, k)
		}
	}
	if out.endpoints == nil || key.IsClusterSet() {
		return
	}
	if kept.refusedChanged {
		c.reportRefused(key, out.refused)
	}
	if kept.invalidChanged {
		c.reportInvalidExport(key, out.invalidExport)
	}
	for _, k := range kept.again {
		c.queue.addFound(key, k)
	}
	if out.export != nil && out.export.admitted == kept.wasRefused {
		c.reportAdmission(key, out.export.admitted, out.exportRefused)
	}
}

// applyNotices acts on what the write tracker found: owners to sync again,
// and entries it dropped that a sync may have read.
func (c *Controller) applyNotices() {
	for _, n := range c.written.takeNotices() {
		switch {
		case n.requeue != nil:
			c.queue.add(*n.requeue, aChange)
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
