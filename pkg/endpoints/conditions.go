package endpoints

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// ConditionConflict is the Conflict condition type on ServiceImports; the
// mcs-api names it only for ServiceExports.
const ConditionConflict = string(mcsv1beta1.ServiceExportConditionConflict)

// ExportConditions returns the conditions a member's ServiceExport should
// carry. svc is the member Service it exports (nil when there is none); imp
// is the hub's ServiceImport of the service (nil when there is none) and
// cluster the member's name. The export is Ready once the import lists the
// cluster, and its Conflict condition is the import's: as KEP-1645 asks,
// every export of a conflicted service gets Conflict=True, naming the
// clusters that disagree and the one whose value won.
func ExportConditions(svc *corev1.Service, imp *mcsv1beta1.ServiceImport, cluster string, generation int64) []metav1.Condition {
	cond := func(t mcsv1beta1.ServiceExportConditionType, s metav1.ConditionStatus, r mcsv1beta1.ServiceExportConditionReason, msg string) metav1.Condition {
		return metav1.Condition{Type: string(t), Status: s, Reason: string(r), Message: msg, ObservedGeneration: generation}
	}
	switch {
	case svc == nil:
		return []metav1.Condition{
			cond(mcsv1beta1.ServiceExportConditionValid, metav1.ConditionFalse, mcsv1beta1.ServiceExportReasonNoService, "the exported Service does not exist"),
			cond(mcsv1beta1.ServiceExportConditionReady, metav1.ConditionFalse, mcsv1beta1.ServiceExportReasonPending, "waiting for the Service"),
		}
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		return []metav1.Condition{
			cond(mcsv1beta1.ServiceExportConditionValid, metav1.ConditionFalse, mcsv1beta1.ServiceExportReasonInvalidServiceType, "ExternalName Services cannot be exported"),
			cond(mcsv1beta1.ServiceExportConditionReady, metav1.ConditionFalse, mcsv1beta1.ServiceExportReasonFailed, "the Service is not exportable"),
		}
	}
	valid := cond(mcsv1beta1.ServiceExportConditionValid, metav1.ConditionTrue, mcsv1beta1.ServiceExportReasonValid, "the Service is exported")
	conflict := importConflict(imp)
	if conflict == nil || !slices.ContainsFunc(imp.Status.Clusters, func(s mcsv1beta1.ClusterStatus) bool { return s.Cluster == cluster }) {
		return []metav1.Condition{valid,
			cond(mcsv1beta1.ServiceExportConditionReady, metav1.ConditionFalse, mcsv1beta1.ServiceExportReasonPending, "waiting for the ServiceImport in the hub"),
		}
	}
	c := *conflict
	c.ObservedGeneration, c.LastTransitionTime = generation, metav1.Time{}
	return []metav1.Condition{valid,
		cond(mcsv1beta1.ServiceExportConditionReady, metav1.ConditionTrue, mcsv1beta1.ServiceExportReasonReady, "the Service is imported into the hub"),
		c,
	}
}

// ReasonRefused is the Valid condition's reason on a ServiceExport the
// daemon refuses to import.
const ReasonRefused = "Refused"

// RefusedExportConditions returns the conditions of a ServiceExport the
// daemon refuses to import although its Service exists (the member is past
// its bounds, or it is default/kubernetes); why says so.
func RefusedExportConditions(why string, generation int64) []metav1.Condition {
	return []metav1.Condition{
		{Type: string(mcsv1beta1.ServiceExportConditionValid), Status: metav1.ConditionFalse, Reason: ReasonRefused, Message: why, ObservedGeneration: generation},
		{Type: string(mcsv1beta1.ServiceExportConditionReady), Status: metav1.ConditionFalse, Reason: string(mcsv1beta1.ServiceExportReasonFailed), Message: why, ObservedGeneration: generation},
	}
}

// importConflict returns the Conflict condition of imp, or nil.
func importConflict(imp *mcsv1beta1.ServiceImport) *metav1.Condition {
	if imp == nil {
		return nil
	}
	return meta.FindStatusCondition(imp.Status.Conditions, ConditionConflict)
}

// ImportConditions returns the conditions of a ServiceImport: Ready, and a
// Conflict condition matching its exports'.
func ImportConditions(conflicts []Conflict, generation int64) []metav1.Condition {
	return []metav1.Condition{
		{Type: string(mcsv1beta1.ServiceImportConditionReady), Status: metav1.ConditionTrue, Reason: string(mcsv1beta1.ServiceImportReasonReady),
			Message: "the import and its derived Service are in place", ObservedGeneration: generation},
		conflictCondition(conflicts, generation),
	}
}

func conflictCondition(conflicts []Conflict, generation int64) metav1.Condition {
	if len(conflicts) == 0 {
		return metav1.Condition{Type: ConditionConflict, Status: metav1.ConditionFalse,
			Reason: string(mcsv1beta1.ServiceExportReasonNoConflicts), Message: "all exports agree", ObservedGeneration: generation}
	}
	// Several reasons are joined by commas, as the mcs-api allows.
	reasons := make([]string, 0, len(conflicts))
	msgs := make([]string, 0, len(conflicts))
	for _, c := range conflicts {
		reasons = append(reasons, string(c.Reason))
		msgs = append(msgs, fmt.Sprintf("%s: %s", c.Reason, c.Message))
	}
	return metav1.Condition{Type: ConditionConflict, Status: metav1.ConditionTrue,
		Reason: strings.Join(reasons, ","), Message: strings.Join(msgs, "; "), ObservedGeneration: generation}
}

// SetConditions returns live with want applied and whether anything
// changed. A condition's transition time moves only when its status does,
// so an unchanged state never rewrites the object; conditions of other types
// are kept. live is not modified.
func SetConditions(live []metav1.Condition, want []metav1.Condition) ([]metav1.Condition, bool) {
	out := slices.Clone(live)
	for _, c := range want {
		meta.SetStatusCondition(&out, c)
	}
	return out, !apiequality.Semantic.DeepEqual(out, live)
}
