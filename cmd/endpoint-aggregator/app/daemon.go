package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	cpclientset "sigs.k8s.io/cluster-inventory-api/client/clientset/versioned"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/shard"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

const component = "endpoint-aggregator"

// Daemon is one running endpoint-aggregator: hub clients, member registry and
// controller. Tests run it in-process; `run` runs it from flags.
type Daemon struct {
	opts  *Options
	hub   kubernetes.Interface
	hubID hubIdentity
	about rest.Interface // the hub's About API; nil in unit tests
	// aboutForbidden says once that the hub's About API id cannot be written.
	aboutForbidden stdsync.Once
	recorder       record.EventRecorder
	Controller     *easync.Controller
	Registry       *clusters.Registry
	Metrics        *easync.Metrics
	Gatherer       prometheus.Gatherer
	broadcaster    record.EventBroadcaster
	leader         prometheus.Gauge
	// leading is set while the replica runs the workers (merges, with
	// --shard-members); the registry records member Events only then.
	leading *atomic.Bool
	// identity names this replica in the leader Lease and its fences.
	identity string
	// Coordinator shares the members with the other replicas
	// (--shard-members); nil otherwise.
	Coordinator *shard.Coordinator
	// leaderLock is the leader Lease's lock while this replica leads.
	leaderLock atomic.Pointer[renewalClock]
	// guard wraps /metrics and pprof (--metrics-secure).
	guard metricsGuard
}

