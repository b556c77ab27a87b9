package sync

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	mcslisters "sigs.k8s.io/mcs-api/pkg/client/listers/apis/v1beta1"

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
	localityImportsDesc = prometheus.NewDesc(namespace+"_imports_by_locality",
		"Our ServiceImports by the locality their hub slices' hints ask of kube-proxy: spread (none), same-zone (PreferSameZone and PreferClose) or prefer-local (the hub cluster's endpoints first). Published by the replica that merges.",
		[]string{"mode"}, nil)
	unzonedNodesDesc = prometheus.NewDesc(namespace+"_hub_nodes_without_zone",
		"Hub Nodes without a topology.kubernetes.io/zone label, where the hub is a member: kube-proxy on them uses every cluster's endpoints, even for imports that prefer the hub cluster's.",
		nil, nil)
)

// reporter is the prometheus.Collector of the per-cluster gauges. They are
// computed at scrape time from what the syncs kept (memberStates), so a
// member's series go when this replica stops writing it.
type reporter struct {
	state    *memberStates
	waits    *waits
	written  *written
	sharding Sharding
	// imports lists the hub's ServiceImports of ours; nil until the hub
	// caches exist. preferLocal is the daemon's default for them.
	imports     mcslisters.ServiceImportLister
	preferLocal bool
	// hubCluster is the hub's member name and zones its Nodes' zones,
	// where the hub is a member; else "" and nil.
	hubCluster string
	zones      *hubZones
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
	ch <- localityImportsDesc
	ch <- unzonedNodesDesc
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
	for mode, n := range r.localityImports() {
		ch <- prometheus.MustNewConstMetric(localityImportsDesc, prometheus.GaugeValue, float64(n), mode)
	}
	if r.zones != nil {
		ch <- prometheus.MustNewConstMetric(unzonedNodesDesc, prometheus.GaugeValue, float64(r.zones.unzonedNodes()))
	}
	ch <- prometheus.MustNewConstMetric(waitingKeysDesc, prometheus.GaugeValue, float64(r.waits.len()))
	ch <- prometheus.MustNewConstMetric(unechoedWritesDesc, prometheus.GaugeValue, float64(r.written.len()))
}

// localityImports counts our imports by locality mode, zeros included; nil
// when this replica does not merge.
func (r reporter) localityImports() map[string]int {
	if sh := r.sharding; sh != nil {
		if merging, _ := sh.Merging(); !merging {
			return nil
		}
	}
	if r.imports == nil {
		return nil
	}
	list, err := r.imports.List(labels.Everything())
	if err != nil {
		return nil
	}
	out := map[string]int{"spread": 0, "same-zone": 0, "prefer-local": 0}
	for _, imp := range list {
		switch l := endpoints.LocalityOf(imp); {
		case r.zones != nil && l.PrefersLocal(r.preferLocal) && endpoints.PreferLocalBlocked(r.hubCluster, r.zones.get()) == "":
			out["prefer-local"]++
		case l.ZoneHinted:
			out["same-zone"]++
		default:
			out["spread"]++
		}
	}
	return out
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
