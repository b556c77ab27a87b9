package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/daemonconfig"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

type statusOptions struct {
	kube       *kubeFlags
	HubContext string
	Output     string
}

func (o *statusOptions) addFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	o.kube.addFlags(fs)
	fs.StringVar(&o.HubContext, "hub-context", o.HubContext, "Kubeconfig context of the hub cluster. Default: the current context.")
	fs.StringVarP(&o.Output, "output", "o", o.Output, "Output format: "+strings.Join(statusOutputs, ", ")+".")
}

func (o *statusOptions) validate() error {
	return errors.Join(append(o.kube.validate(), hubOutputErrors(o.kube, &o.HubContext, o.Output)...)...)
}

// hubOutputErrors checks the --hub-context and --output of a reading
// command (status, explain).
func hubOutputErrors(kube *kubeFlags, hubContext *string, output string) []error {
	var errs []error
	if err := kube.defaultHubContext(hubContext); err != nil {
		errs = append(errs, err)
	}
	if !slices.Contains(statusOutputs, output) {
		errs = append(errs, fmt.Errorf("--output %q: want one of %s", output, strings.Join(statusOutputs, ", ")))
	}
	return errs
}

func newStatusCommand() *cobra.Command {
	o := &statusOptions{kube: newKubeFlags(), Output: "table"}
	return newOperatorCommand(o, &cobra.Command{
		Use:   "status [--hub-context H] [-o table|json|yaml]",
		Short: "Show the registered members and what the hub holds of each",
		Long: `Show the registered members and what the hub holds of each.

status reads everything from the hub (--hub-context), in the daemon's
namespace (--namespace) and its output namespaces; it does not contact the
members. One row per registration Secret, plus one per cluster that has hub
objects or a member Lease but no Secret (the hub itself with --hub-is-member,
or a member that is being withdrawn).

  CONNECTED, SYNCED  from the latest Events the daemon recorded on the Secret
                     (MemberConnected, MemberSyncTimeout, ...): True, False,
                     or Unknown when there are none (Events expire after an
                     hour by default). A Lease endpoint-aggregator-member-<name>
                     in the namespace, when present, decides CONNECTED: renewed
                     within its duration or not, unless the daemon published
                     on it that the member is unreachable (it does so as soon
                     as its probe sees it, before the Lease lapses).
  SERVICES           member Services the hub imports (ServiceImport
                     status.clusters and per-cluster Services).
  OWNER              with replicas sharing the members (--shard-members):
                     the replica holding the member's fence Lease, "(to X)"
                     while it is handed to replica X, "(lapsed)" when that
                     replica's peer Lease was not renewed in time.
  SERVICEEXPORT      shown when a member serves ServiceExports other than as
                     v1beta1: the version the daemon reads them in (v1alpha1),
                     or "ServiceExport not served" for a member without the
                     CRD, which is synced with nothing exported.
  ENDPOINTS          endpoints in the hub EndpointSlices sourced from it.
  CONFLICT           how many ServiceImports of its exports have Conflict=True,
                     which, and the conflict reasons (the condition's message
                     with -o json or -o yaml; the ExportConflict Events on
                     the ServiceImport say what differs).
  LAST ERROR         why the member fails, its cause first (Unauthorized,
                     Forbidden, TLSError, ConnectionRefused, Timeout, DNSError,
                     NotAPIServer, ...), as the daemon published it on the
                     member Lease; else the latest Warning Event, if not
                     resolved since (full text with -o json or -o yaml).
  AGE                age of the registration Secret.

Before the table, on stderr, the daemon's version and main flags, from the
configuration it publishes (ConfigMap endpoint-aggregator-config).`,
		Example: `  endpoint-aggregator status --hub-context hub
  endpoint-aggregator status --hub-context hub -n endpoint-aggregator -o json`,
	})
}

func (o *statusOptions) run(ctx context.Context, out, errOut io.Writer) error {
	hub, err := o.kube.clients(o.HubContext)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	// status has no flag of the daemon's to fill in: it only shows them,
	// and says nothing when none are published.
	if c, err := daemonconfig.Read(ctx, hub.kube.CoreV1(), o.kube.Namespace); err == nil && c != nil {
		fmt.Fprintln(errOut, daemonSummary(daemonFlags{Config: c, Source: "ConfigMap " + o.kube.Namespace + "/" + daemonconfig.Name}))
		if c.Flags["hub-is-member"] == "true" {
			if nodes, err := hub.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
				fmt.Fprintf(errOut, "Warning: listing the hub's Nodes: %v; their zones are not checked\n", err)
			} else if note := unzonedNodesNote(nodes.Items); note != "" {
				fmt.Fprintln(errOut, note)
			}
		}
	}
	in, err := listStatusInput(ctx, hub, o.kube.Namespace, func(what string, err error) {
		fmt.Fprintf(errOut, "Warning: listing %s: %v; the table may be incomplete\n", what, err)
	})
	if err != nil {
		return err
	}
	now := time.Now()
	rows := buildMemberStatuses(now, in)
	if len(rows) == 0 {
		if err := noRegistrations(ctx, hub, o.kube.Namespace); err != nil && (o.Output == "table" || errors.Is(err, errNoNamespace)) {
			return err
		}
	}
	return printMemberStatuses(out, o.Output, o.kube.Namespace, rows, now)
}

