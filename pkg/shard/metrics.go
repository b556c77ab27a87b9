package shard

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Handover kinds, the values of the kind label.
const (
	kindInitial  = "initial"  // a fence nobody held before
	kindGraceful = "graceful" // freed by its holder after this replica synced
	kindTakeover = "takeover" // taken from a holder that died
)

var (
	ownedDesc = prometheus.NewDesc("endpoint_aggregator_owned_members",
		"Members whose fence this replica holds and may write now (with --shard-members).", nil, nil)
	unownedDesc = prometheus.NewDesc("endpoint_aggregator_member_unowned_seconds",
		"On the leader: how long a registered member has had no live fence holder, so that nobody writes its hub objects. One series per such member.", []string{"cluster"}, nil)
	replicaDesc = prometheus.NewDesc("endpoint_aggregator_replica_info",
		"1, labelled with this replica's identity: the holderIdentity of the fence Leases it holds.", []string{"identity"}, nil)
	leaseDurationDesc = prometheus.NewDesc("endpoint_aggregator_shard_lease_duration_seconds",
		"The peer Lease duration: a crashed replica's members are taken over about this long after its last renewal.", nil, nil)
)

// metrics are the coordinator's own counters.
type metrics struct {
	handovers *prometheus.CounterVec
	duration  *prometheus.HistogramVec
}

func newMetrics() metrics {
	return metrics{
		handovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "endpoint_aggregator_member_handovers_total",
			Help: "Fences this replica took, by kind: initial (never held), graceful (freed by its holder), takeover (its holder died).",
		}, []string{"kind"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "endpoint_aggregator_member_handover_duration_seconds",
			Help:    "From the moment this replica saw a member assigned to it to the moment it held the member's fence, by kind.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120},
		}, []string{"kind"}),
	}
}

// Describe implements prometheus.Collector.
func (c *Coordinator) Describe(ch chan<- *prometheus.Desc) {
	ch <- ownedDesc
	ch <- unownedDesc
	ch <- leaseDurationDesc
	ch <- replicaDesc
	c.metrics.handovers.Describe(ch)
	c.metrics.duration.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Coordinator) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	owned := 0
	valid := c.opts.Now().Before(c.deadline)
	for cluster, e := range c.held {
		if valid && e == c.epoch && !c.releasing[cluster] {
			owned++
		}
	}
	now := c.opts.Now()
	unowned := make(map[string]time.Duration, len(c.unownedSince))
	for cluster, since := range c.unownedSince {
		unowned[cluster] = now.Sub(since)
	}
	c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(ownedDesc, prometheus.GaugeValue, float64(owned))
	for cluster, d := range unowned {
		ch <- prometheus.MustNewConstMetric(unownedDesc, prometheus.GaugeValue, d.Seconds(), cluster)
	}
	ch <- prometheus.MustNewConstMetric(leaseDurationDesc, prometheus.GaugeValue, c.opts.LeaseDuration.Seconds())
	ch <- prometheus.MustNewConstMetric(replicaDesc, prometheus.GaugeValue, 1, c.opts.Identity)
	c.metrics.handovers.Collect(ch)
	c.metrics.duration.Collect(ch)
}
