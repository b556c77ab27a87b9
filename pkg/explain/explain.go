// Package explain answers "why is (or isn't) my service imported?" for one
// member Service: from what the hub holds and, where it could be read, what
// each member says, it builds one row per registered member with a plain
// verdict, and a summary of the ServiceImport. It is pure: the caller reads
// the clusters (cmd/endpoint-aggregator explain does), so tests can build any
// state.
package explain

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/addresses"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// Policy is the part of the daemon's configuration a verdict depends on:
// pass the flags the daemon runs with.
type Policy struct {
	Export           easync.ExportPolicy
	CreateNamespaces bool
	PerCluster       endpoints.PerClusterMode
	// UnreachableGrace and UnreachableWithdraw are the daemon's defaults;
	// a registration Secret may override them (Member).
	UnreachableGrace, UnreachableWithdraw time.Duration
	// Addresses is the daemon's address policy, the hub's Service ranges
	// included; a registration may narrow it (Member.AllowedEndpoints).
	Addresses addresses.Policy
	// PreferLocal is the daemon's default for "this cluster first";
	// HubCluster the hub's own member name, "" when it is not a member.
	PreferLocal bool
	HubCluster  string
}

// Input is what explain reads for one service Namespace/Name.
type Input struct {
	Namespace, Name string
	Policy          Policy
	Now             time.Time

	// HubNamespace says whether the hub has the namespace.
	HubNamespace bool
	// Import is the hub's ServiceImport of that name, Derived its derived
	// Service; either nil when absent.
	Import  *mcsv1beta1.ServiceImport
	Derived *corev1.Service
	// Members are the registered members, in any order.
	Members []Member
	// HubZones are the zones of the hub's Nodes, sorted, and
	// HubNodesWithoutZone names those without a zone label, where the hub
	// is a member: they cannot prefer its endpoints.
	HubZones            []string
	HubNodesWithoutZone []string
}

// Member is what explain read of one member, and of its part in the hub.
type Member struct {
	Name string
	// Secret is its registration Secret; "" for the hub itself or a
	// member registered by a ClusterProfile (namespace/name).
	Secret         string
	ClusterProfile string
	// ControlPlane is what the cluster manager says is wrong with the
	// member's control plane (its ClusterProfile), "" for nothing.
	ControlPlane string
	// Lease is its liveness Lease in the hub, or nil.
	Lease *coordinationv1.Lease
	// Owner is who writes its hub objects when replicas share the members:
	// the replica its fence Lease names, with a note ("handed to X",
	// "its peer Lease lapsed", "nobody"); "" without sharding.
	Owner string
	// UnreachableGrace and UnreachableWithdraw override the policy's when
	// set (the Secret's annotations).
	UnreachableGrace, UnreachableWithdraw *time.Duration
	// AllowedEndpoints are the registration's allowed ranges (see
	// lifecycle.Policy.AllowedEndpoints); nil for none.
	AllowedEndpoints []netip.Prefix

	// ReadError is why the member could not be read; "" when it was (or
	// reading members was not allowed: Read false).
	Read      bool
	ReadError string
	Service   *corev1.Service
	Export    *mcsv1beta1.ServiceExport
	// ExportVersion is the version in which the member serves
	// ServiceExports, lifecycle.ExportNotServed for none; "" when not
	// read (the member's Lease then says what the daemon reads).
	ExportVersion string
	// Slices are the projections of its EndpointSlices, as the daemon's
	// caches hold them (see endpoints.ProjectSlice).
	Slices []*endpoints.MemberSlice

	// What the hub holds from it: its per-cluster Service and Endpoints
	// (ours, or held by someone else when *Taken), and its MCS slices.
	HubService      *corev1.Service
	HubServiceTaken bool
	HubEndpoints    *corev1.Endpoints
	HubSlices       []*discoveryv1.EndpointSlice
	// SyncError is the daemon's word on writing this member's hub objects
	// of the service while that fails (its SyncFailed Event, with the
	// hub's answer, when no SyncRecovered came after); "" otherwise.
	SyncError string
}

// Report is the answer.
type Report struct {
	Service string      `json:"service"`
	Members []MemberRow `json:"members"`
	Import  *ImportRow  `json:"import,omitempty"`
	// ImportMissing says why there is no import, when there is none.
	ImportMissing string `json:"importMissing,omitempty"`
	// Locality says how the hub's kube-proxy picks among the import's
	// endpoints; nil without an import.
	Locality *Locality `json:"locality,omitempty"`
	// UnreadableRecords names the members whose export record in the hub
	// cannot be read ("cluster: error"): the daemon's merge waits for
	// their syncs to rewrite them, and the import does not change until then.
	UnreadableRecords []string `json:"unreadableRecords,omitempty"`
	// DaemonConfig says where the daemon's configuration the verdicts
	// assume came from; set by the caller.
	DaemonConfig string `json:"daemonConfig,omitempty"`
}

