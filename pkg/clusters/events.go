package clusters

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// eventf records an Event on a registration Secret or ClusterProfile while
// this replica leads; static members have none.
func (r *Registry) eventf(ref *corev1.ObjectReference, eventType, reason, format string, args ...interface{}) {
	if ref != nil && r.leading() {
		r.recorder.Eventf(ref, eventType, reason, format, args...)
	}
}

// connEventf records an Event about a member's connection. With sharding,
// the replica that runs the connection records it, leader or not.
func (r *Registry) connEventf(ref *corev1.ObjectReference, eventType, reason, format string, args ...interface{}) {
	if ref != nil && (r.opts.Wanted != nil || r.leading()) {
		r.recorder.Eventf(ref, eventType, reason, format, args...)
	}
}

// warn logs a problem with a registration and records it as a warning
// Event while this replica leads; ReportState repeats it when a standby
// starts leading.
func (r *Registry) warn(ref *corev1.ObjectReference, reason, format string, args ...interface{}) {
	msg := fmt.Sprintf(format, args...)
	r.reject(ref, reason, msg)
	r.eventf(ref, corev1.EventTypeWarning, reason, "%s", msg)
	klog.InfoS("Member registration rejected", "kind", ref.Kind, "object", klog.KRef(ref.Namespace, ref.Name), "reason", reason, "message", msg)
}

// reject records a warning about a registration for ReportState.
func (r *Registry) reject(ref *corev1.ObjectReference, reason, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := refKey(ref)
	r.rejections[k] = append(r.rejections[k], rejection{ref: ref, reason: reason, message: msg})
}

// ReportState records, once, the state of every registration as this
// replica sees it. The daemon calls it when the replica starts leading: as
// a standby it recorded nothing, and a replica contends only once its
// members synced, so without it the first leader would never say that its
// members connected. A synced member gets MemberConnected, one that missed
// its sync timeout MemberSyncTimeout, an unreachable one MemberUnreachable,
// and a Secret or ClusterProfile that was refused its warnings again. After
// a takeover these repeat what the previous leader said: each leader
// reports the connections it serves the hub from.
func (r *Registry) ReportState() {
	if !r.leading() {
		return
	}
	type event struct {
		ref                    *corev1.ObjectReference
		eventType, reason, msg string
	}
	var out []event
	r.mu.RLock()
	for _, name := range r.namesLocked() {
		m := r.members[name]
		if m.ref == nil {
			continue
		}
		c := m.active
		if c == nil {
			continue // its registration's warnings follow
		}
		switch {
		case c.HasSynced():
			out = append(out, event{m.ref, corev1.EventTypeNormal, ReasonConnected,
				fmt.Sprintf("member %q connected and synced; this replica now leads", name)})
		case m.timedOut:
			cause := ""
			if f := c.Failure(); f != nil {
				cause = fmt.Sprintf(" (%s: %s)", f.Class, f.Message)
			}
			out = append(out, event{m.ref, corev1.EventTypeWarning, ReasonSyncTimeout,
				fmt.Sprintf("member %q did not sync within %s%s; still trying, its last-known hub objects are kept", name, r.opts.SyncTimeout, cause)})
		}
		if _, down := c.UnreachableSince(); down {
			class, why := unreachableWhy(c)
			out = append(out, event{m.ref, corev1.EventTypeWarning, class.Reason(),
				fmt.Sprintf("member %q %s; its last-known endpoints are kept unless an unreachable policy applies", name, why)})
		}
	}
	keys := make([]string, 0, len(r.rejections))
	for k := range r.rejections {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, rj := range r.rejections[k] {
			out = append(out, event{rj.ref, corev1.EventTypeWarning, rj.reason, rj.message})
		}
	}
	r.mu.RUnlock()
	for _, e := range out {
		r.recorder.Event(e.ref, e.eventType, e.reason, e.msg)
	}
}
