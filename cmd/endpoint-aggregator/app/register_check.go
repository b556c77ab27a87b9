package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
)

// checks collects the verdicts of a registration's checks. A real run
// stops at the first that fails; a dry run (all) goes on where it can,
// prints every verdict, and fails at the end if any failed.
type checks struct {
	w      io.Writer
	all    bool
	failed []error
}

// report records the verdict of a check, err nil when it passed, and
// returns err when the run stops there.
func (c *checks) report(what string, err error) error {
	if c.all {
		if err != nil {
			fmt.Fprintf(c.w, "check %s: FAILED: %v\n", what, err)
		} else {
			fmt.Fprintf(c.w, "check %s: ok\n", what)
		}
	}
	if err == nil {
		return nil
	}
	c.failed = append(c.failed, err)
	if c.all {
		return nil
	}
	return err
}

// skip says that a check could not run.
func (c *checks) skip(what, why string) {
	if c.all {
		fmt.Fprintf(c.w, "check %s: not run: %s\n", what, why)
	}
}

// err is what a dry run ends with: nil when every check passed.
func (c *checks) err() error {
	if len(c.failed) == 0 {
		return nil
	}
	return fmt.Errorf("a real run would fail: %w", errors.Join(c.failed...))
}

// preflight is what the checks of a registration read.
type preflight struct {
	// existing is the registration Secret of the name, or nil; all are the
	// registration Secrets in the namespace. hubOK: both were read.
	existing *corev1.Secret
	all      []corev1.Secret
	hubOK    bool
	// uid is the UID of the member's kube-system namespace, "" when it
	// could not be read. memberOK: the member answered.
	uid      string
	memberOK bool
}

// existingKubeconfig is the kubeconfig of the name's registration, or nil.
func (p *preflight) existingKubeconfig() []byte {
	if p.existing == nil {
		return nil
	}
	return p.existing.Data[clusters.KubeconfigKey]
}

// preflight runs the checks that come before any write, reading the hub and
// the member only: the name is free or this member's, the member answers,
// and the registration neither duplicates another nor re-points the name.
func (o *registerOptions) preflight(ctx context.Context, hub, member *cliClients, name string, ep memberEndpoint, c *checks) (*preflight, error) {
	p := &preflight{}
	var err error
	p.existing, p.all, err = registrationFor(ctx, hub, o.kube.Namespace, name)
	p.hubOK = err == nil
	if err := c.report(fmt.Sprintf("hub %s: cluster name %q", o.HubContext, name), err); err != nil {
		return nil, err
	}
	p.uid, err = kubeSystemUID(ctx, member, c.w)
	p.memberOK = err == nil
	if err != nil {
		err = fmt.Errorf("member %s: %w", o.MemberContext, err)
	}
	what := fmt.Sprintf("member %s: reachable", o.MemberContext)
	if p.uid != "" {
		what += ", kube-system UID " + p.uid
	}
	if err := c.report(what, err); err != nil {
		return nil, err
	}
	what = fmt.Sprintf("hub %s: not registered under another name, %q not re-pointed", o.HubContext, name)
	if !p.hubOK || !p.memberOK {
		c.skip(what, "needs the hub and the member")
		return p, nil
	}
	err = serverConflict(name, ep, p.uid, p.existing, p.all, o.Force, o.AllowDuplicate)
	if err != nil {
		err = fmt.Errorf("hub %s: %w", o.HubContext, err)
	}
	if err := c.report(what, err); err != nil {
		return nil, err
	}
	return p, nil
}

// kubeSystemUID reads the UID of the member's kube-system namespace, which
// identifies the cluster whatever address reaches it. It is "" when the
// caller may not read it or it does not exist (said on errOut); any other
// error means the member does not answer.
func kubeSystemUID(ctx context.Context, member *cliClients, errOut io.Writer) (string, error) {
	ns, err := member.kube.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	switch {
	case apierrors.IsForbidden(err) || apierrors.IsNotFound(err):
		fmt.Fprintf(errOut, "Note: cannot read namespace %s of member %s (%v): other registrations of it are found by server URL and CA only\n", metav1.NamespaceSystem, member.context, err)
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading namespace %s: %w", metav1.NamespaceSystem, err)
	}
	return string(ns.UID), nil
}

