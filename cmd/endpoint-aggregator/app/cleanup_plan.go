package app

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/daemonconfig"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/shard"
)

// managedBySelector selects the hub objects the daemon writes, except its
// EndpointSlices (sliceSelector): slices the hub mirrors from our Endpoints
// copy this label.
var (
	managedBySelector = labels.Set{endpoints.LabelManagedBy: endpoints.ManagedByValue}.String()
	sliceSelector     = labels.Set{discoveryv1.LabelManagedBy: endpoints.SliceManagedByValue}.String()
)

// The kinds cleanup deletes, in the order it deletes them: endpoints before
// the Services that route them, the ServiceImports DNS answers from after
// their Services, the Leases that tell a running daemon, and last the
// configuration it published.
const (
	kindSlice         = "EndpointSlice"
	kindEndpoints     = "Endpoints"
	kindService       = "Service"
	kindServiceImport = "ServiceImport"
	kindLease         = "Lease"
	kindConfigMap     = "ConfigMap"
)

var cleanupOrder = []string{kindSlice, kindEndpoints, kindService, kindServiceImport, kindLease, kindConfigMap}

// Results of a cleanup object.
const (
	resultWouldDelete = "would delete"
	resultDeleted     = "deleted"
	resultGone        = "already gone"
	resultReplaced    = "replaced since listed; left alone"
)