// newGoCollector is the Go collector with, beside its defaults, the
// runtime's estimates of where its CPU time went (go_cpu_classes_*: GC,
// scavenger, user code, idle, and their total, GOMAXPROCS × wall time),
// which hack/bench reports as the GC share of the CPU, and the heap the
// last collection found live (go_gc_heap_live_bytes): unlike the heap in
// use, it holds no garbage awaiting the next cycle, so it shows a leak
// (the soak checks it).
func newGoCollector() prometheus.Collector {
	return collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^(/cpu/classes/|/gc/heap/live:bytes$)`)}))
}

// NewDaemon wires a daemon writing to the hub at hubConfig. reg receives the
// metrics, with the Go and process collectors; nil gives the daemon a
// registry of its own.
func NewDaemon(o *Options, hubConfig *rest.Config, reg *prometheus.Registry) (*Daemon, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	metrics := easync.NewMetrics(reg)
	cfg, leaseCfg, aboutCfg := o.hubClientConfigs(hubConfig, metrics)
	hub, err := kubernetes.NewForConfig(clusters.WithProtobuf(cfg))
	if err != nil {
		return nil, fmt.Errorf("hub client: %w", err)
	}
	leases, err := kubernetes.NewForConfig(clusters.WithProtobuf(leaseCfg))
	if err != nil {
		return nil, fmt.Errorf("hub client of the member Leases: %w", err)
	}
	about, err := rest.UnversionedRESTClientFor(aboutRESTConfig(aboutCfg))
	if err != nil {
		return nil, fmt.Errorf("hub client of the About API: %w", err)
	}
	hubMCS, err := mcsclientset.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("hub MCS client: %w", err)
	}
	hubMetadata, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("hub metadata client: %w", err)
	}

	if err := checkServiceImportServed(hub.Discovery()); err != nil {
		return nil, err
	}
	if len(o.HubServiceCIDRs) == 0 {
		if err := checkServiceCIDRsServed(hub.Discovery()); err != nil {
			return nil, err
		}
	}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := mcsv1beta1.Install(scheme); err != nil {
		return nil, err
	}
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: hub.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme, corev1.EventSource{Component: component})

	reg.MustRegister(newGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	leader := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "endpoint_aggregator_leader",
		Help: "1 while this replica runs the workers (it holds the leader Lease, or runs without leader election), 0 while it stands by.",
	})
	reg.MustRegister(leader)
	easync.RegisterWorkqueueMetrics(reg)
	mode, _ := endpoints.ParsePerClusterMode(o.PerClusterServices)
	host, _ := os.Hostname()
	d := &Daemon{opts: o, hub: hub, about: about, recorder: recorder, Metrics: metrics, Gatherer: reg, broadcaster: broadcaster,
		leader: leader, leading: &atomic.Bool{}, identity: host + "_" + string(uuid.NewUUID()), guard: o.newMetricsGuard(hub)}
	members := &memberSet{}
	var sharding easync.Sharding
	if o.sharded() {
		sharding = &shardView{d: d}
	}
	hubCluster, aliasDomain := "", ""
	if o.HubIsMember {
		hubCluster = o.HubClusterName
	}
	if o.ClustersetAlias {
		aliasDomain = o.ClusterDomain
	}
	ctrl, err := easync.New(hub, hubMCS, members, easync.Options{
		Workers:             o.Workers,
		Export:              o.exportPolicy(),
		PerClusterServices:  mode,
		CreateNamespaces:    o.CreateNamespaces,
		WriteExportStatus:   o.WriteExportStatus,
		UnreachableGrace:    o.UnreachableGrace,
		UnreachableWithdraw: o.UnreachableWithdraw,
		LeaseNamespace:      o.Namespace,
		LeaseDuration:       o.MemberLeaseDuration,
		HubMetadata:         hubMetadata,
		LeaseClient:         leases,
		Recorder:            recorder,
		Metrics:             metrics,
		Addresses:           o.addressPolicy(),
		WatchServiceCIDRs:   len(o.HubServiceCIDRs) == 0,
		MaxMemberServices:   o.MaxMemberServices,
		MaxMemberEndpoints:  o.MaxMemberEndpoints,
		Sharding:            sharding,
		HubCluster:          hubCluster,
		PreferLocal:         o.PreferLocal,
		AliasDomain:         aliasDomain,
	})
	if err != nil {
		return nil, err
	}
	profiles, err := o.clusterProfiles(cfg)
	if err != nil {
		return nil, err
	}
	var static map[string]*rest.Config
	if o.HubIsMember {
		static = map[string]*rest.Config{o.HubClusterName: hubConfig}
	}
	leading := d.leading
	var handler clusters.Handler = ctrl
	var wanted func(string) bool
	if o.sharded() {
		handler = kickingHandler{Controller: ctrl, kick: func() { d.Coordinator.Kick() }}
		wanted = func(cluster string) bool { return d.Coordinator.Wants(cluster) }
	}
	members.registry = clusters.NewRegistry(hub, recorder, handler, clusters.Options{
		Static:              static,
		ProbeInterval:       o.ProbeInterval,
		ProbeTimeout:        o.ProbeTimeout,
		Namespace:           o.Namespace,
		SyncTimeout:         o.MemberSyncTimeout,
		QPS:                 o.MemberQPS,
		Burst:               o.MemberBurst,
		DisableCompression:  !o.MemberCompression,
		WatchServiceExports: o.ExportMode == string(easync.ExportServiceExport),
		ReadBounds:          clusters.ReadBounds{Services: o.MaxMemberReadServices, Endpoints: o.MaxMemberReadEndpoints},
		Policy:              o.KubeconfigPolicy,
		UserAgent:           cfg.UserAgent,
		WarningHandler:      func(cluster string) rest.WarningHandler { return newWarningLogger("member", cluster) },
		ClusterProfiles:     profiles,
		Leading:             func() bool { return !o.LeaderElect || leading.Load() },
		Wanted:              wanted,
		ClusterSet:          d.hubID.clusterSet,
	})
	reg.MustRegister(ctrl, members.registry)
	d.Controller, d.Registry = ctrl, members.registry
	if o.sharded() {
		// The fence and peer Leases, like the leader Lease, stay on the
		// hub client: a peer renewal per retry period and fence writes
		// on handovers cost the aggregated output little, and their wait
		// in its limiter is bounded by its few concurrent callers, well
		// within the renew deadline.
		d.Coordinator = shard.New(hub, members.registry, ctrl, shard.Options{
			Namespace:     o.Namespace,
			Identity:      d.identity,
			LeaseDuration: o.LeaseDuration,
			RenewDeadline: o.RenewDeadline,
			RetryPeriod:   o.RetryPeriod,
			Leading:       func() bool { ok, _ := d.merging(); return ok },
			SettleTimeout: o.MemberSyncTimeout,
		})
		members.coord = d.Coordinator
		reg.MustRegister(d.Coordinator)
	}
	return d, nil
}

// hubClientConfigs returns the configs of the daemon's hub clients: hub's
// (--kube-api-qps, --kube-api-burst), lease's, of the member liveness
// Leases (--member-lease-qps, --member-lease-burst), and about's, of the
// hub's About API properties (client-go's default limits: a few requests a
// minute). Each has a rate limiter of its own and counts its requests in
// m.HubRequests.
func (o *Options) hubClientConfigs(hubConfig *rest.Config, m *easync.Metrics) (hub, lease, about *rest.Config) {
	base := rest.CopyConfig(hubConfig)
	base.UserAgent = component + "/" + version()
	base.WarningHandler = newWarningLogger("hub", "")
	hub, lease, about = rest.CopyConfig(base), rest.CopyConfig(base), rest.CopyConfig(base)
	hub.QPS, hub.Burst = o.HubQPS, o.HubBurst
	hub.Wrap(m.CountRequests(easync.ClientHub))
	lease.QPS, lease.Burst = o.MemberLeaseQPS, o.MemberLeaseBurst
	lease.RateLimiter = nil // one given with hubConfig would be shared
	lease.Wrap(m.CountRequests(easync.ClientLease))
	about.QPS, about.Burst, about.RateLimiter = 0, 0, nil
	about.Wrap(m.CountRequests(easync.ClientAbout))
	return hub, lease, about
}

// clusterProfiles loads the access-provider file and builds the hub client
// of ClusterProfiles, when they are turned on.
func (o *Options) clusterProfiles(hubConfig *rest.Config) (clusters.ClusterProfileOptions, error) {
	if len(o.ClusterProfileNamespaces) == 0 {
		return clusters.ClusterProfileOptions{}, nil
	}
	providers, err := clusters.LoadAccessProviders(o.AccessProviderFile)
	if err != nil {
		return clusters.ClusterProfileOptions{}, fmt.Errorf("--access-provider-file: %w", err)
	}
	client, err := cpclientset.NewForConfig(hubConfig)
	if err != nil {
		return clusters.ClusterProfileOptions{}, fmt.Errorf("hub ClusterProfile client: %w", err)
	}
	return clusters.ClusterProfileOptions{
		Client:         client,
		Namespaces:     o.ClusterProfileNamespaces,
		ClusterManager: o.ClusterManager,
		Providers:      providers,
	}, nil
}

// Ready reports whether hub caches synced and every member synced or timed
// out; with sharding, every member this replica was assigned.
func (d *Daemon) Ready() bool {
	return d.Controller.HubSynced() && d.Registry.Ready() && (d.Coordinator == nil || d.Coordinator.Settled())
}

// Run runs the daemon until ctx ends. Stopping leaves the hub as it is: only
// unregistering a member withdraws its objects.
func (d *Daemon) Run(ctx context.Context) error {
	defer d.broadcaster.Shutdown()
	if d.Coordinator != nil {
		return d.runSharded(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var wg stdsync.WaitGroup
	errc := make(chan error, 2)
	if err := d.serveHTTP(ctx, &wg, errc); err != nil {
		return err
	}
	d.readHubIdentity(ctx)
	wg.Go(func() { d.publishConfig(ctx) })
	wg.Go(func() { d.watchHubIdentity(ctx) })
	wg.Add(2)
	go func() {
		defer wg.Done()
		d.Registry.Run(ctx)
	}()
	go func() {
		defer wg.Done()
		// Every replica keeps warm hub and member caches; only the leader
		// runs workers.
		d.Controller.StartInformers(ctx)
		if err := d.runLeading(ctx, d.hub, d.recorder); err != nil {
			errc <- err
		}
	}()

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		cancel()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d.opts.ShutdownTimeout):
		klog.InfoS("Shutdown timed out; exiting with syncs in flight", "timeout", d.opts.ShutdownTimeout)
	}
	return err
}

// serveHTTP serves /metrics, /healthz and /readyz until ctx ends, unless
// turned off; a failure goes to errc.
func (d *Daemon) serveHTTP(ctx context.Context, wg *stdsync.WaitGroup, errc chan<- error) error {
	if d.opts.MetricsBindAddress == "" || d.opts.MetricsBindAddress == "0" {
		return nil
	}
	srv, ln, err := d.httpServer()
	if err != nil {
		return err
	}
	wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("metrics server: %w", err)
		}
	})
	go func() {
		<-ctx.Done()
		sctx, c := context.WithTimeout(context.Background(), d.opts.ShutdownTimeout)
		defer c()
		_ = srv.Shutdown(sctx)
	}()
	return nil
}

func (d *Daemon) httpServer() (*http.Server, net.Listener, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", d.guard(promhttp.HandlerFor(d.Gatherer, promhttp.HandlerOpts{})))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		// A warm standby is ready too: it can take over at once. The body
		// says which role the replica has.
		role := "leading"
		switch {
		case d.Coordinator != nil && d.leading.Load():
			role = "sharing members, merging"
		case d.Coordinator != nil:
			role = "sharing members"
		case d.opts.LeaderElect && !d.leading.Load():
			role = "standing by"
		}
		if !d.Ready() {
			http.Error(w, "not ready ("+role+"): waiting for hub caches or member syncs", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok (" + role + ")"))
	})
	if d.opts.Profiling {
		pprofMux := http.NewServeMux()
		registerPprof(pprofMux)
		mux.Handle("/debug/pprof/", d.guard(pprofMux))
	}
	ln, err := net.Listen("tcp", d.opts.MetricsBindAddress)
	if err != nil {
		return nil, nil, fmt.Errorf("listening on --metrics-bind-address: %w", err)
	}
	if ln, err = d.opts.metricsListener(ln); err != nil {
		return nil, nil, err
	}
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln, nil
}

// memberSet adapts the registry to the controller's Members interface. With
// sharding, a registered member is owned only while this replica holds its
// fence.
type memberSet struct {
	registry *clusters.Registry
	coord    *shard.Coordinator
}

func (m *memberSet) Lookup(name string) (lifecycle.State, easync.Member) {
	st, c := m.registry.Lookup(name)
	if m.coord != nil && st.Registered() {
		owned, until := m.coord.Owns(name)
		st.Owned, st.OwnedUntil = st.Owned && owned, until
	}
	if c == nil {
		return st, nil // an untyped nil, never a nil *Cluster
	}
	return st, c
}

func (m *memberSet) Names() []string     { return m.registry.Names() }
func (m *memberSet) SecretsSynced() bool { return m.registry.SecretsSynced() }

// checkServiceCIDRsServed fails when the hub does not serve
// networking.k8s.io/v1 ServiceCIDRs, which the daemon reads to keep member
// endpoints out of the hub's Service ranges: such a hub needs
// --hub-service-cidrs. Any other error is left to the informer, which
// retries.
func checkServiceCIDRsServed(d discovery.DiscoveryInterface) error {
	list, err := d.ServerResourcesForGroupVersion(networkingv1.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) || (err == nil && !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "servicecidrs" })) {
		return errors.New("the hub serves no networking.k8s.io/v1 ServiceCIDRs (Kubernetes before 1.33?): set --hub-service-cidrs to its Service IP ranges (its --service-cluster-ip-range), so that no member endpoint can be one of its ClusterIPs")
	}
	if err != nil {
		klog.InfoS("Could not check that the hub serves ServiceCIDRs; watching them", "err", err)
	}
	return nil
}

// checkServiceImportServed refuses a hub whose ServiceImport CRD does not
// serve v1beta1, the version the daemon writes: an older copy (v1alpha1
// only, mcs-api before v0.5.0) or none. A hub that cannot be asked is
// not refused: its informers say what fails.
func checkServiceImportServed(d discovery.DiscoveryInterface) error {
	serves := func(gv string) (bool, error) {
		list, err := d.ServerResourcesForGroupVersion(gv)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "serviceimports" }), err
	}
	ok, err := serves(mcsv1beta1.SchemeGroupVersion.String())
	if err != nil {
		klog.InfoS("Could not check that the hub serves ServiceImports as v1beta1; watching them", "err", err)
		return nil
	}
	if ok {
		return nil
	}
	const need = "the daemon writes multicluster.x-k8s.io/v1beta1 ServiceImports: install the mcs-api CRDs of v0.5.0 or later (config/crd, or the chart's), which serve v1beta1 and v1alpha1"
	if old, _ := serves("multicluster.x-k8s.io/v1alpha1"); old {
		return fmt.Errorf("the hub's CustomResourceDefinition serviceimports.multicluster.x-k8s.io serves v1alpha1 but not v1beta1; %s", need)
	}
	return fmt.Errorf("the hub serves no CustomResourceDefinition serviceimports.multicluster.x-k8s.io; %s", need)
}
