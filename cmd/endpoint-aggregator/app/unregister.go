package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
)

type unregisterOptions struct {
	kube          *kubeFlags
	HubContext    string
	Name          string
	CleanupMember bool
	MemberContext string
}

func (o *unregisterOptions) addFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	o.kube.addFlags(fs)
	fs.StringVar(&o.HubContext, "hub-context", o.HubContext, "Kubeconfig context of the hub cluster. Default: the current context.")
	fs.StringVar(&o.Name, "name", o.Name, "Cluster name of the member (required).")
	fs.BoolVar(&o.CleanupMember, "cleanup-member", o.CleanupMember, "Also delete the member identity register created (needs --member-context).")
	fs.StringVar(&o.MemberContext, "member-context", o.MemberContext, "Kubeconfig context of the member cluster, for --cleanup-member.")
}

func (o *unregisterOptions) validate() error {
	errs := o.kube.validate()
	if err := o.kube.defaultHubContext(&o.HubContext); err != nil {
		errs = append(errs, err)
	}
	if o.Name == "" {
		errs = append(errs, errors.New("--name is required"))
	} else if msgs := validation.IsDNS1123Label(o.Name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--name %q is not a DNS-1123 label: %s", o.Name, strings.Join(msgs, "; ")))
	}
	switch {
	case o.CleanupMember && o.MemberContext == "":
		errs = append(errs, errors.New("--cleanup-member needs --member-context"))
	case !o.CleanupMember && o.MemberContext != "":
		errs = append(errs, errors.New("--member-context is only used with --cleanup-member"))
	}
	return errors.Join(errs...)
}

func newUnregisterCommand() *cobra.Command {
	o := &unregisterOptions{kube: newKubeFlags()}
	return newOperatorCommand(o, &cobra.Command{
		Use:   "unregister [--hub-context H] --name N [--cleanup-member --member-context M]",
		Short: "Unregister a member cluster from the hub",
		Long: `Unregister a member cluster from the hub.

unregister deletes the registration Secret(s) of cluster <name> from the
daemon's namespace in the hub (--hub-context, --namespace): the Secret whose
endpoint-aggregator.io/cluster-name annotation, or name when it has none, is
<name>. The daemon then withdraws that member's objects from the hub; status
lists the member until they are gone. Nothing to delete is not an error.

With --cleanup-member it also deletes, in the member (--member-context), the
identity register created there: the ClusterRoleBinding, ClusterRole,
ServiceAccount token Secret, ServiceAccount and Namespace
endpoint-aggregator-member. Its RBAC is gone at once and its tokens stop
authenticating within seconds. Objects that lack the labels of config/rbac are
left alone. The identity is shared by every hub the member is registered with.`,
		Example: `  # Stop aggregating member east:
  endpoint-aggregator unregister --hub-context hub --name east

  # ... and remove its identity from the member:
  endpoint-aggregator unregister --hub-context hub --name east --cleanup-member --member-context east`,
	})
}

func (o *unregisterOptions) run(ctx context.Context, out, errOut io.Writer) error {
	hub, err := o.kube.clients(o.HubContext)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	var member *cliClients
	var identity *memberIdentity
	if o.CleanupMember {
		if member, err = o.kube.clients(o.MemberContext); err != nil {
			return fmt.Errorf("member: %w", err)
		}
		if identity, err = loadMemberIdentity(false); err != nil {
			return err
		}
	}

	ns := o.kube.Namespace
	list, err := hub.kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{clusters.LabelMemberCluster: clusters.MemberClusterValue}.String()})
	if err != nil {
		return fmt.Errorf("hub %s: listing registration Secrets: %w", o.HubContext, err)
	}
	var found []corev1.Secret
	for _, s := range list.Items {
		if clusters.ClusterName(&s) == o.Name {
			found = append(found, s)
		}
	}
	sort.Slice(found, func(i, j int) bool { return found[i].Name < found[j].Name })
	if len(found) == 0 {
		fmt.Fprintf(errOut, "hub %s: no registration Secret for member %q in namespace %s\n", o.HubContext, o.Name, ns)
	}
	for _, s := range found {
		uid := s.UID
		err := hub.kube.CoreV1().Secrets(ns).Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		switch {
		case apierrors.IsNotFound(err):
			fmt.Fprintf(out, "hub %s: secret/%s (namespace %s) not found\n", o.HubContext, s.Name, ns)
		case err != nil:
			return fmt.Errorf("hub %s: deleting secret %s/%s: %w", o.HubContext, ns, s.Name, err)
		default:
			fmt.Fprintf(out, "hub %s: secret/%s (namespace %s) deleted; the daemon withdraws member %q from the hub\n", o.HubContext, s.Name, ns, o.Name)
		}
	}

	if !o.CleanupMember {
		return nil
	}
	report := func(ref, result string) {
		fmt.Fprintf(out, "member %s: %s %s\n", o.MemberContext, ref, result)
	}
	if err := identity.remove(ctx, member.dynamic, report); err != nil {
		return fmt.Errorf("member %s: %w", o.MemberContext, err)
	}
	return nil
}
