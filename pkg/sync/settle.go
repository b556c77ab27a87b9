package sync

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
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

// reportConflict says where an operator looks that an object holds a name
// we need: an Event on that object, a metric and a log line.
func (c *Controller) reportConflict(e *conflictError) {
	c.metrics.Conflicts.WithLabelValues(e.resource).Inc()
	c.recorder.Eventf(e.holder, corev1.EventTypeWarning, ReasonNameConflict,
		"endpoint-aggregator needs this name for %s but the object is not managed by it (label %s=%s missing or for another source); left untouched",
		e.key, endpoints.LabelManagedBy, endpoints.ManagedByValue)
	klog.InfoS("Hub name conflict", "resource", e.resource, "object", klog.KRef(e.namespace, e.name), "key", e.key.String())
}

// reportExportConflicts says how the conflicts of an import changed: an
// ExportConflict Warning for each conflict new or changed, a
// ConflictResolved for the reasons that cleared, and a log line for each.
// An import withdrawn takes its conflicts with it: a log line only.
func (c *Controller) reportExportConflicts(key Key, now *importConflicts, before []endpoints.Conflict) {
	var resolved []string
	for _, b := range before {
		if !slices.ContainsFunc(now.list, func(n endpoints.Conflict) bool { return n.Reason == b.Reason }) {
			resolved = append(resolved, string(b.Reason))
		}
	}
	if now.imp == nil {
		klog.InfoS("Export conflicts ended with the import", "key", key.String(), "resolved", resolved)
		return
	}
	ref := &corev1.ObjectReference{
		Kind: "ServiceImport", APIVersion: mcsv1beta1.GroupVersion.String(),
		Namespace: now.imp.Namespace, Name: now.imp.Name, UID: now.imp.UID, ResourceVersion: now.imp.ResourceVersion,
	}
	for _, cf := range now.list {
		if slices.ContainsFunc(before, func(b endpoints.Conflict) bool { return sameConflict(b, cf) }) {
			continue
		}
		msg := string(cf.Reason) + ": " + cf.Message
		c.recorder.Event(ref, corev1.EventTypeWarning, ReasonExportConflict, msg)
		klog.InfoS("Export conflict", "key", key.String(), "reason", cf.Reason, "clusters", cf.Clusters, "message", cf.Message)
	}
	if len(resolved) == 0 {
		return
	}
	msg := "the exports agree again; resolved: " + strings.Join(resolved, ", ")
	if len(now.list) > 0 {
		remain := make([]string, 0, len(now.list))
		for _, cf := range now.list {
			remain = append(remain, string(cf.Reason))
		}
		msg = fmt.Sprintf("resolved: %s; still conflicting: %s", strings.Join(resolved, ", "), strings.Join(remain, ", "))
	}
	c.recorder.Event(ref, corev1.EventTypeNormal, ReasonConflictResolved, msg)
	klog.InfoS("Export conflicts resolved", "key", key.String(), "resolved", resolved, "remaining", len(now.list))
}

// Event reasons on a ServiceImport whose exports disagree (see
// endpoints.Conflict), and no longer do.
const (
	ReasonExportConflict   = "ExportConflict"
	ReasonConflictResolved = "ConflictResolved"
)