// MemberRow is one member's line.
type MemberRow struct {
	Cluster string `json:"cluster"`
	// Registration is what registers it: "Secret NAME", "ClusterProfile
	// NAMESPACE/NAME", or "hub" (--hub-is-member).
	Registration string `json:"registration"`
	Connected    string `json:"connected"` // True, False or Unknown
	Healthy      string `json:"healthy"`   // from the member Lease
	// Cause is why the daemon cannot reach the member, as it published
	// on the member's Lease ("Timeout: ..."); "" when it did not say.
	Cause string `json:"cause,omitempty"`
	// Service describes the member Service: "ClusterIP http:80/TCP", or
	// "not found", or "not read" (ReadError says why, if it was tried).
	Service   string `json:"service"`
	ReadError string `json:"readError,omitempty"`
	// Export is how the Service is exported ("ServiceExport", ...) with the
	// ServiceExport's conditions, or why it is not.
	Export     string   `json:"export"`
	Conditions []string `json:"conditions,omitempty"`
	// Endpoints in the member: ready, not ready, and refused (not
	// aggregated), with the refused ones by reason and the first few.
	Ready    int            `json:"ready"`
	NotReady int            `json:"notReady"`
	Dropped  int            `json:"dropped"`
	Refused  map[string]int `json:"refused,omitempty"`
	Refusals string         `json:"refusals,omitempty"`
	// Hub is what the hub holds from the member.
	Hub string `json:"hub"`
	// Owner is the replica that writes the member's hub objects, with
	// --shard-members.
	Owner   string `json:"owner,omitempty"`
	Verdict string `json:"verdict"`
	// Contradicted: the hub's objects contradict the verdict, which says
	// how; the daemon's configuration may not be the one assumed.
	Contradicted bool `json:"contradicted,omitempty"`
}

// ImportRow summarizes the ServiceImport and its derived Service.
type ImportRow struct {
	Type       string   `json:"type"`
	Ports      []string `json:"ports"`
	IPs        []string `json:"ips,omitempty"`
	Clusters   []string `json:"clusters"`
	Conditions []string `json:"conditions,omitempty"`
	Derived    string   `json:"derived"`
}

