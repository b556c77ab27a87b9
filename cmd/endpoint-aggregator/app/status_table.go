package app

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/shard"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// Condition values of CONNECTED and SYNCED.
const (
	statusTrue    = string(metav1.ConditionTrue)
	statusFalse   = string(metav1.ConditionFalse)
	statusUnknown = string(metav1.ConditionUnknown)
)

// statusInput is what status lists from the hub.
type statusInput struct {
	Namespace string
	// Secrets are the registration Secrets in Namespace.
	Secrets []corev1.Secret
	// Events are the Events in Namespace about Secrets.
	Events []corev1.Event
	// ImportEvents are the Events about ServiceImports, in every
	// namespace: a member's failing syncs are told there.
	ImportEvents []corev1.Event
	// Leases are the Leases in Namespace.
	Leases []coordinationv1.Lease
	// ServiceImports, Services and EndpointSlices are the daemon's outputs.
	ServiceImports []mcsv1beta1.ServiceImport
	Services       []corev1.Service
	EndpointSlices []discoveryv1.EndpointSlice
}

// memberStatus is one row of status.
type memberStatus struct {
	Name string `json:"name"`
	// Secret is the registration Secret; empty for a cluster that has hub
	// objects or a Lease but no Secret (the hub itself with --hub-is-member,
	// or a member whose objects are being withdrawn).
	Secret string `json:"secret,omitempty"`
	// Connected and Synced are True, False or Unknown.
	Connected      string `json:"connected"`
	Synced         string `json:"synced"`
	Services       int    `json:"services"`
	Endpoints      int    `json:"endpoints"`
	ReadyEndpoints int    `json:"readyEndpoints"`
	LastError      string `json:"lastError,omitempty"`
	// LastEvent is the latest Event about the Secret the daemon recorded.
	LastEvent *statusEvent `json:"lastEvent,omitempty"`
	// LeaseRenewTime is the last renewal of the member's Lease, if any.
	LeaseRenewTime *metav1.Time `json:"leaseRenewTime,omitempty"`
	// CreationTimestamp is the Secret's.
	CreationTimestamp *metav1.Time `json:"creationTimestamp,omitempty"`
	// Cause classifies why the member fails now, as the daemon publishes
	// it on the member's Lease (Unauthorized, Timeout, ...); since
	// UnreachableSince while it is unreachable.
	Cause            string       `json:"cause,omitempty"`
	UnreachableSince *metav1.Time `json:"unreachableSince,omitempty"`
	// AboutID is the member's own cluster id (its About API
	// ClusterProperty cluster.clusterset.k8s.io) as the daemon last read
	// it; "" when it names none. IDSource says where the member's name
	// comes from: "registration", or "registration, About API agrees".
	AboutID  string `json:"aboutID,omitempty"`
	IDSource string `json:"idSource,omitempty"`
	// ServiceExport is the version in which the daemon reads the member's
	// ServiceExports (v1beta1, v1alpha1), or "none" when the member
	// serves none; "" when the daemon does not say.
	ServiceExport string `json:"serviceExport,omitempty"`
	// Conflicts are the daemon's ServiceImports of the member's exports
	// whose exports conflict (Conflict=True), sorted.
	Conflicts []statusConflict `json:"conflicts,omitempty"`
	// errReason is the reason of the Event LastError comes from, errAt its time.
	errReason string
	errAt     time.Time
	// Who writes the member's hub objects, with --shard-members.
	ownership `json:",inline"`
}

// ownership is who writes a member's hub objects when replicas share the
// members: the replica holding its fence (Owner), and the one the leader
// gives it to (AssignedTo). OwnerAlive says whether the owner's peer Lease
// was renewed within its duration.
type ownership struct {
	Owner      string `json:"owner,omitempty"`
	AssignedTo string `json:"assignedTo,omitempty"`
	OwnerAlive *bool  `json:"ownerAlive,omitempty"`
	// Sharded: the member has a fence Lease.
	Sharded bool `json:"-"`
}

