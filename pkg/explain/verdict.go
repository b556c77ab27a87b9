package explain

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// verdict is the one plain sentence of a member's row.
func verdict(in Input, m Member, record *endpoints.Export, merged *endpoints.ImportResult, down bool, since time.Time, cause string) string {
	ns := in.Namespace
	if !in.Policy.Export.NamespaceSelected(ns) {
		if in.Policy.Export.Include.Len() > 0 && !in.Policy.Export.Include.Has(ns) {
			return fmt.Sprintf("not exported: namespace %s is not in --include-namespaces", ns)
		}
		if ns == in.Policy.Export.Own && !in.Policy.Export.Exclude.Has(ns) {
			return fmt.Sprintf("not exported: namespace %s is the daemon's own (--namespace); list it in --include-namespaces to export from it", ns)
		}
		return fmt.Sprintf("not exported: namespace %s is excluded by --exclude-namespaces", ns)
	}
	if down {
		return staleVerdict(in, m, since, cause)
	}
	if m.Read && m.ReadError == "" {
		if v := memberVerdict(in.Policy, m); v != "" {
			return v
		}
	} else if m.Read {
		if record == nil {
			return "unknown: the member could not be read (" + m.ReadError + ") and the hub holds nothing from it"
		}
	}
	if !in.HubNamespace && !in.Policy.CreateNamespaces {
		return fmt.Sprintf("not imported: hub namespace %s does not exist (start the daemon with --create-namespaces or create it)", ns)
	}
	if in.Import != nil && in.Import.Labels[endpoints.LabelManagedBy] != endpoints.ManagedByValue {
		return fmt.Sprintf("not imported: the hub's ServiceImport %s/%s is not managed by endpoint-aggregator; it is left alone", ns, in.Name)
	}
	if m.SyncError != "" {
		return "failing: " + m.SyncError
	}
	if record == nil {
		return "pending: the hub holds no slices of this cluster yet (is the daemon running, and leading?)"
	}
	if in.Import == nil || !slices.ContainsFunc(in.Import.Status.Clusters, func(c mcsv1beta1.ClusterStatus) bool { return c.Cluster == m.Name }) {
		return "pending: the ServiceImport does not list this cluster yet"
	}
	if merged != nil {
		if v := conflictVerdict(m.Name, record, merged); v != "" {
			return v
		}
	}
	if m.HubServiceTaken {
		name, _ := endpoints.PerClusterName(in.Name, m.Name)
		return fmt.Sprintf("imported, but the hub Service %s/%s is not managed by endpoint-aggregator: no per-cluster Service for this cluster", ns, name)
	}
	n, ready := 0, 0
	for _, s := range m.HubSlices {
		for _, ep := range s.Endpoints {
			n++
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				ready++
			}
		}
	}
	v := fmt.Sprintf("imported: %d endpoint(s) in the hub, %d ready", n, ready)
	if m.Read && m.ReadError == "" && m.Service != nil {
		if _, _, refused := countEndpoints(in.Policy, m); refused.Total() > 0 {
			v += fmt.Sprintf("; %d refused: %s", refused.Total(), refused)
		}
	}
	return v
}

// memberVerdict explains a member Service that is not exported, or "".
func memberVerdict(p Policy, m Member) string {
	svc := m.Service
	switch {
	case svc == nil && m.Export != nil:
		return "not exported: the ServiceExport has no Service of that name in this cluster"
	case svc == nil:
		return "not exported: no such Service in this cluster"
	case svc.Namespace == metav1.NamespaceDefault && svc.Name == "kubernetes":
		return "not exported: default/kubernetes is the cluster's API server, never exported"
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		return "not exported: ExternalName Services cannot be exported"
	case svc.Labels[endpoints.LabelManagedBy] == endpoints.ManagedByValue:
		return "not exported: the Service was written by endpoint-aggregator, whose output is never exported again"
	}
	switch p.Export.Mode {
	case easync.ExportAnnotation:
		if svc.Annotations[easync.AnnotationExport] != "true" {
			return fmt.Sprintf("not exported: the Service lacks the annotation %s: \"true\" (--export-mode=annotation)", easync.AnnotationExport)
		}
	case easync.ExportAll:
	default:
		if m.Export == nil && exportVersion(m) == lifecycle.ExportNotServed {
			return "not exported: ServiceExport not served: the member has no ServiceExport CRD (--export-mode=serviceexport)"
		}
		if m.Export == nil {
			return fmt.Sprintf("not exported: no ServiceExport %s/%s in this cluster (--export-mode=serviceexport)", svc.Namespace, svc.Name)
		}
	}
	return ""
}

