package app

import (
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// memberFailureReason reports whether an Event reason says a member fails
// for a classified cause (MemberUnauthorized, MemberTimeout, ...) or an
// unclassified one (MemberUnreachable).
func memberFailureReason(reason string) bool {
	_, ok := clusters.ClassOfReason(reason)
	return ok
}

// failureError is the LAST ERROR of a member failure Event: its cause
// first, so that a cut cell still says it.
func failureError(e *corev1.Event) string {
	if c, ok := clusters.ClassOfReason(e.Reason); ok && c != clusters.ClassOther {
		return string(c) + ": " + e.Message
	}
	return e.Message
}

// leaseHealth is the daemon's view of a member as its Lease publishes it.
type leaseHealth struct {
	// Reachable is "true" or "false"; "" when the Lease says nothing.
	Reachable string
	Since     *metav1.Time
	// Reason and Message say why the member fails; "" when it does not.
	Reason, Message string
}

// leaseHealthOf reads the annotations easync.runMemberLeases writes.
func leaseHealthOf(l *coordinationv1.Lease) leaseHealth {
	if l == nil {
		return leaseHealth{}
	}
	a := l.Annotations
	h := leaseHealth{Reachable: a[easync.AnnotationReachable], Reason: a[easync.AnnotationErrorReason], Message: a[easync.AnnotationErrorMessage]}
	if t, err := time.Parse(time.RFC3339, a[easync.AnnotationReachableSince]); err == nil {
		h.Since = &metav1.Time{Time: t}
	}
	return h
}

// applyLeaseHealth lets the daemon's published view of the member decide
// CONNECTED and LAST ERROR, over Events and the Lease's renewal: it is
// written as soon as the daemon sees a change, before the Lease could
// lapse. A member it reports reachable and not failing has no LAST ERROR
// from an earlier failure Event.
func applyLeaseHealth(r *memberStatus, l *coordinationv1.Lease) {
	h := leaseHealthOf(l)
	switch h.Reachable {
	case "false":
		r.Connected = statusFalse
		r.UnreachableSince = h.Since
	case "true":
	default:
		return
	}
	r.Cause = h.Reason
	r.ServiceExport = l.Annotations[easync.AnnotationServiceExportVersion]
	r.AboutID, r.IDSource = l.Annotations[easync.AnnotationAboutID], "registration"
	if r.AboutID == r.Name {
		r.IDSource = "registration, About API agrees"
	}
	switch {
	case h.Reason != "":
		r.LastError = h.Reason + ": " + h.Message
	case memberFailureReason(r.errReason) && h.Reachable == "true" && (h.Since == nil || r.errAt.Before(h.Since.Time)):
		r.LastError = "" // the failure the Event told of is over
	}
}

// syncFailureStale is the age past which a SyncFailed Event no longer
// says a sync fails now: the daemon retries a failing sync at least every
// 5 minutes and says the failure again when it is 5 minutes old, so a
// failure still going on is never older than about 10. An older one was
// left behind by a daemon that restarted before the sync succeeded.
const syncFailureStale = 15 * time.Minute

// failingSyncs returns, by cluster, the message of the newest SyncFailed
// Event among events (on services' ServiceImports) of a service whose
// sync of that cluster has no SyncRecovered after it, and is not stale at
// now. The daemon's messages start with "cluster NAME: ".
func failingSyncs(events []corev1.Event, now time.Time) map[string]string {
	type clusterService struct{ cluster, namespace, name string }
	newest := map[clusterService]*corev1.Event{}
	for i := range events {
		e := &events[i]
		if e.Reason != easync.ReasonSyncFailed && e.Reason != easync.ReasonSyncRecovered {
			continue
		}
		rest, ok := strings.CutPrefix(e.Message, "cluster ")
		cluster, _, found := strings.Cut(rest, ": ")
		if !ok || !found {
			continue
		}
		k := clusterService{cluster, e.InvolvedObject.Namespace, e.InvolvedObject.Name}
		if n := newest[k]; n == nil || eventBefore(n, e) {
			newest[k] = e
		}
	}
	failing := map[string]*corev1.Event{}
	for k, e := range newest {
		if e.Reason != easync.ReasonSyncFailed || now.Sub(eventTime(e)) > syncFailureStale {
			continue
		}
		if n := failing[k.cluster]; n == nil || eventBefore(n, e) {
			failing[k.cluster] = e
		}
	}
	out := make(map[string]string, len(failing))
	for cluster, e := range failing {
		out[cluster] = e.Message
	}
	return out
}
