package sync

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/addresses"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

var (
	clusterEndpointsDesc = prometheus.NewDesc(namespace+"_cluster_endpoints",
		"Endpoints aggregated from each member cluster.", []string{"cluster"}, nil)
	clusterServicesDesc = prometheus.NewDesc(namespace+"_cluster_services",
		"Exported services aggregated from each member cluster.", []string{"cluster"}, nil)
	waitingKeysDesc = prometheus.NewDesc(namespace+"_waiting_keys",
		"Keys whose last sync waits for a precondition: a member's first sync, the registrations, a hub namespace.", nil, nil)
	unechoedWritesDesc = prometheus.NewDesc(namespace+"_unechoed_writes",
		"Hub writes whose watch event the hub caches have not delivered yet.", nil, nil)
	refusedEndpointsDesc = prometheus.NewDesc(namespace+"_refused_member_endpoints",
		"Member endpoints the daemon refuses to aggregate now, by cluster and reason (invalid, special_address, hub_service_range, denied_range, not_allowed_range).",
		[]string{"cluster", "reason"}, nil)
	refusedServicesDesc = prometheus.NewDesc(namespace+"_refused_member_services",
		"Exports of each member refused because the member is past --max-member-services or --max-member-endpoints.",
		[]string{"cluster"}, nil)
	conflictedImportsDesc = prometheus.NewDesc(namespace+"_conflicted_imports",
		"ServiceImports whose exports conflict, by reason (PortConflict, TypeConflict, LabelsConflict, ...; an import counts once under each of its reasons). Published by the replica that merges.",
		[]string{"reason"}, nil)
)

// reporter is the prometheus.Collector of the per-cluster gauges. They are
// computed at scrape time from what the syncs kept (memberStates), so a
// member's series go when this replica stops writing it.
type reporter struct {
	state    *memberStates
	waits    *waits
	written  *written
	sharding Sharding
}

// Describe implements prometheus.Collector.
func (r reporter) Describe(ch chan<- *prometheus.Desc) {
	ch <- clusterEndpointsDesc
	ch <- clusterServicesDesc
	ch <- waitingKeysDesc
	ch <- unechoedWritesDesc
	ch <- refusedEndpointsDesc
	ch <- refusedServicesDesc
	ch <- conflictedImportsDesc
}

// Collect implements prometheus.Collector.
func (r reporter) Collect(ch chan<- prometheus.Metric) {
	for cluster, t := range r.state.totals() {
		ch <- prometheus.MustNewConstMetric(clusterEndpointsDesc, prometheus.GaugeValue, float64(t.endpoints), cluster)
		ch <- prometheus.MustNewConstMetric(clusterServicesDesc, prometheus.GaugeValue, float64(t.services), cluster)
		ch <- prometheus.MustNewConstMetric(refusedServicesDesc, prometheus.GaugeValue, float64(t.refusedServices), cluster)
		// Every reason of a cluster with refusals has a series, zeros
		// included, so that a drop to zero shows.
		if t.refused == nil {
			continue
		}
		for _, r := range addresses.Refused {
			ch <- prometheus.MustNewConstMetric(refusedEndpointsDesc, prometheus.GaugeValue, float64(t.refused[r]), cluster, r.String())
		}
	}
	for reason, n := range r.conflictedImports() {
		ch <- prometheus.MustNewConstMetric(conflictedImportsDesc, prometheus.GaugeValue, float64(n), string(reason))
	}
	ch <- prometheus.MustNewConstMetric(waitingKeysDesc, prometheus.GaugeValue, float64(r.waits.len()))
	ch <- prometheus.MustNewConstMetric(unechoedWritesDesc, prometheus.GaugeValue, float64(r.written.len()))
}

// conflictedImports counts the imports whose exports conflict, by reason
// (every reason present, zeros included), as this replica reported them;
// nil when it does not merge, as the conflicts are the merging replica's to
// report.
func (r reporter) conflictedImports() map[endpoints.ConflictReason]int {
	if sh := r.sharding; sh != nil {
		if merging, _ := sh.Merging(); !merging {
			return nil
		}
	}
	out := make(map[endpoints.ConflictReason]int, len(endpoints.ConflictReasons))
	for _, reason := range endpoints.ConflictReasons {
		out[reason] = 0
	}
	for reason, n := range r.state.conflictCounts() {
		out[reason] = n
	}
	return out
}
