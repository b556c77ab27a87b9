package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	cpclientset "sigs.k8s.io/cluster-inventory-api/client/clientset/versioned"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/addresses"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/explain"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

type explainOptions struct {
	kube        *kubeFlags
	HubContext  string
	Output      string
	ReadMembers bool
	// The daemon's flags that verdicts depend on.
	ExportMode          string
	IncludeNamespaces   []string
	ExcludeNamespaces   []string
	CreateNamespaces    bool
	PerClusterServices  string
	UnreachableGrace    time.Duration
	UnreachableWithdraw time.Duration
	HubIsMember         bool
	HubClusterName      string
	PreferLocal         bool
	// The daemon's address policy; the hub's ServiceCIDRs are read unless
	// HubServiceCIDRs is set.
	DeniedEndpointCIDRs  []string
	AllowedEndpointCIDRs []string
	HubServiceCIDRs      []string
	// Members from ClusterProfiles, as the daemon's flags say.
	ClusterProfileNamespaces []string
	ClusterManager           string
	AccessProviderFile       string

	namespace, service string // the argument
	// flags are the command's; those mirroring the daemon's take the
	// values it published unless given.
	flags *pflag.FlagSet
}

func newExplainCommand() *cobra.Command {
	d := NewOptions()
	o := &explainOptions{kube: newKubeFlags(), Output: "table", ReadMembers: true,
		ExportMode: d.ExportMode, ExcludeNamespaces: d.ExcludeNamespaces, PerClusterServices: d.PerClusterServices,
		UnreachableGrace: d.UnreachableGrace, UnreachableWithdraw: d.UnreachableWithdraw, HubClusterName: d.HubClusterName}
	cmd := &cobra.Command{
		Use:   "explain NAMESPACE/SERVICE [--hub-context H] [-o table|json|yaml]",
		Short: "Explain why a member Service is, or is not, imported",
		Long: `Explain why a member Service is, or is not, imported.

explain reads the hub (--hub-context): the registration Secrets and member
Leases in the daemon's namespace, the ServiceImport and derived Service, and
what the hub holds from each member (per-cluster Service and Endpoints, MCS
EndpointSlices and the export records on them). Unless --read-members=false,
it also reads each member through its registration Secret, read-only: the
Service, its EndpointSlices and its ServiceExport. It writes nothing.

Verdicts depend on the daemon's configuration, which it publishes in the
ConfigMap endpoint-aggregator-config of its namespace: explain takes the
flags below from there (--export-mode, --include-namespaces,
--exclude-namespaces, --create-namespaces, --per-cluster-services,
--unreachable-grace, --unreachable-withdraw, --hub-is-member,
--hub-cluster-name, --prefer-local, --denied-endpoint-cidrs,
--allowed-endpoint-cidrs, --hub-service-cidrs, --cluster-profile-namespaces,
--cluster-manager). A flag
given explicitly wins, with a warning when it differs; with nothing
published (an older daemon), the defaults below are assumed. The hub's
Service ranges are read from its ServiceCIDRs unless --hub-service-cidrs is
set. A verdict the hub's objects contradict (not exported, yet the hub holds
endpoints of that member) says so.

One row per registered member, then the ServiceImport, then one verdict per
member, e.g.:
  not exported: namespace kube-system is excluded by --exclude-namespaces
  not imported: hub namespace shop does not exist (start the daemon with --create-namespaces or create it)
  conflict: port http is 8080/TCP here and 80/TCP in the import, from the oldest export
  stale: member unreachable for 4m0s; its endpoints are kept (policy keep)
  imported: 3 endpoint(s) in the hub, 3 ready; 1 refused: 1 hub_service_range: 10.96.0.1 (inside the hub's Service range 10.96.0.0/12)`,
		Example: `  endpoint-aggregator explain shop/cart --hub-context hub
  endpoint-aggregator explain shop/cart --hub-context hub --export-mode=annotation -o yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.parseTarget(args[0]); err != nil {
				return err
			}
			if err := o.validate(); err != nil {
				return err
			}
			o.flags = cmd.Flags()
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	o.kube.addFlags(fs)
	fs.StringVar(&o.HubContext, "hub-context", o.HubContext, "Kubeconfig context of the hub cluster. Default: the current context.")
	fs.StringVarP(&o.Output, "output", "o", o.Output, "Output format: "+strings.Join(statusOutputs, ", ")+".")
	fs.BoolVar(&o.ReadMembers, "read-members", o.ReadMembers, "Read each member through its registration Secret (needs get on Secrets in the daemon's namespace).")
	fs.StringVar(&o.ExportMode, "export-mode", o.ExportMode, "The daemon's --export-mode.")
	fs.StringSliceVar(&o.IncludeNamespaces, "include-namespaces", o.IncludeNamespaces, "The daemon's --include-namespaces.")
	fs.StringSliceVar(&o.ExcludeNamespaces, "exclude-namespaces", o.ExcludeNamespaces, "The daemon's --exclude-namespaces.")
	fs.BoolVar(&o.CreateNamespaces, "create-namespaces", o.CreateNamespaces, "The daemon's --create-namespaces.")
	fs.StringVar(&o.PerClusterServices, "per-cluster-services", o.PerClusterServices, "The daemon's --per-cluster-services.")
	fs.DurationVar(&o.UnreachableGrace, "unreachable-grace", o.UnreachableGrace, "The daemon's --unreachable-grace.")
	fs.DurationVar(&o.UnreachableWithdraw, "unreachable-withdraw", o.UnreachableWithdraw, "The daemon's --unreachable-withdraw.")
	fs.BoolVar(&o.HubIsMember, "hub-is-member", o.HubIsMember, "The daemon's --hub-is-member.")
	fs.StringVar(&o.HubClusterName, "hub-cluster-name", o.HubClusterName, "The daemon's --hub-cluster-name.")
	fs.BoolVar(&o.PreferLocal, "prefer-local", o.PreferLocal, "The daemon's --prefer-local.")
	fs.StringSliceVar(&o.DeniedEndpointCIDRs, "denied-endpoint-cidrs", o.DeniedEndpointCIDRs, "The daemon's --denied-endpoint-cidrs.")
	fs.StringSliceVar(&o.AllowedEndpointCIDRs, "allowed-endpoint-cidrs", o.AllowedEndpointCIDRs, "The daemon's --allowed-endpoint-cidrs.")
	fs.StringSliceVar(&o.HubServiceCIDRs, "hub-service-cidrs", o.HubServiceCIDRs, "The daemon's --hub-service-cidrs (default: read the hub's ServiceCIDRs).")
	fs.StringSliceVar(&o.ClusterProfileNamespaces, "cluster-profile-namespaces", o.ClusterProfileNamespaces, "The daemon's --cluster-profile-namespaces: its ClusterProfile members get rows too.")
	fs.StringVar(&o.ClusterManager, "cluster-manager", o.ClusterManager, "The daemon's --cluster-manager.")
	fs.StringVar(&o.AccessProviderFile, "access-provider-file", o.AccessProviderFile, "The daemon's --access-provider-file, to read ClusterProfile members (runs its credential plugins); without it they are not read.")
	return cmd
}

func (o *explainOptions) parseTarget(arg string) error {
	ns, name, ok := strings.Cut(arg, "/")
	if !ok || ns == "" || name == "" {
		return fmt.Errorf("argument %q: want NAMESPACE/SERVICE", arg)
	}
	if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
		return fmt.Errorf("namespace %q: %s", ns, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsDNS1035Label(name); len(msgs) > 0 {
		return fmt.Errorf("service %q: %s", name, strings.Join(msgs, "; "))
	}
	o.namespace, o.service = ns, name
	return nil
}

func (o *explainOptions) validate() error {
	errs := append(o.kube.validate(), hubOutputErrors(o.kube, &o.HubContext, o.Output)...)
	if _, err := easync.ParseExportMode(o.ExportMode); err != nil {
		errs = append(errs, fmt.Errorf("--export-mode: %w", err))
	}
	if _, err := endpoints.ParsePerClusterMode(o.PerClusterServices); err != nil {
		errs = append(errs, fmt.Errorf("--per-cluster-services: %w", err))
	}
	for flag, cidrs := range map[string][]string{"denied-endpoint-cidrs": o.DeniedEndpointCIDRs, "allowed-endpoint-cidrs": o.AllowedEndpointCIDRs, "hub-service-cidrs": o.HubServiceCIDRs} {
		if _, err := addresses.ParsePrefixes(cidrs); err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", flag, err))
		}
	}
	return errors.Join(errs...)
}

func (o *explainOptions) run(ctx context.Context, out, errOut io.Writer) error {
	hub, err := o.kube.clients(o.HubContext)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	daemon := useDaemonConfig(ctx, hub, o.kube.Namespace, o.flags, errOut)
	if err := o.validate(); err != nil {
		return fmt.Errorf("the daemon's flags (%s): %w", daemon.Source, err)
	}
	in, err := o.read(ctx, hub, func(format string, args ...any) { fmt.Fprintf(errOut, "Warning: "+format+"\n", args...) })
	if err != nil {
		return err
	}
	r := explain.Build(in)
	r.DaemonConfig = daemon.Source
	return printExplanation(out, o.Output, r)
}

// read gathers what explain needs; warn reports what could not be read.
func (o *explainOptions) read(ctx context.Context, hub *cliClients, warn func(string, ...any)) (explain.Input, error) {
	pc, _ := endpoints.ParsePerClusterMode(o.PerClusterServices)
	mode, _ := easync.ParseExportMode(o.ExportMode)
	in := explain.Input{Namespace: o.namespace, Name: o.service, Now: time.Now(), Policy: explain.Policy{
		Export:           easync.ExportPolicy{Mode: mode, Include: sets.New(o.IncludeNamespaces...), Exclude: sets.New(o.ExcludeNamespaces...), Own: o.kube.Namespace},
		CreateNamespaces: o.CreateNamespaces,
		PerCluster:       pc, UnreachableGrace: o.UnreachableGrace, UnreachableWithdraw: o.UnreachableWithdraw,
		PreferLocal: o.PreferLocal,
	}}
	if o.HubIsMember {
		in.Policy.HubCluster = o.HubClusterName
	}
	in.Policy.Addresses = o.addressPolicy(ctx, hub, warn)
	secrets, err := hub.kube.CoreV1().Secrets(o.kube.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{clusters.LabelMemberCluster: clusters.MemberClusterValue}.String()})
	if err != nil {
		return in, fmt.Errorf("hub %s: listing registration Secrets in namespace %s: %w", hub.context, o.kube.Namespace, err)
	}
	leases := map[string]*coordinationv1.Lease{}
	owners := map[string]string{}
	if list, err := hub.kube.CoordinationV1().Leases(o.kube.Namespace).List(ctx, metav1.ListOptions{}); err != nil {
		warn("listing member Leases: %v; health is Unknown", err)
	} else {
		for i := range list.Items {
			if name, ok := strings.CutPrefix(list.Items[i].Name, easync.MemberLeasePrefix); ok {
				leases[name] = &list.Items[i]
			}
		}
		owners = fenceOwners(list.Items, time.Now())
	}

	if _, err := hub.kube.CoreV1().Namespaces().Get(ctx, o.namespace, metav1.GetOptions{}); err == nil {
		in.HubNamespace = true
	} else if !apierrors.IsNotFound(err) {
		warn("reading hub namespace %s: %v", o.namespace, err)
		in.HubNamespace = true // unknown: do not claim it is missing
	}
	if imp, err := hub.mcs.MulticlusterV1beta1().ServiceImports(o.namespace).Get(ctx, o.service, metav1.GetOptions{}); err == nil {
		in.Import = imp
	} else if !apierrors.IsNotFound(err) {
		warn("reading the ServiceImport: %v", err)
	}
	if svc, err := hub.kube.CoreV1().Services(o.namespace).Get(ctx, endpoints.DerivedServiceName(o.namespace, o.service), metav1.GetOptions{}); err == nil {
		in.Derived = svc
	}
	if o.HubIsMember {
		// "This cluster first" hints for the zones of the hub's Nodes.
		if nodes, err := hub.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
			warn("listing the hub's Nodes: %v; their zones are not shown", err)
		} else {
			for _, n := range nodes.Items {
				switch z := n.Labels[corev1.LabelTopologyZone]; {
				case z == "":
					in.HubNodesWithoutZone = append(in.HubNodesWithoutZone, n.Name)
				case !slices.Contains(in.HubZones, z):
					in.HubZones = append(in.HubZones, z)
				}
			}
			slices.Sort(in.HubZones)
		}
	}
	syncErrors := map[string]string{}
	if list, err := hub.kube.CoreV1().Events(o.namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.kind": "ServiceImport", "involvedObject.name": o.service}.String()}); err != nil {
		warn("listing the ServiceImport's Events: %v; a failing sync is not shown", err)
	} else {
		syncErrors = failingSyncs(list.Items, time.Now())
	}
	hubSlices := map[string][]*discoveryv1.EndpointSlice{}
	if list, err := hub.kube.DiscoveryV1().EndpointSlices(o.namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{
		mcsv1beta1.LabelServiceName: o.service, discoveryv1.LabelManagedBy: endpoints.SliceManagedByValue}.String()}); err != nil {
		warn("listing the hub's EndpointSlices: %v", err)
	} else {
		for i := range list.Items {
			c := list.Items[i].Labels[mcsv1beta1.LabelSourceCluster]
			hubSlices[c] = append(hubSlices[c], &list.Items[i])
		}
	}

	profiles, err := o.listClusterProfiles(ctx, hub)
	if err != nil {
		return in, err
	}
	var providers *clusters.AccessProviders
	if len(profiles) > 0 && o.ReadMembers && o.AccessProviderFile != "" {
		if providers, err = clusters.LoadAccessProviders(o.AccessProviderFile); err != nil {
			return in, fmt.Errorf("--access-provider-file: %w", err)
		}
	}

	// One member per cluster name: the oldest registration, Secret or
	// ClusterProfile, as the daemon does.
	type registration struct {
		created time.Time
		secret  *corev1.Secret
		profile *cpv1alpha1.ClusterProfile
	}
	var regs []registration
	for i := range secrets.Items {
		regs = append(regs, registration{created: secrets.Items[i].CreationTimestamp.Time, secret: &secrets.Items[i]})
	}
	for i := range profiles {
		regs = append(regs, registration{created: profiles[i].CreationTimestamp.Time, profile: &profiles[i]})
	}
	slices.SortStableFunc(regs, func(a, b registration) int { return a.created.Compare(b.created) })
	seen := map[string]bool{}
	add := func(m explain.Member, kube kubernetes.Interface, mcs mcsclientset.Interface) {
		m.Lease = leases[m.Name]
		m.Owner = owners[m.Name]
		m.HubSlices = hubSlices[m.Name]
		m.SyncError = syncErrors[m.Name]
		o.readHubPart(ctx, hub, &m)
		if kube != nil {
			m.Read = true
			o.readMember(ctx, kube, mcs, &m)
		}
		in.Members = append(in.Members, m)
	}
	for _, r := range regs {
		if cp := r.profile; cp != nil {
			if seen[cp.Name] {
				continue
			}
			seen[cp.Name] = true
			o.addProfileMember(ctx, cp, providers, warn, add)
			continue
		}
		s := r.secret
		name := s.Annotations[clusters.AnnotationClusterName]
		if name == "" {
			name = s.Name
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		m := explain.Member{Name: name, Secret: s.Name}
		p, err := clusters.ParsePolicyOverride(s.Annotations)
		if err != nil {
			warn("registration Secret %s: %v", s.Name, err)
		}
		m.UnreachableGrace, m.UnreachableWithdraw, m.AllowedEndpoints = p.Grace, p.Withdraw, p.AllowedEndpoints
		if !o.ReadMembers {
			add(m, nil, nil)
			continue
		}
		kube, mcs, err := o.memberClients(s)
		if err != nil {
			m.Read, m.ReadError = true, err.Error()
			add(m, nil, nil)
			continue
		}
		add(m, kube, mcs)
	}
	if o.HubIsMember && !seen[o.HubClusterName] {
		add(explain.Member{Name: o.HubClusterName}, hub.kube, hub.mcs)
	}
	return in, nil
}

// addressPolicy is the daemon's address policy from its flags, with the
// hub's Service ranges read from its ServiceCIDRs as the daemon reads them
// (unless --hub-service-cidrs).
func (o *explainOptions) addressPolicy(ctx context.Context, hub *cliClients, warn func(string, ...any)) addresses.Policy {
	denied, _ := addresses.ParsePrefixes(o.DeniedEndpointCIDRs)
	allowed, _ := addresses.ParsePrefixes(o.AllowedEndpointCIDRs)
	ranges, _ := addresses.ParsePrefixes(o.HubServiceCIDRs)
	p := addresses.Policy{Denied: denied, Allowed: allowed, HubServiceRanges: ranges}
	if len(ranges) > 0 {
		return p
	}
	list, err := hub.kube.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
	if err != nil {
		warn("listing the hub's ServiceCIDRs: %v; endpoints in its Service ranges are not flagged", err)
		return p
	}
	for _, sc := range list.Items {
		for _, cidr := range sc.Spec.CIDRs {
			r, err := netip.ParsePrefix(cidr)
			if err != nil {
				warn("hub ServiceCIDR %s: %q: %v", sc.Name, cidr, err)
				continue
			}
			p.HubServiceRanges = append(p.HubServiceRanges, r.Masked())
		}
	}
	return p
}

// listClusterProfiles lists the ClusterProfiles the daemon registers, when
// explain is told it does.
func (o *explainOptions) listClusterProfiles(ctx context.Context, hub *cliClients) ([]cpv1alpha1.ClusterProfile, error) {
	if len(o.ClusterProfileNamespaces) == 0 {
		return nil, nil
	}
	client, err := cpclientset.NewForConfig(hub.config)
	if err != nil {
		return nil, err
	}
	var selector string
	if o.ClusterManager != "" {
		selector = labels.Set{cpv1alpha1.LabelClusterManagerKey: o.ClusterManager}.String()
	}
	var out []cpv1alpha1.ClusterProfile
	for _, ns := range o.ClusterProfileNamespaces {
		list, err := client.ApisV1alpha1().ClusterProfiles(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return nil, fmt.Errorf("hub %s: listing ClusterProfiles in namespace %s: %w", hub.context, ns, err)
		}
		out = append(out, list.Items...)
	}
	return out, nil
}

// addProfileMember adds the row of a member registered by a ClusterProfile,
// read through the access-provider file when there is one.
func (o *explainOptions) addProfileMember(ctx context.Context, cp *cpv1alpha1.ClusterProfile, providers *clusters.AccessProviders,
	warn func(string, ...any), add func(explain.Member, kubernetes.Interface, mcsclientset.Interface)) {
	m := explain.Member{Name: cp.Name, ClusterProfile: cp.Namespace + "/" + cp.Name, ControlPlane: clusters.ControlPlaneUnhealthy(cp)}
	p, err := clusters.ParsePolicyOverride(cp.Annotations)
	if err != nil {
		warn("ClusterProfile %s/%s: %v", cp.Namespace, cp.Name, err)
	}
	m.UnreachableGrace, m.UnreachableWithdraw, m.AllowedEndpoints = p.Grace, p.Withdraw, p.AllowedEndpoints
	if providers == nil || !o.ReadMembers {
		add(m, nil, nil)
		return
	}
	kube, mcs, err := o.clientsFor(providers.RESTConfig(cp, clusters.KubeconfigPolicy{}))
	if err != nil {
		m.Read, m.ReadError = true, fmt.Sprintf("ClusterProfile %s/%s: %v", cp.Namespace, cp.Name, err)
		add(m, nil, nil)
		return
	}
	add(m, kube, mcs)
}

// memberClients builds read-only clients of a member from its Secret, with
// the daemon's default kubeconfig policy: no exec plugin, no local file.
func (o *explainOptions) memberClients(s *corev1.Secret) (kubernetes.Interface, mcsclientset.Interface, error) {
	kube, mcs, err := o.clientsFor(clusters.RESTConfig(s.Data[clusters.KubeconfigKey], clusters.KubeconfigPolicy{}))
	if err != nil {
		return nil, nil, fmt.Errorf("registration Secret %s: %w", s.Name, err)
	}
	return kube, mcs, nil
}

// clientsFor builds read-only member clients from cfg (or returns err).
func (o *explainOptions) clientsFor(cfg *rest.Config, err error) (kubernetes.Interface, mcsclientset.Interface, error) {
	if err != nil {
		return nil, nil, err
	}
	cfg.Timeout = o.kube.RequestTimeout
	cfg.UserAgent = "endpoint-aggregator-cli/" + version()
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	mcs, err := mcsclientset.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	return kube, mcs, nil
}

// readMember reads the member's Service, slices and ServiceExport, the
// latter in the version the member serves.
func (o *explainOptions) readMember(ctx context.Context, kube kubernetes.Interface, mcs mcsclientset.Interface, m *explain.Member) {
	svc, err := kube.CoreV1().Services(o.namespace).Get(ctx, o.service, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		m.ReadError = err.Error()
		return
	default:
		m.Service = svc
	}
	list, err := kube.DiscoveryV1().EndpointSlices(o.namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{discoveryv1.LabelServiceName: o.service}.String()})
	if err != nil {
		m.ReadError = err.Error()
		return
	}
	for i := range list.Items {
		m.Slices = append(m.Slices, endpoints.ProjectSlice(&list.Items[i]))
	}
	v, err := clusters.ServedExportVersion(ctx, kube.Discovery())
	if err != nil {
		m.ReadError = err.Error()
		return
	}
	m.ExportVersion = string(v)
	switch v {
	case clusters.ExportV1beta1:
		if se, err := mcs.MulticlusterV1beta1().ServiceExports(o.namespace).Get(ctx, o.service, metav1.GetOptions{}); err == nil {
			m.Export = se
		}
	case clusters.ExportV1alpha1:
		if se, err := mcs.MulticlusterV1alpha1().ServiceExports(o.namespace).Get(ctx, o.service, metav1.GetOptions{}); err == nil {
			m.Export = clusters.ServiceExportV1beta1(se)
		}
	}
}

// readHubPart reads the member's per-cluster Service and Endpoints.
func (o *explainOptions) readHubPart(ctx context.Context, hub *cliClients, m *explain.Member) {
	name, _ := endpoints.PerClusterName(o.service, m.Name)
	if svc, err := hub.kube.CoreV1().Services(o.namespace).Get(ctx, name, metav1.GetOptions{}); err == nil {
		if svc.Labels[endpoints.LabelManagedBy] == endpoints.ManagedByValue && svc.Labels[endpoints.LabelSourceCluster] == m.Name {
			m.HubService = svc
		} else {
			m.HubServiceTaken = true
		}
	}
	if eps, err := hub.kube.CoreV1().Endpoints(o.namespace).Get(ctx, name, metav1.GetOptions{}); err == nil &&
		eps.Labels[endpoints.LabelManagedBy] == endpoints.ManagedByValue {
		m.HubEndpoints = eps
	}
}

func printExplanation(w io.Writer, format string, r explain.Report) error {
	if done, err := printStructured(w, format, r); done {
		return err
	}
	fmt.Fprintf(w, "Service %s\n\n", r.Service)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tCONNECTED\tHEALTHY\tSERVICE\tEXPORT\tREADY/NOT READY/DROPPED\tIN THE HUB")
	for _, m := range r.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d/%d\t%s\n", m.Cluster, m.Connected, m.Healthy, m.Service, m.Export, m.Ready, m.NotReady, m.Dropped, m.Hub)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, m := range r.Members {
		if m.Owner != "" {
			fmt.Fprintf(w, "  %s written by replica %s\n", m.Cluster, m.Owner)
		}
		if m.ReadError != "" {
			fmt.Fprintf(w, "  %s not read: %s\n", m.Cluster, m.ReadError)
		}
		if len(m.Conditions) > 0 {
			fmt.Fprintf(w, "  %s ServiceExport: %s\n", m.Cluster, strings.Join(m.Conditions, ", "))
		}
	}
	fmt.Fprintln(w)
	if imp := r.Import; imp != nil {
		fmt.Fprintf(w, "ServiceImport %s: %s, ports %s, IPs %s, clusters %s\n", r.Service, imp.Type,
			orNone(imp.Ports), orNone(imp.IPs), orNone(imp.Clusters))
		for _, c := range imp.Conditions {
			fmt.Fprintf(w, "  %s\n", c)
		}
		fmt.Fprintf(w, "  derived Service: %s\n", imp.Derived)
	} else {
		fmt.Fprintf(w, "ServiceImport %s: none (%s)\n", r.Service, r.ImportMissing)
	}
	if l := r.Locality; l != nil {
		fmt.Fprintf(w, "Locality: %s\n", l.Mode)
		if l.Why != "" {
			fmt.Fprintf(w, "  %s\n", l.Why)
		}
		for _, h := range l.Hinted {
			fmt.Fprintf(w, "  ready endpoints of %s\n", h)
		}
		for _, n := range l.Nodes {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
	for _, u := range r.UnreadableRecords {
		fmt.Fprintf(w, "  unreadable export record, the merge waits for its member's sync to rewrite it: %s\n", u)
	}
	if r.DaemonConfig != "" {
		fmt.Fprintf(w, "\nThe daemon's configuration: %s\n", r.DaemonConfig)
	}
	fmt.Fprintln(w, "\nVerdicts:")
	for _, m := range r.Members {
		fmt.Fprintf(w, "  %s: %s\n", m.Cluster, m.Verdict)
	}
	return nil
}

// fenceOwners describes, from the Leases of the daemon's namespace, who
// writes each member's hub objects when replicas share the members, as
// status's OWNER column does.
func fenceOwners(leases []coordinationv1.Lease, now time.Time) map[string]string {
	out := map[string]string{}
	for c, o := range fenceOwnership(leases, now) {
		out[c] = o.cell()
	}
	return out
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "<none>"
	}
	return strings.Join(list, ",")
}