// staleVerdict explains an unreachable member by its policy, and why it is
// unreachable when the daemon said.
func staleVerdict(in Input, m Member, since time.Time, cause string) string {
	grace, withdraw := in.Policy.UnreachableGrace, in.Policy.UnreachableWithdraw
	if m.UnreachableGrace != nil {
		grace = *m.UnreachableGrace
	}
	if m.UnreachableWithdraw != nil {
		withdraw = *m.UnreachableWithdraw
	}
	age := in.Now.Sub(since).Round(time.Second)
	down := "stale: member unreachable for " + age.String()
	if cause != "" {
		down += " (" + cause + ")"
	}
	switch {
	case withdraw > 0 && age >= withdraw:
		return fmt.Sprintf("%s; its endpoints are withdrawn (policy withdraw after %s)", down, withdraw)
	case grace > 0 && age >= grace:
		return fmt.Sprintf("%s; its endpoints are kept, marked not ready (policy not-ready after %s)", down, grace)
	}
	return down + "; its endpoints are kept (policy keep)"
}

// conflictVerdict explains a conflict this member takes part in, or "".
func conflictVerdict(cluster string, record *endpoints.Export, merged *endpoints.ImportResult) string {
	var parts []string
	for _, cf := range merged.Conflicts {
		if !slices.Contains(cf.Clusters, cluster) {
			continue
		}
		if cf.Reason == endpoints.PortConflict {
			if p := portDetail(record, merged.Import); p != "" {
				parts = append(parts, p)
				continue
			}
		}
		parts = append(parts, string(cf.Reason)+": "+cf.Message)
	}
	if len(parts) == 0 {
		if len(merged.Conflicts) > 0 {
			return "imported, in conflict (its values are the ones used): " + conflictSummary(merged.Conflicts)
		}
		return ""
	}
	return "conflict: " + strings.Join(parts, "; ")
}

// portDetail names the ports of record that differ from the import's.
func portDetail(record *endpoints.Export, imp *mcsv1beta1.ServiceImport) string {
	var out []string
	// The daemon's own rule: the ports this export lost to another.
	lost := endpoints.PortClaims(imp.Spec.Ports).Lost(record.Service)
	for _, p := range record.Service.Spec.Ports {
		if !lost[p.Name] {
			continue
		}
		for _, ip := range imp.Spec.Ports {
			if ip.Name != p.Name {
				continue
			}
			here, there := fmt.Sprintf("%d/%s", p.Port, p.Protocol), fmt.Sprintf("%d/%s", ip.Port, ip.Protocol)
			if here == there { // only the appProtocol differs
				here, there = "appProtocol "+ptr.Deref(p.AppProtocol, "(none)"), "appProtocol "+ptr.Deref(ip.AppProtocol, "(none)")
			}
			out = append(out, fmt.Sprintf("port %s is %s here and %s in the import, from the oldest export, so this cluster's MCS slices leave it out",
				nameOr(p.Name), here, there))
		}
	}
	var missing []string
	for _, ip := range imp.Spec.Ports {
		if !slices.ContainsFunc(record.Service.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ip.Name }) {
			missing = append(missing, portString(ip.Name, ip.Port, ip.Protocol))
		}
	}
	if len(missing) > 0 {
		out = append(out, "this cluster does not export port(s) "+strings.Join(missing, ", ")+" that other clusters do")
	}
	return strings.Join(out, "; ")
}

func nameOr(name string) string {
	if name == "" {
		return "(unnamed)"
	}
	return name
}

func conflictSummary(cs []endpoints.Conflict) string {
	var reasons []string
	for _, c := range cs {
		reasons = append(reasons, fmt.Sprintf("%s (%s)", c.Reason, strings.Join(c.Clusters, ", ")))
	}
	return strings.Join(reasons, ", ")
}

func importRow(imp *mcsv1beta1.ServiceImport, derived *corev1.Service) *ImportRow {
	row := &ImportRow{Type: string(imp.Spec.Type), IPs: imp.Spec.IPs, Derived: "missing"}
	for _, p := range imp.Spec.Ports {
		row.Ports = append(row.Ports, portString(p.Name, p.Port, p.Protocol))
	}
	for _, c := range imp.Status.Clusters {
		row.Clusters = append(row.Clusters, c.Cluster)
	}
	for _, c := range imp.Status.Conditions {
		s := fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Reason)
		if c.Type == endpoints.ConditionConflict && c.Status == metav1.ConditionTrue {
			s += ": " + c.Message
		}
		row.Conditions = append(row.Conditions, s)
	}
	if imp.Labels[endpoints.LabelManagedBy] != endpoints.ManagedByValue {
		row.Derived = "not ours: this ServiceImport is not managed by endpoint-aggregator"
		return row
	}
	if derived != nil {
		row.Derived = derived.Name
		if len(derived.Spec.ClusterIPs) > 0 {
			row.Derived += " " + strings.Join(derived.Spec.ClusterIPs, ",")
		}
	}
	return row
}

// importMissing says why there is no ServiceImport.
func importMissing(in Input, records, unreadable int) string {
	switch {
	case unreadable > 0:
		return "the daemon's merge waits: an export record in the hub cannot be read (see below)"
	case !in.Policy.Export.NamespaceSelected(in.Namespace):
		return "the namespace is not exported"
	case !in.HubNamespace && !in.Policy.CreateNamespaces:
		return fmt.Sprintf("hub namespace %s does not exist", in.Namespace)
	case records == 0:
		return "no cluster exports it (no export records in the hub)"
	}
	return "the daemon has not created it yet"
}
