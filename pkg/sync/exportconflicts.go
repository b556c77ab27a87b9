package sync

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// Event reasons on a ServiceImport whose exports disagree (see
// endpoints.Conflict), and no longer do.
const (
	ReasonExportConflict   = "ExportConflict"
	ReasonConflictResolved = "ConflictResolved"
)

func sameConflict(a, b endpoints.Conflict) bool {
	return a.Reason == b.Reason && a.Message == b.Message && slices.Equal(a.Clusters, b.Clusters)
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
