package app

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/addresses"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// Options are the flags of `endpoint-aggregator run`.
type Options struct {
	Kubeconfig string
	Context    string
	Namespace  string

	Workers     int
	HubQPS      float32
	HubBurst    int
	MemberQPS   float32
	MemberBurst int
	// MemberLeaseQPS and MemberLeaseBurst limit the hub client of the
	// member liveness Leases, apart from HubQPS and HubBurst.
	MemberLeaseQPS   float32
	MemberLeaseBurst int
	// MemberCompression lets members gzip their responses (off by
	// default; see docs/performance.md).
	MemberCompression bool

	ExportMode        string
	IncludeNamespaces []string
	ExcludeNamespaces []string
	// DeniedEndpointCIDRs, AllowedEndpointCIDRs and HubServiceCIDRs bound
	// the member endpoint addresses (see package addresses).
	DeniedEndpointCIDRs  []string
	AllowedEndpointCIDRs []string
	HubServiceCIDRs      []string
	// MaxMemberServices and MaxMemberEndpoints bound one member's exports.
	MaxMemberServices  int
	MaxMemberEndpoints int
	// MaxMemberReadServices and MaxMemberReadEndpoints bound what the
	// daemon reads of one member, exported or not.
	MaxMemberReadServices  int
	MaxMemberReadEndpoints int
	PerClusterServices     string
	CreateNamespaces       bool
	PreferLocal            bool
	ClustersetAlias        bool
	ClusterDomain          string
	MemberSyncTimeout      time.Duration
	WriteExportStatus      bool
	UnreachableGrace       time.Duration
	UnreachableWithdraw    time.Duration
	MemberLeaseDuration    time.Duration
	ProbeInterval          time.Duration
	ProbeTimeout           time.Duration
	HubIsMember            bool
	HubClusterName         string

	KubeconfigPolicy clusters.KubeconfigPolicy

	// ClusterProfileNamespaces turns on members from ClusterProfiles in
	// these hub namespaces; AccessProviderFile supplies their plugins.
	ClusterProfileNamespaces []string
	ClusterManager           string
	AccessProviderFile       string

	LeaderElect bool
	// ShardMembers shares the members among the replicas (package shard)
	// instead of one leader syncing them all.
	ShardMembers     bool
	LeaderElectionID string
	LeaseDuration    time.Duration
	RenewDeadline    time.Duration
	RetryPeriod      time.Duration

	MetricsBindAddress string
	// MetricsSecure serves /metrics over TLS, only to clients the hub
	// authenticates and authorizes; MetricsCertDir holds its certificate.
	MetricsSecure   bool
	MetricsCertDir  string
	Profiling       bool
	ShutdownTimeout time.Duration
}

// defaultNamespace is the daemon's namespace when $POD_NAMESPACE is unset:
// the default of `run --namespace`, and the namespace the operator commands
// assume.
const defaultNamespace = "endpoint-aggregator"

// NewOptions returns the defaults.
func NewOptions() *Options {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = defaultNamespace
	}
	return &Options{
		Namespace:              ns,
		Workers:                easync.DefaultWorkers,
		HubQPS:                 50,
		HubBurst:               100,
		MemberQPS:              20,
		MemberBurst:            40,
		MemberLeaseQPS:         150,
		MemberLeaseBurst:       300,
		MemberCompression:      false,
		ExportMode:             string(easync.ExportServiceExport),
		ExcludeNamespaces:      easync.DefaultExcludedNamespaces,
		MaxMemberServices:      easync.DefaultMaxMemberServices,
		MaxMemberEndpoints:     easync.DefaultMaxMemberEndpoints,
		MaxMemberReadServices:  clusters.DefaultMaxReadServices,
		MaxMemberReadEndpoints: clusters.DefaultMaxReadEndpoints,
		PerClusterServices:     string(endpoints.PerClusterMirror),
		ClusterDomain:          "cluster.local",
		MemberSyncTimeout:      clusters.DefaultSyncTimeout,
		WriteExportStatus:      true,
		MemberLeaseDuration:    easync.DefaultMemberLeaseDuration,
		ProbeInterval:          clusters.DefaultProbeInterval,
		ProbeTimeout:           clusters.DefaultProbeTimeout,
		HubClusterName:         "hub",
		LeaderElect:            true,
		ShardMembers:           true,
		LeaderElectionID:       "endpoint-aggregator",
		LeaseDuration:          15 * time.Second,
		RenewDeadline:          10 * time.Second,
		RetryPeriod:            2 * time.Second,
		MetricsBindAddress:     ":8080",
		ShutdownTimeout:        25 * time.Second,
	}
}

