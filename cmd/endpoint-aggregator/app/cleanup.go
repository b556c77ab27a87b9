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
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/shard"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

type cleanupOptions struct {
	kube             *kubeFlags
	HubContext       string
	InCluster        bool
	Output           string
	DryRun           bool
	Force            bool
	Wait             time.Duration
	LeaderElectionID string
	DeleteDeployment string

	// For tests: the clock, and how often waits poll.
	now  func() time.Time
	poll time.Duration
	// flags are the command's: --leader-election-id, when not given, is
	// the one the daemon published. nil in tests.
	flags *pflag.FlagSet
}

func newCleanupCommand() *cobra.Command {
	o := &cleanupOptions{kube: newKubeFlags(), Output: "table", LeaderElectionID: NewOptions().LeaderElectionID}
	return newOperatorCommand(o, &cobra.Command{
		Use:   "cleanup [--hub-context H] [--dry-run] [--force] [-o table|json|yaml]",
		Short: "Delete every hub object the daemon wrote (after helm uninstall)",
		Long: `Delete every hub object the daemon wrote.

Uninstalling the daemon (helm uninstall, kubectl delete) stops it but leaves
its output in the hub: Stopping is not unregistering. cleanup finds that
output by its labels and deletes it, in this order, so that clients lose
endpoints before names:
  EndpointSlices  endpointslice.kubernetes.io/managed-by=endpoint-aggregator.io,
                  all namespaces (the slices the hub mirrors from our
                  Endpoints are its controller's; it deletes them with them)
  Endpoints       app.kubernetes.io/managed-by=endpoint-aggregator, all namespaces
  Services        the same label: derived-<hash> and <svc>-<cluster> Services
  ServiceImports  the same label
  Leases          the member liveness Leases (same label), the leader
                  election Lease --leader-election-id, and the replica and
                  member fence Leases of sharing replicas (label
                  endpoint-aggregator.io/shard), in the daemon's
                  namespace (--namespace)
  ConfigMap       endpoint-aggregator-config in that namespace: the
                  configuration the daemon published (same label); its
                  --leader-election-id is used unless the flag is given
An object without the label is never touched, even where its name is one the
daemon would use (a user's own cart-east Service stays). Left in place too:
the registration Secrets (they are yours: "endpoint-aggregator unregister"
deletes one), namespaces the daemon created with --create-namespaces, the
daemon's Events (they expire), the CRDs, and everything in the members.

A running daemon would recreate what cleanup deletes, so cleanup refuses,
deleting nothing, while one runs: while the leader election Lease is held or
a member or replica Lease was renewed within its duration. --wait waits that long for
those Leases to be released or to lapse; --force deletes anyway.
--delete-deployment first deletes the daemon's Deployment (foreground: it is
gone once its pods are) and waits for it within --wait; the chart's opt-in
pre-delete hook (cleanup.onUninstall) runs cleanup that way.`,
		Example: `  # After helm uninstall: what would go?
  endpoint-aggregator cleanup --hub-context hub --dry-run

  # Delete it, waiting up to a minute for the daemon's Leases to lapse:
  endpoint-aggregator cleanup --hub-context hub --wait 1m`,
	})
}

func (o *cleanupOptions) addFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	o.flags = fs
	o.kube.addFlags(fs)
	fs.StringVar(&o.HubContext, "hub-context", o.HubContext, "Kubeconfig context of the hub cluster. Default: the current context, unless --in-cluster.")
	fs.BoolVar(&o.InCluster, "in-cluster", o.InCluster, "Reach the hub with the pod's ServiceAccount instead of a kubeconfig (the chart's hook).")
	fs.StringVarP(&o.Output, "output", "o", o.Output, "Output format: "+strings.Join(statusOutputs, ", ")+".")
	fs.BoolVar(&o.DryRun, "dry-run", o.DryRun, "Print what would be deleted; delete nothing.")
	fs.BoolVar(&o.Force, "force", o.Force, "Delete even while a daemon runs (it recreates what it writes).")
	fs.DurationVar(&o.Wait, "wait", o.Wait, "How long to wait for a running daemon to stop (its Leases released or lapsed; with --delete-deployment, its Deployment gone) before refusing.")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", o.LeaderElectionID, "The daemon's --leader-election-id: the name of its leader election Lease (the chart's: the release's full name). Empty: none.")
	fs.StringVar(&o.DeleteDeployment, "delete-deployment", o.DeleteDeployment, "First delete the daemon's Deployment of this name in --namespace and wait (within --wait) until its pods are gone.")
}