// Build explains in.
func Build(in Input) Report {
	r := Report{Service: in.Namespace + "/" + in.Name}
	exports, records, unreadable := recordedExports(in)
	r.UnreadableRecords = unreadable
	var merged *endpoints.ImportResult
	if len(exports) > 0 {
		res := endpoints.MergeImport(in.Namespace, in.Name, exports)
		merged = &res
	}
	members := slices.Clone(in.Members)
	slices.SortFunc(members, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	for _, m := range members {
		r.Members = append(r.Members, memberRow(in, m, records[m.Name], merged))
	}
	if in.Import != nil {
		r.Import = importRow(in.Import, in.Derived)
		r.Locality = locality(in.Policy, in.HubZones, in.Import, members)
		if n := len(in.HubNodesWithoutZone); n > 0 && r.Locality.Preferring {
			r.Locality.Nodes = append(r.Locality.Nodes, fmt.Sprintf("%d hub Node(s) without a zone label, which use every cluster's endpoints: %s",
				n, strings.Join(in.HubNodesWithoutZone, ", ")))
		}
	} else {
		r.ImportMissing = importMissing(in, len(exports), len(unreadable))
	}
	return r
}

// recordedExports parses the export records the hub holds per member, as
// the daemon's merge reads them, and says which cannot be read.
func recordedExports(in Input) ([]endpoints.Export, map[string]*endpoints.Export, []string) {
	var out []endpoints.Export
	var unreadable []string
	for _, m := range in.Members {
		digests := make([]*endpoints.SliceDigest, len(m.HubSlices))
		for i, s := range m.HubSlices {
			digests[i] = endpoints.DigestSlice(s)
		}
		rec, ok := endpoints.SourceRecord(in.Namespace, in.Name, m.Name, digests)
		if !ok {
			continue
		}
		e, err := endpoints.ParseExportRecord(m.Name, in.Namespace, in.Name, rec)
		if err != nil {
			unreadable = append(unreadable, m.Name+": "+err.Error())
			continue
		}
		out = append(out, e)
	}
	byCluster := map[string]*endpoints.Export{}
	for i := range out {
		byCluster[out[i].Cluster] = &out[i]
	}
	return out, byCluster, unreadable
}

func memberRow(in Input, m Member, record *endpoints.Export, merged *endpoints.ImportResult) MemberRow {
	row := MemberRow{Cluster: m.Name, Registration: registration(m), Connected: "Unknown", Healthy: "Unknown", Service: "not read"}
	if m.ControlPlane != "" && m.ReadError == "" {
		row.ReadError = m.ControlPlane
	}
	down, since, cause := unreachable(m.Lease, in.Now)
	row.Cause = cause
	switch {
	case m.Lease == nil:
	case down:
		row.Healthy = "False"
	default:
		row.Healthy = "True"
	}
	if m.Read {
		row.Connected = "True"
		if m.ReadError != "" {
			row.Connected = "False"
			row.ReadError = m.ReadError
		}
	}
	if m.Read && m.ReadError == "" {
		row.Service = describeService(m.Service)
		var refused endpoints.Refusals
		row.Ready, row.NotReady, refused = countEndpoints(in.Policy, m)
		if row.Dropped = refused.Total(); row.Dropped > 0 {
			row.Refused = map[string]int{}
			for _, r := range addresses.Refused {
				if n := refused.Counts[r]; n > 0 {
					row.Refused[r.String()] = n
				}
			}
			row.Refusals = refused.String()
		}
	}
	row.Export, row.Conditions = describeExport(in.Policy, m)
	row.Hub = describeHub(m)
	row.Owner = m.Owner
	row.Verdict = verdict(in, m, record, merged, down, since, cause)
	if c := contradiction(in, m, row, down); c != "" {
		row.Verdict += "; " + c
		row.Contradicted = true
	}
	return row
}

// contradiction says how the hub's objects contradict a verdict, or "":
// "not exported" while the hub holds what the daemon imported from the
// member, or a service that should be exported, from a member whose Lease
// the daemon renews, of which the hub holds nothing. Either way the likely
// cause is a daemon configured otherwise than explain assumed.
func contradiction(in Input, m Member, row MemberRow, down bool) string {
	const cause = "the daemon's configuration may differ from what explain assumed"
	svc := in.Namespace + "/" + in.Name
	switch {
	case strings.HasPrefix(row.Verdict, "not exported"):
		n, held := hubEndpoints(m)
		if !held {
			return ""
		}
		return fmt.Sprintf("but the hub holds %d endpoint(s) from %s for %s: %s", n, m.Name, svc, cause)
	case strings.HasPrefix(row.Verdict, "pending: the hub holds no slices") && m.Lease != nil && !down && row.Ready > 0:
		if _, held := hubEndpoints(m); held {
			return ""
		}
		return fmt.Sprintf("but the daemon renews %s's Lease and the hub holds nothing from it for %s: if this lasts, %s", m.Name, svc, cause)
	}
	return ""
}

// hubEndpoints counts the endpoints the hub holds from m (its MCS slices,
// else its per-cluster Endpoints), and says whether it holds any object of
// m's for the service at all.
func hubEndpoints(m Member) (int, bool) {
	n := 0
	for _, s := range m.HubSlices {
		n += len(s.Endpoints)
	}
	if len(m.HubSlices) == 0 && m.HubEndpoints != nil {
		for _, ss := range m.HubEndpoints.Subsets {
			n += len(ss.Addresses) + len(ss.NotReadyAddresses)
		}
	}
	return n, len(m.HubSlices) > 0 || m.HubEndpoints != nil || m.HubService != nil
}

// registration names the object that registers m, and says whether m's
// own About API id (as the daemon published it) agrees with its name.
func registration(m Member) string {
	return registrationObject(m) + aboutIDNote(m)
}

func aboutIDNote(m Member) string {
	if m.Lease == nil {
		return ""
	}
	switch id := m.Lease.Annotations[easync.AnnotationAboutID]; id {
	case "":
		return ""
	case m.Name:
		return " (About API id agrees)"
	default:
		return fmt.Sprintf(" (About API id %q: refused)", cut(id, 63))
	}
}

func registrationObject(m Member) string {
	switch {
	case m.ClusterProfile != "":
		return "ClusterProfile " + m.ClusterProfile
	case m.Secret != "":
		return "Secret " + m.Secret
	default:
		return "hub"
	}
}

// unreachable reports whether the member is unreachable, since when, and
// why: as the daemon published on its Lease the moment it saw it (a hung
// member is unreachable long before its Lease lapses), or else whether the
// Lease lapsed.
func unreachable(l *coordinationv1.Lease, now time.Time) (bool, time.Time, string) {
	if l == nil {
		return false, time.Time{}, ""
	}
	if l.Annotations[easync.AnnotationReachable] == "false" {
		since, err := time.Parse(time.RFC3339, l.Annotations[easync.AnnotationReachableSince])
		if err != nil {
			since = now
		}
		cause := ""
		if r := l.Annotations[easync.AnnotationErrorReason]; r != "" {
			cause = r + ": " + cut(l.Annotations[easync.AnnotationErrorMessage], 200)
		}
		return true, since, cause
	}
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return false, time.Time{}, ""
	}
	expiry := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	return now.After(expiry), l.Spec.RenewTime.Time, ""
}

