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
)

// Describe implements prometheus.Collector. The Registry reports its members
// at scrape time, so a removed member's series disappear with it. With
// sharding, a replica reports only the members it connects to, so that a
// sum over replicas counts each member once.
func (r *Registry) Describe(ch chan<- *prometheus.Desc) {
	ch <- membersDesc
	ch <- memberReadyDesc
	ch <- memberHealthyDesc
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
}