func (o *cleanupOptions) validate() error {
	errs := o.kube.validate()
	switch {
	case o.InCluster && (o.HubContext != "" || o.kube.Kubeconfig != ""):
		errs = append(errs, errors.New("--in-cluster excludes --hub-context and --kubeconfig"))
	case !o.InCluster:
		if err := o.kube.defaultHubContext(&o.HubContext); err != nil {
			errs = append(errs, err)
		}
	}
	if !slices.Contains(statusOutputs, o.Output) {
		errs = append(errs, fmt.Errorf("--output %q: want one of %s", o.Output, strings.Join(statusOutputs, ", ")))
	}
	if o.Wait < 0 {
		errs = append(errs, errors.New("--wait must not be negative"))
	}
	if o.LeaderElectionID != "" {
		if msgs := validation.IsDNS1123Subdomain(o.LeaderElectionID); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--leader-election-id %q: %s", o.LeaderElectionID, strings.Join(msgs, "; ")))
		}
	}
	if o.DeleteDeployment != "" {
		if msgs := validation.IsDNS1123Subdomain(o.DeleteDeployment); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--delete-deployment %q: %s", o.DeleteDeployment, strings.Join(msgs, "; ")))
		}
		if o.Wait == 0 {
			errs = append(errs, errors.New("--delete-deployment needs --wait: the time its pods get to stop"))
		}
	}
	return errors.Join(errs...)
}

func (o *cleanupOptions) run(ctx context.Context, out, errOut io.Writer) error {
	var hub *cliClients
	var err error
	if o.InCluster {
		hub, err = o.inClusterClients()
	} else {
		if o.kube.hubDefaulted {
			fmt.Fprintf(errOut, "hub: the kubeconfig's current context %q (--hub-context not given)\n", o.HubContext)
		}
		hub, err = o.kube.clients(o.HubContext)
	}
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	return o.cleanup(ctx, hub, out, errOut)
}

// inClusterClients are the clients of the hub the pod runs in.
func (o *cleanupOptions) inClusterClients() (*cliClients, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, err
	}
	cfg.Timeout = o.kube.RequestTimeout
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "endpoint-aggregator-cli/" + version()
	return newCLIClients("in-cluster", cfg)
}

// cleanup does the work of run with the hub's clients.
func (o *cleanupOptions) cleanup(ctx context.Context, hub *cliClients, out, errOut io.Writer) error {
	now := o.now
	if now == nil {
		now = time.Now
	}
	deadline := now().Add(o.Wait)
	ns := o.kube.Namespace
	useDaemonConfig(ctx, hub, ns, o.flags, errOut)
	if o.DeleteDeployment != "" {
		if o.DryRun {
			fmt.Fprintf(errOut, "Dry run: would delete deployment/%s in namespace %s and wait for its pods to stop.\n", o.DeleteDeployment, ns)
		} else if err := o.stopDeployment(ctx, hub, deadline, errOut); err != nil {
			return err
		}
	}

	running, err := o.waitForDaemon(ctx, hub, deadline, errOut)
	if err != nil {
		return err
	}
	if len(running) > 0 {
		switch {
		case o.Force:
			fmt.Fprintf(errOut, "Warning: %s; --force: deleting anyway, and that daemon will recreate what it writes.\n", strings.Join(running, "; "))
		case o.DryRun:
			fmt.Fprintf(errOut, "Warning: %s. Without --dry-run, cleanup would refuse: a running daemon recreates everything it deletes.\n", strings.Join(running, "; "))
		default:
			return fmt.Errorf("hub %s: a daemon is running: %s. It would recreate everything cleanup deletes: stop it first "+
				"(helm uninstall, or kubectl -n %s scale deployment <name> --replicas=0) and run cleanup again (--wait waits for its Leases to lapse), or pass --force. Nothing was deleted",
				hub.context, strings.Join(running, "; "), ns)
		}
	}

	plan, err := listCleanup(ctx, hub, ns, o.LeaderElectionID)
	if err != nil {
		return fmt.Errorf("hub %s: %w; nothing was deleted", hub.context, err)
	}
	var errs []error
	if !o.DryRun {
		errs = deleteCleanup(ctx, hub, plan)
		// A standby that took the lead meanwhile writes everything again.
		if !o.Force && o.LeaderElectionID != "" {
			if l, err := hub.kube.CoordinationV1().Leases(ns).Get(ctx, o.LeaderElectionID, metav1.GetOptions{}); err == nil && cleanupLeaseHeld(l, now()) {
				fmt.Fprintf(errOut, "Warning: %s took the lead while cleanup ran and recreates what it writes: stop it and run cleanup again.\n", cleanupHolder(l))
			}
		}
	}
	if err := printCleanup(out, o.Output, cleanupReport{Hub: hub.context, Namespace: ns, DryRun: o.DryRun, Objects: plan}); err != nil {
		return err
	}
	fmt.Fprintln(errOut, cleanupSummary(plan, o.DryRun))
	fmt.Fprintf(errOut, "Left in place: the registration Secrets in namespace %s (yours; `endpoint-aggregator unregister --hub-context H --name N` deletes one), "+
		"namespaces the daemon created with --create-namespaces, its Events (they expire), the CRDs, the members, "+
		"and any object without the label %s, whatever its name.\n", ns, managedBySelector)
	return errors.Join(errs...)
}