// cleanupObject is one hub object cleanup deletes.
type cleanupObject struct {
	Kind      string    `json:"kind"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Role      string    `json:"role,omitempty"`
	Result    string    `json:"result"`
	UID       types.UID `json:"-"`
}

type cleanupReport struct {
	Hub       string          `json:"hub"`
	Namespace string          `json:"namespace"`
	DryRun    bool            `json:"dryRun"`
	Counts    map[string]int  `json:"counts"`
	Objects   []cleanupObject `json:"objects"`
}

// listCleanup lists what cleanup deletes, in deletion order. It fails when
// any list fails, before anything is deleted; a hub without the mcs-api CRDs
// has no ServiceImports.
func listCleanup(ctx context.Context, hub *cliClients, ns, leaderLease string) ([]cleanupObject, error) {
	var plan []cleanupObject
	add := func(kind string, m metav1.Object, role string) {
		plan = append(plan, cleanupObject{Kind: kind, Namespace: m.GetNamespace(), Name: m.GetName(), Role: role, Result: resultWouldDelete, UID: m.GetUID()})
	}
	all := metav1.NamespaceAll
	slices, err := hub.kube.DiscoveryV1().EndpointSlices(all).List(ctx, metav1.ListOptions{LabelSelector: sliceSelector})
	if err != nil {
		return nil, fmt.Errorf("listing EndpointSlices: %w", err)
	}
	for i := range slices.Items {
		add(kindSlice, &slices.Items[i], "merged")
	}
	ours := metav1.ListOptions{LabelSelector: managedBySelector}
	eps, err := hub.kube.CoreV1().Endpoints(all).List(ctx, ours)
	if err != nil {
		return nil, fmt.Errorf("listing Endpoints: %w", err)
	}
	for i := range eps.Items {
		add(kindEndpoints, &eps.Items[i], "per-cluster")
	}
	svcs, err := hub.kube.CoreV1().Services(all).List(ctx, ours)
	if err != nil {
		return nil, fmt.Errorf("listing Services: %w", err)
	}
	for i := range svcs.Items {
		role := "per-cluster"
		switch s := &svcs.Items[i]; {
		case s.Labels[endpoints.LabelSourceCluster] != "":
		case s.Spec.Type == corev1.ServiceTypeExternalName:
			role = "alias"
		default:
			role = "derived"
		}
		add(kindService, &svcs.Items[i], role)
	}
	imports, err := hub.mcs.MulticlusterV1beta1().ServiceImports(all).List(ctx, ours)
	switch {
	case apierrors.IsNotFound(err): // no mcs-api CRDs
	case err != nil:
		return nil, fmt.Errorf("listing ServiceImports: %w", err)
	default:
		for i := range imports.Items {
			add(kindServiceImport, &imports.Items[i], "")
		}
	}
	leases, err := hub.kube.CoordinationV1().Leases(ns).List(ctx, ours)
	if err != nil {
		return nil, fmt.Errorf("listing Leases in namespace %s: %w", ns, err)
	}
	for i := range leases.Items {
		add(kindLease, &leases.Items[i], "member liveness")
	}
	// The Leases of sharing replicas: their peer Leases and the members'
	// fences.
	shardLeases, err := hub.kube.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: shard.LabelRole})
	if err != nil {
		return nil, fmt.Errorf("listing Leases in namespace %s: %w", ns, err)
	}
	for i := range shardLeases.Items {
		role := "member fence"
		if shardLeases.Items[i].Labels[shard.LabelRole] == shard.RolePeer {
			role = "replica"
		}
		add(kindLease, &shardLeases.Items[i], role)
	}
	// client-go's lock does not label the leader election Lease: it is
	// known by name alone.
	if leaderLease != "" {
		l, err := hub.kube.CoordinationV1().Leases(ns).Get(ctx, leaderLease, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("getting the leader election Lease %s/%s: %w", ns, leaderLease, err)
		case l.Labels[endpoints.LabelManagedBy] != endpoints.ManagedByValue: // else listed above
			add(kindLease, l, "leader election")
		}
	}
	// The daemon's published configuration, known by name.
	cm, err := hub.kube.CoreV1().ConfigMaps(ns).Get(ctx, daemonconfig.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("getting the daemon's configuration, ConfigMap %s/%s: %w", ns, daemonconfig.Name, err)
	case cm.Labels[endpoints.LabelManagedBy] == endpoints.ManagedByValue:
		add(kindConfigMap, cm, "configuration")
	}
	sortCleanup(plan)
	return plan, nil
}

// sortCleanup puts plan in deletion order, then by namespace and name.
func sortCleanup(plan []cleanupObject) {
	rank := map[string]int{}
	for i, k := range cleanupOrder {
		rank[k] = i
	}
	sort.SliceStable(plan, func(i, j int) bool {
		a, b := plan[i], plan[j]
		if a.Kind != b.Kind {
			return rank[a.Kind] < rank[b.Kind]
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
}

// deleteCleanup deletes plan in order, each object only if it still has the
// UID it was listed with, and records each result. It goes on past errors
// and returns them.
func deleteCleanup(ctx context.Context, hub *cliClients, plan []cleanupObject) []error {
	var errs []error
	for i := range plan {
		o := &plan[i]
		opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &o.UID}}
		var err error
		switch o.Kind {
		case kindSlice:
			err = hub.kube.DiscoveryV1().EndpointSlices(o.Namespace).Delete(ctx, o.Name, opts)
		case kindEndpoints:
			err = hub.kube.CoreV1().Endpoints(o.Namespace).Delete(ctx, o.Name, opts)
		case kindService:
			err = hub.kube.CoreV1().Services(o.Namespace).Delete(ctx, o.Name, opts)
		case kindServiceImport:
			err = hub.mcs.MulticlusterV1beta1().ServiceImports(o.Namespace).Delete(ctx, o.Name, opts)
		case kindLease:
			err = hub.kube.CoordinationV1().Leases(o.Namespace).Delete(ctx, o.Name, opts)
		case kindConfigMap:
			err = hub.kube.CoreV1().ConfigMaps(o.Namespace).Delete(ctx, o.Name, opts)
		default:
			err = fmt.Errorf("unknown kind %s", o.Kind)
		}
		switch {
		case err == nil:
			o.Result = resultDeleted
		case apierrors.IsNotFound(err):
			o.Result = resultGone
		case apierrors.IsConflict(err): // the UID precondition: a new object holds the name
			o.Result = resultReplaced
		default:
			o.Result = "error: " + err.Error()
			errs = append(errs, fmt.Errorf("hub %s: deleting %s %s/%s: %w", hub.context, o.Kind, o.Namespace, o.Name, err))
		}
	}
	return errs
}

// cleanupLeaseHeld reports whether l has a holder that renewed it within its
// duration, by the local clock.
func cleanupLeaseHeld(l *coordinationv1.Lease, now time.Time) bool {
	s := l.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
		return false
	}
	return now.Before(s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second))
}

func cleanupHolder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return "<nobody>"
	}
	return *l.Spec.HolderIdentity
}

// cleanupCounts counts plan's objects by kind, leaving out those not deleted
// (or, in a dry run, to delete).
func cleanupCounts(plan []cleanupObject) map[string]int {
	n := map[string]int{}
	for _, o := range plan {
		if o.Result == resultDeleted || o.Result == resultWouldDelete {
			n[o.Kind]++
		}
	}
	return n
}

// cleanupSummary says what was deleted (or would be), by kind.
func cleanupSummary(plan []cleanupObject, dryRun bool) string {
	if len(plan) == 0 {
		return "Nothing to delete: the hub holds nothing the daemon wrote."
	}
	n := cleanupCounts(plan)
	var parts []string
	total := 0
	for _, k := range cleanupOrder {
		if n[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[k], cleanupPlural(k, n[k])))
			total += n[k]
		}
	}
	what := strings.Join(parts, ", ")
	if total == 0 {
		what = "nothing"
	}
	if dryRun {
		return fmt.Sprintf("Dry run: would delete %s. Nothing was deleted.", what)
	}
	return fmt.Sprintf("Deleted %s.", what)
}

func cleanupPlural(kind string, n int) string {
	if n == 1 || strings.HasSuffix(kind, "s") {
		return kind
	}
	return kind + "s"
}

// printCleanup writes the report as a table, JSON or YAML.
func printCleanup(w io.Writer, format string, r cleanupReport) error {
	if r.Objects == nil {
		r.Objects = []cleanupObject{}
	}
	r.Counts = cleanupCounts(r.Objects)
	if done, err := printStructured(w, format, r); done {
		return err
	}
	switch format {
	case "table", "":
		if len(r.Objects) == 0 {
			return nil
		}
		tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
		fmt.Fprintln(tw, "KIND\tNAMESPACE\tNAME\tROLE\tRESULT")
		for _, o := range r.Objects {
			role := o.Role
			if role == "" {
				role = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", o.Kind, o.Namespace, o.Name, role, o.Result)
		}
		return tw.Flush()
	}
	return fmt.Errorf("unknown output format %q (want one of %s)", format, strings.Join(statusOutputs, ", "))
}
