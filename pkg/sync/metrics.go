package sync

import (
	stdsync "sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

const (
	namespace = "endpoint_aggregator"
)

// Label values.
const (
	// result of a sync or a write.
	resultSuccess  = "success"
	resultError    = "error"
	resultConflict = "conflict"
	resultStale    = "stale_cache"
	resultNotFound = "not_found"

	// verbs.
	verbCreate       = "create"
	verbUpdate       = "update"
	verbUpdateStatus = "update_status"
	verbDelete       = "delete"
)

// Metrics are the controller's Prometheus metrics. Each daemon (and each test)
// builds its own set and registers it where it likes.
type Metrics struct {
	// Syncs counts syncs of a key by result: success, error, conflict (a
	// foreign object holds a name) or stale_cache (a write raced our cache).
	Syncs *prometheus.CounterVec
	// SyncDuration observes how long a sync of one key took.
	SyncDuration prometheus.Histogram
	// HubWrites counts API writes to the hub by resource, verb
	// (create, update, update_status, delete) and result (success, error,
	// conflict, not_found).
	HubWrites *prometheus.CounterVec
	// HubWriteRefusals counts the hub writes that failed other than by a
	// conflict or a missing object, by resource, verb and the API's reason
	// (Invalid, RequestEntityTooLarge, Forbidden, ...; Other for an error
	// without one, such as a timeout on the way).
	HubWriteRefusals *prometheus.CounterVec
	// HubRequests counts every request sent to the hub API server, reads
	// and watches too, by client (hub, lease) and verb (get, list, watch,
	// create, update, patch, delete, deletecollection, other). Only the
	// clients wrapped with CountRequests are counted.
	HubRequests *prometheus.CounterVec
	// Conflicts counts hub objects we would have written but did not because
	// an object we do not own has the name, by resource.
	Conflicts *prometheus.CounterVec
	// MemberWrites counts ServiceExport status writes to members by result.
	MemberWrites *prometheus.CounterVec
	// HubFullReads counts our hub EndpointSlices and Endpoints read in
	// full because their metadata did not show content we wrote, by
	// resource (see hubdigests.go).
	HubFullReads *prometheus.CounterVec
	// SkippedNamespace counts syncs skipped because the hub lacks the namespace.
	SkippedNamespace prometheus.Counter
	// UnreadableRecords counts merges that found an export record they
	// could not read on a member's hub slices: the merge waits for that
	// member's sync, which it queues, to rewrite the record.
	UnreadableRecords prometheus.Counter
	// Propagation observes the time from a member EndpointSlice change
	// (its endpoints.kubernetes.io/last-change-trigger-time) to the hub
	// write that carries it.
	Propagation prometheus.Histogram
}

// NewMetrics creates the controller metrics and registers them with reg
// (which may be nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "syncs_total",
			Help: "Syncs of one key, by result (success, error, conflict, stale_cache).",
		}, []string{"result"}),
		SyncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "sync_duration_seconds",
			Help:    "Time to sync one key, including its hub writes.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		HubWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "hub_writes_total",
			Help: "API writes to the hub, by resource, verb and result.",
		}, []string{"resource", "verb", "result"}),
		HubWriteRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "hub_write_refusals_total",
			Help: "Hub writes that failed other than by a conflict or a missing object, by resource, verb and the API's reason (Other: none given).",
		}, []string{"resource", "verb", "reason"}),
		HubRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "hub_requests_total",
			Help: "Requests sent to the hub API server, by client (hub, lease) and verb (get, list, watch, create, update, patch, delete, deletecollection, other).",
		}, []string{"client", "verb"}),
		Conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "hub_conflicts_total",
			Help: "Hub writes refused because an object not managed by endpoint-aggregator holds the name, by resource.",
		}, []string{"resource"}),
		MemberWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "member_writes_total",
			Help: "ServiceExport status writes to member clusters, by result.",
		}, []string{"result"}),
		HubFullReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "hub_full_reads_total",
			Help: "Hub EndpointSlices and Endpoints of ours read in full because their metadata did not show content the daemon wrote (another manager wrote it, or it has no readable digest), by resource.",
		}, []string{"resource"}),
		SkippedNamespace: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "namespace_missing_total",
			Help: "Syncs skipped because the hub has no namespace of that name (see --create-namespaces).",
		}),
		UnreadableRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "unreadable_export_records_total",
			Help: "Export records on hub slices that a ServiceImport merge could not read; the merge waits for the member's sync to rewrite them.",
		}),
		Propagation: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "endpoint_propagation_seconds",
			Help:    "Time from a member EndpointSlice change (its last-change-trigger-time annotation) to the hub write carrying it.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
	}
	// Series of known label values start at zero, so that the first
	// increment shows as an increase (rate and increase need two samples).
	for _, r := range []string{resultSuccess, resultError, resultConflict, resultStale} {
		m.Syncs.WithLabelValues(r)
	}
	for _, r := range []string{resourceService, resourceEndpoints, resourceEndpointSlice, resourceServiceImport} {
		m.Conflicts.WithLabelValues(r)
	}
	for _, r := range []string{resourceEndpoints, resourceEndpointSlice} {
		m.HubFullReads.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.Syncs, m.SyncDuration, m.HubWrites, m.HubWriteRefusals, m.HubRequests, m.Conflicts, m.MemberWrites, m.HubFullReads, m.SkippedNamespace, m.UnreadableRecords, m.Propagation)
	}
	return m
}

