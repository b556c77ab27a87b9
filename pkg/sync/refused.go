package sync

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// Event reasons on a ServiceImport for the endpoints a member may not put
// into the hub.
const (
	ReasonEndpointsRefused  = "EndpointsRefused"
	ReasonEndpointsAccepted = "EndpointsAccepted"
	// A member's export refused, or admitted again, under the per-member
	// bounds.
	ReasonExportRefused  = "ExportRefused"
	ReasonExportAdmitted = "ExportAdmitted"
	// Fields of a member's Service or ServiceExport the hub would refuse,
	// removed before its hub objects were built.
	ReasonInvalidExport = "InvalidExport"
)

// reportRefused says, when what a member key refuses changed, what it
// refuses now and why: an Event on the service's ServiceImport (whether or
// not the hub has it: it is the object an operator looks at for the
// service) and a log line. The gauge refused_member_endpoints counts them.
func (c *Controller) reportRefused(key Key, r *endpoints.Refusals) {
	ref := importRef(key)
	if r == nil || r.Total() == 0 {
		c.recorder.Eventf(ref, corev1.EventTypeNormal, ReasonEndpointsAccepted,
			"cluster %s: no endpoint of its export is refused any more", key.Cluster)
		klog.InfoS("Member endpoints no longer refused", "cluster", key.Cluster, "key", key.String())
		return
	}
	msg := refusalMessage(key.Cluster, r)
	c.recorder.Event(ref, corev1.EventTypeWarning, ReasonEndpointsRefused, msg)
	klog.InfoS("Refused member endpoints", "cluster", key.Cluster, "key", key.String(), "message", msg)
}

// refusalMessage says how many endpoints of a cluster's export were
// refused, why, and which.
func refusalMessage(cluster string, r *endpoints.Refusals) string {
	return fmt.Sprintf("cluster %s: %d endpoint(s) of its export refused, not aggregated: %s", cluster, r.Total(), r)
}

// reportAdmission says that a member key's export was refused under its
// member's bounds, or admitted again, on the service's ServiceImport.
func (c *Controller) reportAdmission(key Key, admitted bool, why string) {
	ref := importRef(key)
	if admitted {
		c.recorder.Eventf(ref, corev1.EventTypeNormal, ReasonExportAdmitted, "cluster %s: its export is within the member's bounds again and imported", key.Cluster)
		klog.InfoS("Member export admitted", "cluster", key.Cluster, "key", key.String())
		return
	}
	c.recorder.Event(ref, corev1.EventTypeWarning, ReasonExportRefused, why)
	klog.InfoS("Member export refused", "cluster", key.Cluster, "key", key.String(), "message", why)
}

// reportInvalidExport says, when it changed, what was removed from a
// member's Service and export before its hub objects were built.
func (c *Controller) reportInvalidExport(key Key, problems []string) {
	if len(problems) == 0 {
		klog.InfoS("Member export valid again", "cluster", key.Cluster, "key", key.String())
		return
	}
	ref := importRef(key)
	msg := fmt.Sprintf("cluster %s: its export of %s/%s has what the hub would refuse; ignored: %s", key.Cluster, key.Namespace, key.Name, strings.Join(problems, "; "))
	c.recorder.Event(ref, corev1.EventTypeWarning, ReasonInvalidExport, msg)
	klog.InfoS("Invalid member export", "cluster", key.Cluster, "key", key.String(), "message", msg)
}

// importRef is the ServiceImport of a key's service, the object Events
// about the service go on (whether or not the hub has it).
func importRef(key Key) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		Kind: "ServiceImport", APIVersion: mcsv1beta1.GroupVersion.String(),
		Namespace: key.Namespace, Name: key.Name,
	}
}
