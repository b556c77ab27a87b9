package sync

import (
	"github.com/prometheus/client_golang/prometheus"
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
	resultNotFound = "not_found"

	// hub resources written.
	resourceService       = "services"
	resourceEndpoints     = "endpoints"
	resourceEndpointSlice = "endpointslices"
	resourceServiceImport = "serviceimports"
	resourceNamespace     = "namespaces"

	// verbs.
	verbCreate       = "create"
	verbUpdate       = "update"
	verbUpdateStatus = "update_status"
	verbDelete       = "delete"
)

// Metrics are the controller's Prometheus metrics. Each daemon (and each test)
// builds its own set and registers it where it likes.
type Metrics struct {
	// Syncs counts syncs of a key by result: success, error or conflict.
	Syncs *prometheus.CounterVec
	// SyncDuration observes how long a sync of one key took.
	SyncDuration prometheus.Histogram
	// HubWrites counts API writes to the hub by resource, verb
	// (create, update, update_status, delete) and result (success, error,
	// conflict, not_found).
	HubWrites *prometheus.CounterVec
	// Conflicts counts hub objects we would have written but did not because
	// an object we do not own has the name, by resource.
	Conflicts *prometheus.CounterVec
	// MemberWrites counts ServiceExport status writes to members by result.
	MemberWrites *prometheus.CounterVec
	// SkippedNamespace counts syncs skipped because the hub lacks the namespace.
	SkippedNamespace prometheus.Counter
}

// NewMetrics creates the controller metrics and registers them with reg
// (which may be nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "syncs_total",
			Help: "Syncs of one key, by result (success, error, conflict).",
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
		Conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "hub_conflicts_total",
			Help: "Hub writes refused because an object not managed by endpoint-aggregator holds the name, by resource.",
		}, []string{"resource"}),
		MemberWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "member_writes_total",
			Help: "ServiceExport status writes to member clusters, by result.",
		}, []string{"result"}),
		SkippedNamespace: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "namespace_missing_total",
			Help: "Syncs skipped because the hub has no namespace of that name (see --create-namespaces).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Syncs, m.SyncDuration, m.HubWrites, m.Conflicts, m.MemberWrites, m.SkippedNamespace)
	}
	return m
}