var errNoNamespace = errors.New("namespace not found")

// noRegistrations explains an empty namespace: whether it exists, and where
// registrations are instead (a mistyped -n is the usual cause).
func noRegistrations(ctx context.Context, hub *cliClients, ns string) error {
	hint := "register a member with `endpoint-aggregator register`"
	all, err := hub.kube.CoreV1().Secrets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{clusters.LabelMemberCluster: clusters.MemberClusterValue}.String()})
	if err == nil {
		var elsewhere []string
		for _, s := range all.Items {
			if !slices.Contains(elsewhere, s.Namespace) {
				elsewhere = append(elsewhere, s.Namespace)
			}
		}
		slices.Sort(elsewhere)
		if len(elsewhere) > 0 {
			hint = fmt.Sprintf("registrations exist in namespace %s: pass -n %s", strings.Join(elsewhere, ", "), elsewhere[0])
		}
	}
	if _, err := hub.kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return fmt.Errorf("hub %s: %w: %s (the daemon's --namespace; %s)", hub.context, errNoNamespace, ns, hint)
	}
	return fmt.Errorf("hub %s: no members registered in namespace %s (%s)", hub.context, ns, hint)
}

// listStatusInput lists what status needs from the hub. Only the Secrets are
// essential; other failures are reported to warn and leave gaps.
func listStatusInput(ctx context.Context, hub *cliClients, ns string, warn func(what string, err error)) (statusInput, error) {
	in := statusInput{Namespace: ns}
	secrets, err := hub.kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{clusters.LabelMemberCluster: clusters.MemberClusterValue}.String()})
	if err != nil {
		return in, fmt.Errorf("hub %s: listing registration Secrets in namespace %s: %w", hub.context, ns, err)
	}
	in.Secrets = secrets.Items

	if events, err := hub.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Secret"}); err != nil {
		warn("Events", err)
	} else {
		in.Events = events.Items
	}
	if events, err := hub.kube.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=ServiceImport"}); err != nil {
		warn("Events about ServiceImports", err)
	} else {
		in.ImportEvents = events.Items
	}
	if leases, err := hub.kube.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{}); err != nil {
		warn("Leases", err)
	} else {
		in.Leases = leases.Items
	}

	ours := labels.Set{endpoints.LabelManagedBy: endpoints.ManagedByValue}.String()
	if imports, err := hub.mcs.MulticlusterV1beta1().ServiceImports(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: ours}); err != nil {
		if !apierrors.IsNotFound(err) { // no mcs-api CRDs in the hub
			warn("ServiceImports", err)
		}
	} else {
		in.ServiceImports = imports.Items
	}
	if svcs, err := hub.kube.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: withKey(ours, endpoints.LabelSourceCluster)}); err != nil {
		warn("Services", err)
	} else {
		in.Services = svcs.Items
	}
	sliceSel := withKey(labels.Set{discoveryv1.LabelManagedBy: endpoints.SliceManagedByValue}.String(), mcsv1beta1.LabelSourceCluster)
	if sl, err := hub.kube.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: sliceSel}); err != nil {
		warn("EndpointSlices", err)
	} else {
		in.EndpointSlices = sl.Items
	}
	return in, nil
}

// withKey adds "key exists" to a label selector.
func withKey(selector, key string) string {
	r, err := labels.NewRequirement(key, selection.Exists, nil)
	if err != nil {
		return selector
	}
	return selector + "," + r.String()
}

// statusDaemonFlags are the published flags status shows, in this order.
var statusDaemonFlags = []string{"export-mode", "include-namespaces", "exclude-namespaces", "per-cluster-services",
	"hub-is-member", "hub-cluster-name", "prefer-local", "unreachable-grace", "unreachable-withdraw", "shard-members"}

// unzonedNodesNote names the hub's Nodes without a zone label, where the
// hub is a member: "this cluster first" hints for zones, so kube-proxy on
// them uses every cluster's endpoints. "" when every Node has a zone.
func unzonedNodesNote(nodes []corev1.Node) string {
	var names []string
	for _, n := range nodes {
		if n.Labels[corev1.LabelTopologyZone] == "" {
			names = append(names, n.Name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	return fmt.Sprintf("Note: %d hub Node(s) have no %s label (%s): kube-proxy there uses every cluster's endpoints, also for imports that prefer the hub's own.",
		len(names), corev1.LabelTopologyZone, strings.Join(names, ", "))
}

// daemonSummary is one line on the daemon's published configuration.
func daemonSummary(d daemonFlags) string {
	var flags []string
	for _, k := range statusDaemonFlags {
		if v, ok := d.Config.Flags[k]; ok && (k != "hub-cluster-name" && k != "prefer-local" || d.Config.Flags["hub-is-member"] == "true") {
			flags = append(flags, "--"+k+"="+v)
		}
	}
	version := d.Config.Version
	if version == "" {
		version = "(unknown version)"
	}
	return fmt.Sprintf("Daemon %s runs with %s (%s).", version, strings.Join(flags, " "), d.Source)
}