// fenceOwnership reads the ownership of each member that has a fence Lease
// from the fence and peer Leases.
func fenceOwnership(leases []coordinationv1.Lease, now time.Time) map[string]ownership {
	peers := map[string]*coordinationv1.Lease{} // by holder identity
	for i := range leases {
		if l := &leases[i]; l.Labels[shard.LabelRole] == shard.RolePeer && l.Spec.HolderIdentity != nil {
			peers[*l.Spec.HolderIdentity] = l
		}
	}
	out := map[string]ownership{}
	for i := range leases {
		l := &leases[i]
		if l.Labels[shard.LabelRole] != shard.RoleFence {
			continue
		}
		o := ownership{Sharded: true, AssignedTo: l.Annotations[shard.AnnotationAssignedTo]}
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			o.Owner = *l.Spec.HolderIdentity
			alive := leaseLive(peers[o.Owner], now)
			o.OwnerAlive = &alive
		}
		out[l.Labels[shard.LabelFenceCluster]] = o
	}
	return out
}

// statusConflict is a ServiceImport whose exports conflict: its
// Conflict condition's reason(s) and message.
type statusConflict struct {
	Import  string `json:"import"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// importConflicts returns, for each cluster, the imports that list it and
// whose exports conflict, sorted.
func importConflicts(imports []mcsv1beta1.ServiceImport) map[string][]statusConflict {
	out := map[string][]statusConflict{}
	for i := range imports {
		imp := &imports[i]
		c := meta.FindStatusCondition(imp.Status.Conditions, endpoints.ConditionConflict)
		if c == nil || c.Status != metav1.ConditionTrue {
			continue
		}
		sc := statusConflict{Import: imp.Namespace + "/" + imp.Name, Reason: c.Reason, Message: c.Message}
		for _, cs := range imp.Status.Clusters {
			out[cs.Cluster] = append(out[cs.Cluster], sc)
		}
	}
	for _, list := range out {
		sort.Slice(list, func(i, j int) bool { return list[i].Import < list[j].Import })
	}
	return out
}

// conflictCell is the CONFLICT column: how many imports of the member's
// exports conflict, and which, why.
func conflictCell(list []statusConflict) string {
	if len(list) == 0 {
		return "<none>"
	}
	names := make([]string, 0, len(list))
	for _, c := range list {
		names = append(names, c.Import+" ("+c.Reason+")")
	}
	return statusCell(fmt.Sprintf("%d: %s", len(list), strings.Join(names, ", ")), 60)
}

type statusEvent struct {
	Type    string      `json:"type"`
	Reason  string      `json:"reason"`
	Message string      `json:"message"`
	Time    metav1.Time `json:"time"`
}

// statusReport is the -o json|yaml document.
type statusReport struct {
	Namespace string         `json:"namespace"`
	Members   []memberStatus `json:"members"`
}

// buildMemberStatuses derives one row per registration Secret, plus one per
// cluster that has hub objects or a Lease but no Secret, sorted by name.
//
// CONNECTED and SYNCED follow the latest Events the daemon recorded on the
// Secret: MemberConnected and MemberCredentialsRotated mean connected and
// synced; MemberSyncTimeout, InvalidClusterName, DuplicateClusterName and
// MemberRemoved mean neither; InvalidKubeconfig, KubeconfigRefused,
// MemberClientFailed and RotationRejected keep a previous connection (the
// daemon does) and are the LAST ERROR, as is every Warning;
// MemberUnreachable, the reasons that name a cause (MemberUnauthorized,
// MemberTimeout, ...; LAST ERROR starts with the cause) and MemberReachable
// switch CONNECTED only; a sync timeout after a cause keeps the cause as
// LAST ERROR. Events expire (one hour by default), so a long-connected
// member may have none: Unknown. A member Lease, when the daemon keeps one,
// decides CONNECTED: renewed within its duration means connected, unless
// the daemon published on it that the member is unreachable, which also
// gives LAST ERROR (see applyLeaseHealth).
//
// SERVICES counts the distinct member Services behind the daemon's
// ServiceImports (status.clusters) and per-cluster Services; ENDPOINTS sums
// the endpoints of its EndpointSlices per source cluster.
func buildMemberStatuses(now time.Time, in statusInput) []memberStatus {
	services := map[string]map[string]bool{} // cluster → namespace/name
	addService := func(cluster, ns, name string) {
		if cluster == "" {
			return
		}
		if services[cluster] == nil {
			services[cluster] = map[string]bool{}
		}
		services[cluster][ns+"/"+name] = true
	}
	for _, imp := range in.ServiceImports {
		for _, c := range imp.Status.Clusters {
			addService(c.Cluster, imp.Namespace, imp.Name)
		}
	}
	for _, svc := range in.Services {
		if name := svc.Labels[endpoints.LabelServiceName]; name != "" {
			addService(svc.Labels[endpoints.LabelSourceCluster], svc.Namespace, name)
		}
	}
	total, ready := map[string]int{}, map[string]int{}
	for _, s := range in.EndpointSlices {
		if s.Labels[discoveryv1.LabelManagedBy] != endpoints.SliceManagedByValue {
			continue
		}
		c := s.Labels[mcsv1beta1.LabelSourceCluster]
		if c == "" {
			continue
		}
		for _, ep := range s.Endpoints {
			total[c]++
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				ready[c]++
			}
		}
	}
	leases := map[string]*coordinationv1.Lease{}
	for i := range in.Leases {
		if c, ok := strings.CutPrefix(in.Leases[i].Name, easync.MemberLeasePrefix); ok && c != "" {
			leases[c] = &in.Leases[i]
		}
	}

	owners := fenceOwnership(in.Leases, now)
	conflicts := importConflicts(in.ServiceImports)
	failing := failingSyncs(in.ImportEvents, now)

	var rows []memberStatus
	seen := map[string]bool{}
	for i := range in.Secrets {
		s := &in.Secrets[i]
		name := clusters.ClusterName(s)
		seen[name] = true
		row := memberStatus{Name: name, Secret: s.Name, Connected: statusUnknown, Synced: statusUnknown, CreationTimestamp: s.CreationTimestamp.DeepCopy()}
		applyEvents(&row, s, in.Events)
		rows = append(rows, row)
	}
	orphans := map[string]bool{}
	for c := range services {
		orphans[c] = true
	}
	for c := range total {
		orphans[c] = true
	}
	for c := range leases {
		orphans[c] = true
	}
	for c := range orphans {
		if !seen[c] {
			rows = append(rows, memberStatus{Name: c, Connected: statusUnknown, Synced: statusUnknown})
		}
	}
	for i := range rows {
		r := &rows[i]
		r.ownership = owners[r.Name]
		r.Services = len(services[r.Name])
		r.Endpoints, r.ReadyEndpoints = total[r.Name], ready[r.Name]
		r.Conflicts = conflicts[r.Name]
		if l := leases[r.Name]; l != nil && l.Spec.RenewTime != nil {
			renewed := l.Spec.RenewTime.Time
			r.LeaseRenewTime = &metav1.Time{Time: renewed}
			d := easync.DefaultMemberLeaseDuration
			if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
				d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
			}
			if now.Before(renewed.Add(d)) {
				r.Connected = statusTrue
				if r.Synced == statusUnknown {
					r.Synced = statusTrue // renewed only while its watches are healthy
				}
			} else {
				r.Connected = statusFalse
			}
		}
		applyLeaseHealth(r, leases[r.Name])
		if msg := failing[r.Name]; msg != "" && r.LastError == "" {
			// The member is read; its hub objects are not written.
			r.LastError = easync.ReasonSyncFailed + ": " + strings.TrimPrefix(msg, "cluster "+r.Name+": ")
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Name != rows[j].Name {
			return rows[i].Name < rows[j].Name
		}
		return rows[i].Secret < rows[j].Secret
	})
	return rows
}

// applyEvents folds the Events about s, oldest first, into row.
func applyEvents(row *memberStatus, s *corev1.Secret, events []corev1.Event) {
	var mine []corev1.Event
	for _, e := range events {
		o := e.InvolvedObject
		if o.Kind != "Secret" || o.Namespace != s.Namespace || o.Name != s.Name {
			continue
		}
		if o.UID != "" && s.UID != "" && o.UID != s.UID {
			continue // about an earlier Secret of the same name
		}
		if o.UID == "" && eventTime(&e).Before(s.CreationTimestamp.Time) {
			continue
		}
		mine = append(mine, e)
	}
	sort.SliceStable(mine, func(i, j int) bool { return eventBefore(&mine[i], &mine[j]) })
	errReason := "" // the Event LastError comes from
	setError := func(e *corev1.Event) { row.LastError, errReason, row.errAt = e.Message, e.Reason, eventTime(e) }
	defer func() { row.errReason = errReason }()
	for i := range mine {
		e := &mine[i]
		reason := e.Reason
		if memberFailureReason(reason) {
			reason = clusters.ReasonUnreachable // its class is in LAST ERROR
		}
		switch reason {
		case clusters.ReasonConnected, clusters.ReasonRotated:
			row.Connected, row.Synced, row.LastError, errReason = statusTrue, statusTrue, "", ""
		case clusters.ReasonSyncTimeout, clusters.ReasonInvalidName, clusters.ReasonDuplicateName:
			row.Connected, row.Synced = statusFalse, statusFalse
			if e.Reason != clusters.ReasonSyncTimeout || !memberFailureReason(errReason) {
				setError(e) // a timeout keeps the cause said before
			}
		case clusters.ReasonMemberRemoved:
			row.Connected, row.Synced = statusFalse, statusFalse
		case clusters.ReasonInvalidConfig, clusters.ReasonRefusedConfig, clusters.ReasonClientFailed:
			// The daemon keeps a previous connection, if there is one.
			if row.Connected == statusUnknown {
				row.Connected, row.Synced = statusFalse, statusFalse
			}
			setError(e)
		case clusters.ReasonRotationRejected:
			setError(e) // the previous connection stays
		case clusters.ReasonUnreachable:
			row.Connected = statusFalse // its caches, and hub objects, are kept
			setError(e)
			row.LastError = failureError(e)
		case clusters.ReasonReachable:
			row.Connected = statusTrue
			if memberFailureReason(errReason) {
				row.LastError, errReason = "", ""
			}
		default:
			if e.Type == corev1.EventTypeWarning {
				setError(e)
			}
		}
		row.LastEvent = &statusEvent{Type: e.Type, Reason: e.Reason, Message: e.Message, Time: metav1.Time{Time: eventTime(e)}}
	}
}

// eventTime is when an Event was last observed.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// eventBefore orders Events by time. Core Event timestamps have a one-second
// resolution, so ties go by resourceVersion, which the apiserver (etcd)
// assigns in write order.
func eventBefore(a, b *corev1.Event) bool {
	ta, tb := eventTime(a), eventTime(b)
	if !ta.Equal(tb) {
		return ta.Before(tb)
	}
	ra, errA := strconv.ParseUint(a.ResourceVersion, 10, 64)
	rb, errB := strconv.ParseUint(b.ResourceVersion, 10, 64)
	if errA == nil && errB == nil && ra != rb {
		return ra < rb
	}
	return a.Name < b.Name
}

// statusOutputs are the -o values.
var statusOutputs = []string{"table", "json", "yaml"}

// printMemberStatuses writes rows as a table, JSON or YAML.
func printMemberStatuses(w io.Writer, format, namespace string, rows []memberStatus, now time.Time) error {
	if rows == nil {
		rows = []memberStatus{}
	}
	if done, err := printStructured(w, format, statusReport{Namespace: namespace, Members: rows}); done {
		return err
	}
	switch format {
	case "table", "":
		sharded := false
		for _, r := range rows {
			sharded = sharded || r.Sharded
		}
		about := false   // some member says its own id: show where names come from
		exports := false // some member serves ServiceExports other than as v1beta1
		for _, r := range rows {
			about = about || r.AboutID != ""
			exports = exports || r.ServiceExport != "" && r.ServiceExport != string(clusters.ExportV1beta1)
		}
		tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
		owner := ""
		if sharded {
			owner = "OWNER\t"
		}
		if about {
			owner += "ID FROM\t"
		}
		if exports {
			owner += "SERVICEEXPORT\t"
		}
		fmt.Fprintln(tw, "NAME\tSECRET\t"+owner+"CONNECTED\tSYNCED\tSERVICES\tENDPOINTS\tCONFLICT\tLAST ERROR\tAGE")
		for _, r := range rows {
			secret, age := r.Secret, "<unknown>"
			if secret == "" {
				secret = "<none>"
			}
			if r.CreationTimestamp != nil && !r.CreationTimestamp.IsZero() {
				age = duration.HumanDuration(now.Sub(r.CreationTimestamp.Time))
			}
			lastErr := "<none>"
			if r.LastError != "" {
				lastErr = statusCell(r.LastError, 80)
			}
			if sharded {
				secret += "\t" + r.cell()
			}
			if about {
				secret += "\t" + idCell(r)
			}
			if exports {
				secret += "\t" + exportCell(r.ServiceExport)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", r.Name, secret, r.Connected, r.Synced, r.Services, r.Endpoints, conflictCell(r.Conflicts), lastErr, age)
		}
		return tw.Flush()
	}
	return fmt.Errorf("unknown output format %q (want one of %s)", format, strings.Join(statusOutputs, ", "))
}

// cell is the OWNER column: the fence holder, marked when its peer Lease
// lapsed or while the member is handed to another replica.
func (r ownership) cell() string {
	switch {
	case !r.Sharded:
		return "<n/a>"
	case r.Owner == "" && r.AssignedTo != "":
		return "<none> (to " + r.AssignedTo + ")"
	case r.Owner == "":
		return "<none>"
	case r.OwnerAlive != nil && !*r.OwnerAlive:
		return r.Owner + " (lapsed)"
	case r.AssignedTo != "" && r.AssignedTo != r.Owner:
		return r.Owner + " (to " + r.AssignedTo + ")"
	}
	return r.Owner
}

// leaseLive reports whether a Lease was renewed within its duration.
func leaseLive(l *coordinationv1.Lease, now time.Time) bool {
	if l == nil || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return false
	}
	return now.Before(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
}

// statusCell puts s on one line of at most n runes.
func statusCell(s string, n int) string {
	r := []rune(strings.Join(strings.Fields(s), " "))
	if len(r) <= n {
		return string(r)
	}
	return string(r[:n-3]) + "..."
}

// exportCell is the SERVICEEXPORT column: the version the daemon reads
// the member's ServiceExports in.
func exportCell(v string) string {
	switch v {
	case "":
		return "<unknown>"
	case lifecycle.ExportNotServed:
		return "ServiceExport not served"
	}
	return v
}

// idCell is the ID FROM column: where the member's name comes from, and
// the id it claims when that is another.
func idCell(r memberStatus) string {
	switch {
	case r.IDSource == "":
		return "<unknown>"
	case r.AboutID != "" && r.AboutID != r.Name:
		return "registration; About API says " + statusCell(r.AboutID, 40)
	}
	return r.IDSource
}