var (
	workqueueOnce    stdsync.Once
	workqueueMetrics *workqueueProvider
)

// RegisterWorkqueueMetrics makes client-go's workqueues report depth, adds,
// latency, work duration, unfinished work and retries to reg, labelled by
// queue name. client-go keeps one provider per process, so every registry
// given here shares the same series.
func RegisterWorkqueueMetrics(reg prometheus.Registerer) {
	workqueueOnce.Do(func() {
		p := &workqueueProvider{
			depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "workqueue", Name: "depth",
				Help: "Current depth of the workqueue."}, []string{"name"}),
			adds: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "workqueue", Name: "adds_total",
				Help: "Adds handled by the workqueue."}, []string{"name"}),
			latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Subsystem: "workqueue", Name: "queue_duration_seconds",
				Help: "Time an item waits in the workqueue before it is processed.", Buckets: prometheus.ExponentialBuckets(1e-6, 10, 10)}, []string{"name"}),
			work: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Subsystem: "workqueue", Name: "work_duration_seconds",
				Help: "Time processing an item from the workqueue takes.", Buckets: prometheus.ExponentialBuckets(1e-6, 10, 10)}, []string{"name"}),
			unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "workqueue", Name: "unfinished_work_seconds",
				Help: "Seconds of work in progress not yet observed by work_duration."}, []string{"name"}),
			longest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "workqueue", Name: "longest_running_processor_seconds",
				Help: "Seconds the longest running processor has been running."}, []string{"name"}),
			retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "workqueue", Name: "retries_total",
				Help: "Retries handled by the workqueue."}, []string{"name"}),
		}
		workqueue.SetProvider(p)
		workqueueMetrics = p
	})
	p := workqueueMetrics
	reg.MustRegister(p.depth, p.adds, p.latency, p.work, p.unfinished, p.longest, p.retries)
}

type workqueueProvider struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

func (p *workqueueProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return p.depth.WithLabelValues(name)
}
func (p *workqueueProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return p.adds.WithLabelValues(name)
}
func (p *workqueueProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return p.latency.WithLabelValues(name)
}
func (p *workqueueProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return p.work.WithLabelValues(name)
}
func (p *workqueueProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.unfinished.WithLabelValues(name)
}
func (p *workqueueProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.longest.WithLabelValues(name)
}
func (p *workqueueProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return p.retries.WithLabelValues(name)
}