// AddFlags binds the options to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to the hub kubeconfig. Empty: in-cluster config.")
	fs.StringVar(&o.Context, "context", o.Context, "Context of --kubeconfig to use.")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Namespace of the member registration Secrets (default: $POD_NAMESPACE or "+defaultNamespace+").")
	fs.IntVar(&o.Workers, "workers", o.Workers, "Concurrent syncs.")
	fs.Float32Var(&o.HubQPS, "kube-api-qps", o.HubQPS, "Queries per second to the hub API server.")
	fs.IntVar(&o.HubBurst, "kube-api-burst", o.HubBurst, "Burst of queries to the hub API server.")
	fs.Float32Var(&o.MemberQPS, "member-api-qps", o.MemberQPS, "Queries per second to each member API server.")
	fs.IntVar(&o.MemberBurst, "member-api-burst", o.MemberBurst, "Burst of queries to each member API server.")
	fs.Float32Var(&o.MemberLeaseQPS, "member-lease-qps", o.MemberLeaseQPS, "Queries per second of the member liveness Leases to the hub API server, on a client of their own so that they never delay the aggregated writes (--kube-api-qps). A replica renews the Lease of each member it holds once per --member-lease-duration/4, spread over 80% of that: 1,000 members at 40s need 125.")
	fs.IntVar(&o.MemberLeaseBurst, "member-lease-burst", o.MemberLeaseBurst, "Burst of queries of the member liveness Leases to the hub API server.")
	fs.BoolVar(&o.MemberCompression, "member-compression", o.MemberCompression, "Let member API servers gzip their responses. Off by default: each gzip-compressed watch holds about 40 KB of decompressor in the daemon (two or three watches per member) and costs CPU on both ends; on, fewer bytes cross the wire. The annotation endpoint-aggregator.io/member-compression (\"true\" or \"false\") on a registration overrides it for that member, e.g. one behind a slow or metered link.")
	fs.StringVar(&o.ExportMode, "export-mode", o.ExportMode, "Which member Services are exported: serviceexport (MCS ServiceExport objects), annotation (endpoint-aggregator.io/export: \"true\") or all.")
	fs.StringSliceVar(&o.IncludeNamespaces, "include-namespaces", o.IncludeNamespaces, "Only export Services in these namespaces (default: all).")
	fs.StringSliceVar(&o.ExcludeNamespaces, "exclude-namespaces", o.ExcludeNamespaces, "Never export Services in these namespaces. The daemon's own --namespace is not exported either unless --include-namespaces lists it; default/kubernetes never is.")
	fs.StringSliceVar(&o.DeniedEndpointCIDRs, "denied-endpoint-cidrs", o.DeniedEndpointCIDRs, "Refuse member endpoints inside these CIDRs (besides loopback, link-local, multicast and other special addresses, and the hub's Service ranges, which are always refused).")
	fs.StringSliceVar(&o.AllowedEndpointCIDRs, "allowed-endpoint-cidrs", o.AllowedEndpointCIDRs, "When set, refuse member endpoints outside these CIDRs (your members' pod ranges, say). A registration's annotation "+clusters.AnnotationAllowedEndpointCIDRs+" narrows it for its member.")
	fs.IntVar(&o.MaxMemberServices, "max-member-services", o.MaxMemberServices, "Import at most this many exported Services of one member, its oldest exports first; newer ones are refused with an Event and a ServiceExport condition, the rest of the ClusterSet unaffected (0: no bound).")
	fs.IntVar(&o.MaxMemberEndpoints, "max-member-endpoints", o.MaxMemberEndpoints, "Import at most this many endpoints of one member, its oldest exports first: the export that crosses the bound, and newer ones, are refused (0: no bound).")
	fs.IntVar(&o.MaxMemberReadServices, "max-member-read-services", o.MaxMemberReadServices, "Read at most this many Services (and ServiceExports) of one member, exported or not; a member holding more is not read until it is back within the bound: it counts as unreachable (reason OverBounds), and its hub objects are kept or withdrawn by the unreachable policy (0: no bound).")
	fs.IntVar(&o.MaxMemberReadEndpoints, "max-member-read-endpoints", o.MaxMemberReadEndpoints, "Read at most this many endpoints of one member's EndpointSlices, exported or not; past it the member is not read, as for --max-member-read-services (0: no bound).")
	fs.StringSliceVar(&o.HubServiceCIDRs, "hub-service-cidrs", o.HubServiceCIDRs, "The hub's Service IP ranges, in which no member endpoint may be, for a hub that serves no networking.k8s.io/v1 ServiceCIDRs (default: read from the hub's ServiceCIDRs, and kept current).")
	fs.StringVar(&o.PerClusterServices, "per-cluster-services", o.PerClusterServices, "Per-cluster <svc>-<cluster> Services: mirror (member's type), headless (no hub ClusterIP) or off.")
	fs.BoolVar(&o.CreateNamespaces, "create-namespaces", o.CreateNamespaces, "Create missing hub namespaces instead of skipping their services.")
	fs.DurationVar(&o.MemberSyncTimeout, "member-sync-timeout", o.MemberSyncTimeout, "How long a member may take to sync before the daemon is ready without it.")
	fs.BoolVar(&o.WriteExportStatus, "write-export-status", o.WriteExportStatus, "Write Valid/Ready/Conflict conditions to member ServiceExports (serviceexport mode; needs patch on serviceexports/status). Set false for read-only member credentials.")
	fs.DurationVar(&o.UnreachableGrace, "unreachable-grace", o.UnreachableGrace, "Mark an unreachable member's endpoints not ready after this long (0: keep them as last seen). Secret annotation endpoint-aggregator.io/unreachable-grace overrides it.")
	fs.DurationVar(&o.UnreachableWithdraw, "unreachable-withdraw", o.UnreachableWithdraw, "Withdraw an unreachable member's endpoints after this long (0: never). Secret annotation endpoint-aggregator.io/unreachable-withdraw overrides it.")
	fs.DurationVar(&o.MemberLeaseDuration, "member-lease-duration", o.MemberLeaseDuration, "Duration of the per-member liveness Leases ("+easync.MemberLeasePrefix+"<cluster>), renewed every quarter of it while the member is healthy; 0 disables them.")
	fs.DurationVar(&o.ProbeInterval, "member-probe-interval", o.ProbeInterval, "How often each member's /readyz is probed.")
	fs.DurationVar(&o.ProbeTimeout, "member-probe-timeout", o.ProbeTimeout, "How long a member probe may take; a member is seen unreachable within interval + timeout.")
	fs.BoolVar(&o.HubIsMember, "hub-is-member", o.HubIsMember, "Also aggregate the hub's own exported Services, as member --hub-cluster-name, without a Secret.")
	fs.StringVar(&o.HubClusterName, "hub-cluster-name", o.HubClusterName, "Cluster name of the hub when --hub-is-member.")
	fs.BoolVar(&o.ClustersetAlias, "clusterset-alias", o.ClustersetAlias, "Give each ServiceImport an alias <service>-clusterset, an ExternalName Service naming its derived Service, so that <service>-clusterset.<namespace>.svc.<cluster domain> reaches it through the hub's cluster DNS as it is. A name held by another Service is left alone and reported (NameConflict).")
	fs.StringVar(&o.ClusterDomain, "cluster-domain", o.ClusterDomain, "The hub's cluster domain, which --clusterset-alias names the derived Services in.")
	fs.BoolVar(&o.PreferLocal, "prefer-local", o.PreferLocal, "With --hub-is-member: hint the hub's endpoints so that its kube-proxy uses the hub cluster's own ready endpoints first, the others when it has none, for every import whose exports do not set the endpoint-aggregator.io/prefer-local annotation.")
	fs.BoolVar(&o.KubeconfigPolicy.AllowExec, "allow-kubeconfig-exec", false, "Allow exec credential plugins in member kubeconfigs (runs commands!).")
	fs.BoolVar(&o.KubeconfigPolicy.AllowAuthProvider, "allow-kubeconfig-auth-provider", false, "Allow auth-provider plugins in member kubeconfigs.")
	fs.BoolVar(&o.KubeconfigPolicy.AllowTokenFile, "allow-kubeconfig-token-file", false, "Allow tokenFile in member kubeconfigs (reads local files).")
	fs.BoolVar(&o.KubeconfigPolicy.AllowFilePaths, "allow-kubeconfig-file-paths", false, "Allow certificate/key file paths in member kubeconfigs (reads local files).")
	fs.BoolVar(&o.KubeconfigPolicy.AllowInsecureSkipVerify, "allow-kubeconfig-insecure", false, "Allow insecure-skip-tls-verify, and plain http:// servers, in member kubeconfigs.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Run workers only while holding a Lease in --namespace; standbys keep warm caches.")
	fs.BoolVar(&o.ShardMembers, "shard-members", o.ShardMembers, "With --leader-elect, share the members among the replicas: each connects to and writes the members whose fence Lease it holds, and the leader assigns them and writes the merged objects. =false: the leader syncs every member and standbys keep warm caches of all of them.")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", o.LeaderElectionID, "Name of the leader election Lease.")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration, "How long a standby waits before taking over an unrenewed lease.")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline, "How long the leader retries renewing before it gives up (and exits).")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod, "How often candidates try to acquire or renew the lease.")
	fs.BoolVar(&o.KubeconfigPolicy.AllowProxy, "allow-kubeconfig-proxy", false, "Allow proxy-url in member kubeconfigs.")
	fs.StringSliceVar(&o.ClusterProfileNamespaces, "cluster-profile-namespaces", o.ClusterProfileNamespaces, "Also register a member per ClusterProfile (multicluster.x-k8s.io/v1alpha1) in these hub namespaces, named after it (default: none, off). Needs --access-provider-file.")
	fs.StringVar(&o.ClusterManager, "cluster-manager", o.ClusterManager, "Only ClusterProfiles labelled x-k8s.io/cluster-manager=<this> (default: all).")
	fs.StringVar(&o.AccessProviderFile, "access-provider-file", o.AccessProviderFile, "Access-provider file (sigs.k8s.io/cluster-inventory-api pkg/access format): the credential plugin per provider name of ClusterProfiles' status.accessProviders. The only source of plugin commands; arguments a ClusterProfile proposes are ignored.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "Address serving /metrics, /healthz and /readyz; 0 disables.")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", o.MetricsSecure, "Serve --metrics-bind-address over HTTPS, and /metrics (and pprof) only to clients whose bearer token the hub authenticates (TokenReview) and authorizes for get on the non-resource URL /metrics (SubjectAccessReview). /healthz and /readyz need no token. The daemon then needs create on tokenreviews and subjectaccessreviews.")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", o.MetricsCertDir, "Directory holding "+metricsCertFile+" and "+metricsKeyFile+" for --metrics-secure, reloaded when they change (default: a self-signed certificate generated at start).")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "Serve Go pprof profiles under /debug/pprof/ on --metrics-bind-address (they expose internals: use --metrics-secure or a private address).")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "How long SIGTERM may take: handing this replica's members over (--shard-members), then waiting for in-flight syncs. Keep it under the pod's terminationGracePeriodSeconds.")
}

