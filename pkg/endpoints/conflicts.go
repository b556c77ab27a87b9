package endpoints

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// ConflictReason is why exports of a Service disagree. The values are the
// mcs-api ServiceExport Conflict condition reasons.
type ConflictReason string

// The reasons, one per property the exports of a Service must agree on.
const (
	PortConflict                  = ConflictReason(mcsv1beta1.ServiceExportReasonPortConflict)
	TypeConflict                  = ConflictReason(mcsv1beta1.ServiceExportReasonTypeConflict)
	SessionAffinityConflict       = ConflictReason(mcsv1beta1.ServiceExportReasonSessionAffinityConflict)
	SessionAffinityConfigConflict = ConflictReason(mcsv1beta1.ServiceExportReasonSessionAffinityConfigConflict)
	InternalTrafficPolicyConflict = ConflictReason(mcsv1beta1.ServiceExportReasonInternalTrafficPolicyConflict)
	TrafficDistributionConflict   = ConflictReason(mcsv1beta1.ServiceExportReasonTrafficDistributionConflict)
	IPFamilyConflict              = ConflictReason(mcsv1beta1.ServiceExportReasonIPFamilyConflict)
	LabelsConflict                = ConflictReason(mcsv1beta1.ServiceExportReasonLabelsConflict)
	AnnotationsConflict           = ConflictReason(mcsv1beta1.ServiceExportReasonAnnotationsConflict)
	// PreferLocalConflict is ours: the exports' AnnotationPreferLocal
	// differ, and the oldest's is used, as for the spec's fields.
	PreferLocalConflict = ConflictReason("PreferLocalConflict")
)

// ConflictReasons lists every ConflictReason, sorted.
var ConflictReasons = []ConflictReason{
	AnnotationsConflict, IPFamilyConflict, InternalTrafficPolicyConflict, LabelsConflict, PortConflict,
	PreferLocalConflict, SessionAffinityConfigConflict, SessionAffinityConflict, TrafficDistributionConflict, TypeConflict,
}

// Conflict reports exports that lost a conflict of one reason.
type Conflict struct {
	Reason ConflictReason
	// Clusters are the losing clusters, sorted.
	Clusters []string
	// Message names what conflicts, the losing clusters and the cluster
	// whose value is used.
	Message string
}

// conflictLog collects conflicts: for each reason and conflicting item, the
// winning cluster and the losing ones.
type conflictLog struct {
	items map[ConflictReason]map[string]*conflictItem
}

type conflictItem struct {
	winner string
	losers []string
	// missing says the losers lack what the winner has, rather than
	// having another value.
	missing bool
}

// add logs that loser's what differs from winner's, which is used.
func (l *conflictLog) add(reason ConflictReason, what, winner, loser string) {
	l.item(reason, what, winner, loser)
}

// addMissing logs that loser lacks the what winner exports.
func (l *conflictLog) addMissing(reason ConflictReason, what, winner, loser string) {
	l.item(reason, what, winner, loser).missing = true
}

func (l *conflictLog) item(reason ConflictReason, what, winner, loser string) *conflictItem {
	if l.items == nil {
		l.items = make(map[ConflictReason]map[string]*conflictItem)
	}
	if l.items[reason] == nil {
		l.items[reason] = make(map[string]*conflictItem)
	}
	it := l.items[reason][what]
	if it == nil {
		it = &conflictItem{winner: winner}
		l.items[reason][what] = it
	}
	if !slices.Contains(it.losers, loser) {
		it.losers = append(it.losers, loser)
	}
	return it
}

// conflicts returns one Conflict per reason, sorted by reason.
func (l *conflictLog) conflicts() []Conflict {
	var out []Conflict
	for _, reason := range slices.Sorted(maps.Keys(l.items)) {
		items := l.items[reason]
		var clusters, details []string
		for _, what := range slices.Sorted(maps.Keys(items)) {
			it := items[what]
			losers := slices.Sorted(slices.Values(it.losers))
			clusters = append(clusters, losers...)
			format := "%s: cluster(s) %s differ from cluster %s, whose value is used (oldest export wins)"
			if it.missing {
				format = "%s: not exported by cluster(s) %s; cluster %s exports it (the import has the union of the ports)"
			}
			details = append(details, fmt.Sprintf(format, what, strings.Join(losers, ", "), it.winner))
		}
		slices.Sort(clusters)
		out = append(out, Conflict{
			Reason:   reason,
			Clusters: slices.Compact(clusters),
			Message:  strings.Join(details, "; "),
		})
	}
	return out
}