// stopDeployment deletes the daemon's Deployment in the foreground and waits
// until it is gone, which is once its pods are: then no replica runs.
func (o *cleanupOptions) stopDeployment(ctx context.Context, hub *cliClients, deadline time.Time, errOut io.Writer) error {
	ns, name := o.kube.Namespace, o.DeleteDeployment
	api := hub.kube.AppsV1().Deployments(ns)
	d, err := api.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		fmt.Fprintf(errOut, "deployment/%s (namespace %s) not found: no daemon of that name runs.\n", name, ns)
		return nil
	}
	if err != nil {
		return fmt.Errorf("hub %s: getting deployment %s/%s: %w; nothing was deleted", hub.context, ns, name, err)
	}
	uid := d.UID
	if d.DeletionTimestamp == nil {
		policy := metav1.DeletePropagationForeground
		err := api.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &policy, Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("hub %s: deleting deployment %s/%s: %w; nothing was deleted", hub.context, ns, name, err)
		}
	}
	fmt.Fprintf(errOut, "deployment/%s (namespace %s) deleted; waiting for its pods to stop.\n", name, ns)
	err = o.until(ctx, deadline, func() (bool, error) {
		d, err := api.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && d.UID != uid, err
	})
	if err != nil {
		return fmt.Errorf("hub %s: deployment %s/%s is still there (%w): its pods have not stopped; nothing else was deleted", hub.context, ns, name, err)
	}
	return nil
}

// waitForDaemon waits until deadline for the daemon's Leases to be free, and
// returns what shows a daemon still running (nothing when none does).
func (o *cleanupOptions) waitForDaemon(ctx context.Context, hub *cliClients, deadline time.Time, errOut io.Writer) ([]string, error) {
	var running []string
	said := false
	err := o.until(ctx, deadline, func() (bool, error) {
		var err error
		running, err = o.runningDaemon(ctx, hub)
		if len(running) > 0 && !said && o.Wait > 0 {
			fmt.Fprintf(errOut, "Waiting up to %s for the daemon to stop: %s.\n", o.Wait, strings.Join(running, "; "))
			said = true
		}
		return len(running) == 0, err
	})
	if err != nil && len(running) == 0 {
		return nil, fmt.Errorf("hub %s: reading the daemon's Leases: %w; nothing was deleted", hub.context, err)
	}
	return running, nil
}

// until polls done until it reports true, fails, or deadline passes.
func (o *cleanupOptions) until(ctx context.Context, deadline time.Time, done func() (bool, error)) error {
	now, poll := o.now, o.poll
	if now == nil {
		now = time.Now
	}
	if poll <= 0 {
		poll = time.Second
	}
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if !now().Before(deadline) {
			return errors.New("not done within --wait")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// runningDaemon describes the Leases held by a running daemon: the leader
// election Lease, and member Leases renewed within their duration (the
// leader renews them, with or without leader election).
func (o *cleanupOptions) runningDaemon(ctx context.Context, hub *cliClients) ([]string, error) {
	now := o.now
	if now == nil {
		now = time.Now
	}
	ns := o.kube.Namespace
	var out []string
	if o.LeaderElectionID != "" {
		l, err := hub.kube.CoordinationV1().Leases(ns).Get(ctx, o.LeaderElectionID, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, err
		case cleanupLeaseHeld(l, now()):
			out = append(out, fmt.Sprintf("leader election Lease %s/%s is held by %s (renewed %s ago, for %ds)",
				ns, l.Name, cleanupHolder(l), now().Sub(l.Spec.RenewTime.Time).Round(time.Second), *l.Spec.LeaseDurationSeconds))
		}
	}
	list, err := hub.kube.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: managedBySelector})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		l := &list.Items[i]
		if strings.HasPrefix(l.Name, easync.MemberLeasePrefix) && cleanupLeaseHeld(l, now()) {
			out = append(out, fmt.Sprintf("member Lease %s/%s was renewed %s ago (for %ds)",
				ns, l.Name, now().Sub(l.Spec.RenewTime.Time).Round(time.Second), *l.Spec.LeaseDurationSeconds))
		}
	}
	// A replica sharing the members renews its peer Lease.
	peers, err := hub.kube.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{shard.LabelRole: shard.RolePeer}.String()})
	if err != nil {
		return nil, err
	}
	for i := range peers.Items {
		if l := &peers.Items[i]; cleanupLeaseHeld(l, now()) {
			out = append(out, fmt.Sprintf("replica Lease %s/%s is held by %s (renewed %s ago, for %ds)",
				ns, l.Name, cleanupHolder(l), now().Sub(l.Spec.RenewTime.Time).Round(time.Second), *l.Spec.LeaseDurationSeconds))
		}
	}
	return out, nil
}