// Validate checks the options; it returns every problem at once.
func (o *Options) Validate() error {
	var errs []error
	if errs1 := validation.IsDNS1123Label(o.Namespace); len(errs1) > 0 {
		errs = append(errs, fmt.Errorf("--namespace %q: %s", o.Namespace, errs1[0]))
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers must be at least 1, got %d", o.Workers))
	}
	if o.HubQPS <= 0 || o.MemberQPS <= 0 || o.HubBurst < 1 || o.MemberBurst < 1 {
		errs = append(errs, errors.New("client QPS and burst must be positive"))
	}
	if o.MemberLeaseQPS <= 0 || o.MemberLeaseBurst < 1 {
		errs = append(errs, errors.New("--member-lease-qps and --member-lease-burst must be positive"))
	}
	if _, err := easync.ParseExportMode(o.ExportMode); err != nil {
		errs = append(errs, fmt.Errorf("--export-mode: %w", err))
	}
	if _, err := endpoints.ParsePerClusterMode(o.PerClusterServices); err != nil {
		errs = append(errs, fmt.Errorf("--per-cluster-services: %w", err))
	}
	if errs1 := validation.IsDNS1123Label(o.HubClusterName); o.HubIsMember && len(errs1) > 0 {
		errs = append(errs, fmt.Errorf("--hub-cluster-name %q: %s", o.HubClusterName, errs1[0]))
	}
	if errs1 := validation.IsDNS1123Subdomain(o.ClusterDomain); o.ClustersetAlias && len(errs1) > 0 {
		errs = append(errs, fmt.Errorf("--cluster-domain %q: %s", o.ClusterDomain, errs1[0]))
	}
	if o.LeaderElect && !(o.LeaseDuration > o.RenewDeadline && o.RenewDeadline > o.RetryPeriod && o.RetryPeriod > 0) {
		errs = append(errs, errors.New("leader election needs lease duration > renew deadline > retry period > 0"))
	}
	if o.UnreachableGrace < 0 || o.UnreachableWithdraw < 0 || o.MemberLeaseDuration < 0 || o.ProbeInterval <= 0 || o.ProbeTimeout <= 0 {
		errs = append(errs, errors.New("unreachable, lease and probe durations must not be negative (probe ones positive)"))
	}
	if o.UnreachableGrace > 0 && o.UnreachableWithdraw > 0 && o.UnreachableWithdraw <= o.UnreachableGrace {
		errs = append(errs, errors.New("--unreachable-withdraw must be longer than --unreachable-grace"))
	}
	if o.MemberLeaseDuration > 0 && o.MemberLeaseDuration < 4*time.Second {
		errs = append(errs, errors.New("--member-lease-duration must be at least 4s"))
	}
	if o.MaxMemberServices < 0 || o.MaxMemberEndpoints < 0 {
		errs = append(errs, errors.New("--max-member-services and --max-member-endpoints must not be negative"))
	}
	if o.MaxMemberReadServices < 0 || o.MaxMemberReadEndpoints < 0 {
		errs = append(errs, errors.New("--max-member-read-services and --max-member-read-endpoints must not be negative"))
	}
	if o.MemberSyncTimeout <= 0 {
		errs = append(errs, errors.New("--member-sync-timeout must be positive"))
	}
	for flag, cidrs := range map[string][]string{"denied-endpoint-cidrs": o.DeniedEndpointCIDRs, "allowed-endpoint-cidrs": o.AllowedEndpointCIDRs, "hub-service-cidrs": o.HubServiceCIDRs} {
		if _, err := addresses.ParsePrefixes(cidrs); err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", flag, err))
		}
	}
	for _, ns := range o.ClusterProfileNamespaces {
		if errs1 := validation.IsDNS1123Label(ns); len(errs1) > 0 {
			errs = append(errs, fmt.Errorf("--cluster-profile-namespaces %q: %s", ns, errs1[0]))
		}
	}
	if o.MetricsCertDir != "" && !o.MetricsSecure {
		errs = append(errs, errors.New("--metrics-cert-dir needs --metrics-secure"))
	}
	if (len(o.ClusterProfileNamespaces) > 0) != (o.AccessProviderFile != "") {
		errs = append(errs, errors.New("--cluster-profile-namespaces and --access-provider-file go together"))
	}
	return errors.Join(errs...)
}

// sharded reports whether the replicas share the members: only with leader
// election, since the leader assigns them.
func (o *Options) sharded() bool { return o.ShardMembers && o.LeaderElect }

// exportPolicy builds the controller's export policy from validated options.
func (o *Options) exportPolicy() easync.ExportPolicy {
	mode, _ := easync.ParseExportMode(o.ExportMode)
	return easync.ExportPolicy{
		Mode:    mode,
		Include: sets.New(o.IncludeNamespaces...),
		Exclude: sets.New(o.ExcludeNamespaces...),
		Own:     o.Namespace,
	}
}

// addressPolicy builds the daemon's address policy from validated options:
// the hub's ServiceCIDRs are added by the controller unless fixed here.
func (o *Options) addressPolicy() addresses.Policy {
	denied, _ := addresses.ParsePrefixes(o.DeniedEndpointCIDRs)
	allowed, _ := addresses.ParsePrefixes(o.AllowedEndpointCIDRs)
	hub, _ := addresses.ParsePrefixes(o.HubServiceCIDRs)
	return addresses.Policy{HubServiceRanges: hub, Denied: denied, Allowed: allowed}
}