// cut shortens s to at most n runes.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-3]) + "..."
}

func describeService(svc *corev1.Service) string {
	if svc == nil {
		return "not found"
	}
	t := string(svc.Spec.Type)
	if t == "" {
		t = string(corev1.ServiceTypeClusterIP)
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		t += " (headless)"
	}
	var ports []string
	for _, p := range svc.Spec.Ports {
		ports = append(ports, portString(p.Name, p.Port, p.Protocol))
	}
	if len(ports) == 0 {
		return t
	}
	return t + " " + strings.Join(ports, ",")
}

func portString(name string, port int32, protocol corev1.Protocol) string {
	if protocol == "" {
		protocol = corev1.ProtocolTCP
	}
	if name == "" {
		return fmt.Sprintf("%d/%s", port, protocol)
	}
	return fmt.Sprintf("%s:%d/%s", name, port, protocol)
}

// countEndpoints counts the member's endpoints as the daemon would take
// them: ready, not ready, and refused.
func countEndpoints(p Policy, m Member) (ready, notReady int, refused endpoints.Refusals) {
	if m.Service == nil {
		return 0, 0, refused
	}
	policy := p.Addresses
	policy.MemberAllowed = m.AllowedEndpoints
	clean, refused := endpoints.Sanitize(endpoints.Source{Cluster: m.Name, Service: m.Service, Slices: m.Slices}, &policy)
	for _, s := range clean.Slices {
		for _, ep := range s.Endpoints { // none in other than IPv4 and IPv6 slices
			if ep.IsReady() {
				ready++
			} else {
				notReady++
			}
		}
	}
	return ready, notReady, refused
}

func describeExport(p Policy, m Member) (string, []string) {
	var conds []string
	if m.Export != nil {
		for _, c := range m.Export.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Reason))
		}
	}
	switch p.Export.Mode {
	case easync.ExportAll:
		return "mode all", conds
	case easync.ExportAnnotation:
		if m.Service != nil && m.Service.Annotations[easync.AnnotationExport] == "true" {
			return "annotation", conds
		}
		return "no annotation", conds
	}
	v := exportVersion(m)
	switch {
	case m.Export != nil && v == "v1alpha1":
		return "ServiceExport (v1alpha1)", conds
	case m.Export != nil:
		return "ServiceExport", conds
	case v == lifecycle.ExportNotServed:
		return "ServiceExport not served", conds
	case !m.Read || m.ReadError != "":
		return "unknown", conds
	}
	return "no ServiceExport", conds
}

// exportVersion is the ServiceExport version the member serves, as read
// from it, else as the daemon published on its Lease; "" when unknown.
func exportVersion(m Member) string {
	if m.ExportVersion != "" || m.Lease == nil {
		return m.ExportVersion
	}
	return m.Lease.Annotations[easync.AnnotationServiceExportVersion]
}

func describeHub(m Member) string {
	var parts []string
	switch {
	case m.HubServiceTaken:
		parts = append(parts, "per-cluster Service held by another owner")
	case m.HubService != nil:
		parts = append(parts, "Service "+m.HubService.Name)
	}
	if m.HubEndpoints != nil {
		n := 0
		for _, ss := range m.HubEndpoints.Subsets {
			n += len(ss.Addresses) + len(ss.NotReadyAddresses)
		}
		parts = append(parts, fmt.Sprintf("Endpoints (%d)", n))
	}
	if len(m.HubSlices) > 0 {
		n := 0
		for _, s := range m.HubSlices {
			n += len(s.Endpoints)
		}
		parts = append(parts, fmt.Sprintf("%d MCS slice(s), %d endpoint(s)", len(m.HubSlices), n))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}
