package clusters

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Member states, the values of the state label.
const (
	stateSynced   = "synced"    // caches hold a full view
	stateSyncing  = "syncing"   // connecting, within its sync timeout
	stateTimedOut = "timed_out" // did not sync within its timeout; still trying
	// stateNotConnected: registered, but its registration could not be
	// turned into a connection; retried.
	stateNotConnected = "not_connected"
)

var (
	membersDesc = prometheus.NewDesc("endpoint_aggregator_member_clusters",
		"Registered member clusters by state (synced, syncing, timed_out, not_connected).", []string{"state"}, nil)
	memberReadyDesc = prometheus.NewDesc("endpoint_aggregator_member_cluster_synced",
		"1 when the member's caches have synced, 0 otherwise. One series per registered member.", []string{"cluster"}, nil)
	memberHealthyDesc = prometheus.NewDesc("endpoint_aggregator_member_cluster_healthy",
		"0 while the member's API server fails its health probes or it cannot be connected (it is unreachable), 1 otherwise. One series per member that has synced, fails its probes, or cannot be connected.", []string{"cluster"}, nil)
	// A gauge of the present, not a counter of errors: a failing member is
	// retried on backoff schedules, so a count says more about the
	// schedule than the outage, and an alert wants "which member, why, now".
	memberErrorDesc = prometheus.NewDesc("endpoint_aggregator_member_cluster_error",
		"1 for each member that fails now, with the cause (unauthorized, forbidden, tls_error, connection_refused, timeout, dns_error, not_api_server, resource_not_found, unhealthy, invalid_registration, identity_mismatch, over_bounds, other): why its health probe fails, or why its informers cannot list or watch. No series while it does not fail.",
		[]string{"cluster", "reason"}, nil)
	rejectedDesc = prometheus.NewDesc("endpoint_aggregator_rejected_registrations",
		"Registration Secrets and ClusterProfiles whose last processing was refused or warned about, by the reason of their Event in snake case (invalid_cluster_name, duplicate_cluster_name, invalid_kubeconfig, kubeconfig_refused, member_client_failed, no_access_provider, invalid_access_provider). Every replica processes every registration: aggregate replicas with max, not sum.",
		[]string{"reason"}, nil)
)

// Describe implements prometheus.Collector. The Registry reports its members
// at scrape time, so a removed member's series disappear with it. With
// sharding, a replica reports only the members it connects to, so that a
// sum over replicas counts each member once.
func (r *Registry) Describe(ch chan<- *prometheus.Desc) {
	ch <- membersDesc
	ch <- memberReadyDesc
	ch <- memberHealthyDesc
	ch <- memberErrorDesc
	ch <- rejectedDesc
}

// Collect implements prometheus.Collector.
func (r *Registry) Collect(ch chan<- prometheus.Metric) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	counts := map[string]float64{stateSynced: 0, stateSyncing: 0, stateTimedOut: 0, stateNotConnected: 0}
	for name, m := range r.members {
		if m.elsewhere {
			continue // another replica owns it, and reports it
		}
		synced := 0.0
		switch {
		case m.active == nil:
			counts[stateNotConnected]++
		case m.active.HasSynced():
			counts[stateSynced]++
			synced = 1
		case m.timedOut:
			counts[stateTimedOut]++
		default:
			counts[stateSyncing]++
		}
		ch <- prometheus.MustNewConstMetric(memberReadyDesc, prometheus.GaugeValue, synced, name)
		if cause := m.state().Cause; cause != "" {
			ch <- prometheus.MustNewConstMetric(memberErrorDesc, prometheus.GaugeValue, 1, name, ErrorClass(cause).Label())
		}
		if m.active == nil {
			// No connection: it cannot be read, as an unreachable member.
			ch <- prometheus.MustNewConstMetric(memberHealthyDesc, prometheus.GaugeValue, 0, name)
		}
		if m.active != nil {
			// 1 once synced and answering; 0 while its probes fail, synced
			// or not.
			_, down := m.active.UnreachableSince()
			switch {
			case down:
				ch <- prometheus.MustNewConstMetric(memberHealthyDesc, prometheus.GaugeValue, 0, name)
			case m.active.HasSynced():
				ch <- prometheus.MustNewConstMetric(memberHealthyDesc, prometheus.GaugeValue, 1, name)
			}
		}
	}
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(membersDesc, prometheus.GaugeValue, n, state)
	}
	for reason, n := range rejectedByReason(r.rejections) {
		ch <- prometheus.MustNewConstMetric(rejectedDesc, prometheus.GaugeValue, n, reason)
	}
}

// rejectedByReason counts the registrations warned about, once per reason
// each, by reason in snake case.
func rejectedByReason(rejections map[string][]rejection) map[string]float64 {
	out := map[string]float64{}
	for _, reason := range []string{ReasonInvalidName, ReasonDuplicateName, ReasonInvalidConfig, ReasonRefusedConfig,
		ReasonClientFailed, ReasonNoAccessProvider, ReasonInvalidAccessProvider} {
		out[snakeCase(reason)] = 0
	}
	for _, list := range rejections {
		seen := map[string]bool{}
		for _, rj := range list {
			if !seen[rj.reason] {
				seen[rj.reason] = true
				out[snakeCase(rj.reason)]++
			}
		}
	}
	return out
}