// serverConflict refuses a registration that would make the hub import one
// cluster twice, or silently move a registered name to another cluster.
// uid is the member's kube-system namespace UID ("" if unknown). Two
// registrations are of one cluster when their recorded UIDs match, or when
// they have the same server and CA (registrations that recorded no UID, or
// a UID that is stale while the URL still reaches the same server).
func serverConflict(name string, ep memberEndpoint, uid string, existing *corev1.Secret, all []corev1.Secret, force, allowDuplicate bool) error {
	sameServer := func(s *corev1.Secret) (string, bool) {
		server, ca := kubeconfigServer(s.Data[clusters.KubeconfigKey])
		return server, server != "" && normalServer(server) == normalServer(ep.Server) &&
			(len(ca) == 0 || len(ep.CAData) == 0 || bytes.Equal(ca, ep.CAData))
	}
	recorded := func(s *corev1.Secret) string {
		if uid == "" {
			return ""
		}
		return s.Annotations[clusters.AnnotationKubeSystemUID]
	}
	if existing != nil && !force {
		server, same := sameServer(existing)
		switch rec := recorded(existing); {
		case rec != "" && rec != uid:
			return fmt.Errorf("member %q is registered for another cluster (kube-system UID %s, server %s) than %s (kube-system UID %s): pass --force to re-point it", name, rec, server, ep.Server, uid)
		case rec != "":
			// The same cluster: a new URL or CA for it is no re-point.
		case !same && server != "":
			return fmt.Errorf("member %q is registered with server %s, not %s: pass --force to re-point it", name, server, ep.Server)
		}
	}
	if allowDuplicate {
		return nil
	}
	for i := range all {
		other := &all[i]
		if other.Name == name || clusters.ClusterName(other) == name {
			continue
		}
		if rec := recorded(other); rec != "" && rec == uid {
			server, _ := kubeconfigServer(other.Data[clusters.KubeconfigKey])
			return fmt.Errorf("%s is the cluster already registered as member %q (secret %s/%s, server %s): both have kube-system UID %s; registering it as %q too would import its endpoints twice: pass --allow-duplicate if that is meant",
				ep.Server, clusters.ClusterName(other), other.Namespace, other.Name, server, uid, name)
		}
		if _, ok := sameServer(other); ok {
			return fmt.Errorf("server %s is already registered as member %q (secret %s/%s); registering it as %q too would import its endpoints twice: pass --allow-duplicate if that is meant",
				ep.Server, clusters.ClusterName(other), other.Namespace, other.Name, name)
		}
	}
	return nil
}

// mayDo asks the API server with a SelfSubjectAccessReview whether the
// caller may verb resource (subresource) of group in namespace ns ("" for
// cluster-scoped). A dry run checks so where a server-side dry run cannot
// tell: in a namespace that a real run would create first.
func mayDo(ctx context.Context, c kubernetes.Interface, verb, group, resource, subresource, ns string) error {
	what := resource
	if group != "" {
		what += "." + group
	}
	if subresource != "" {
		what += "/" + subresource
	}
	if ns != "" {
		what += " in namespace " + ns
	}
	r, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: verb, Group: group, Resource: resource, Subresource: subresource, Namespace: ns,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("asking whether it may %s %s: %w", verb, what, err)
	}
	if !r.Status.Allowed {
		msg := fmt.Sprintf("may not %s %s", verb, what)
		if r.Status.Reason != "" {
			msg += ": " + r.Status.Reason
		}
		return errors.New(msg)
	}
	return nil
}

// dryRunResult says what a server-side dry-run apply found: before is the
// live object (nil if absent), after what the apply would make of it.
func dryRunResult(before, after *unstructured.Unstructured) string {
	if before == nil {
		return "would be created"
	}
	strip := func(u *unstructured.Unstructured) map[string]any {
		c := u.DeepCopy()
		unstructured.RemoveNestedField(c.Object, "metadata", "resourceVersion")
		unstructured.RemoveNestedField(c.Object, "metadata", "managedFields")
		return c.Object
	}
	if equality.Semantic.DeepEqual(strip(before), strip(after)) {
		return "unchanged"
	}
	return "would be configured"
}

// dryRunOption is the DryRun option of a write: none, or all.
func dryRunOption(dryRun bool) []string {
	if dryRun {
		return []string{metav1.DryRunAll}
	}
	return nil
}
