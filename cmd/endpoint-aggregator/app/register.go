package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
)

// dryRunToken stands for the member token in --dry-run output.
func dryRunToken(id *memberIdentity) string {
	return fmt.Sprintf("<token of ServiceAccount %s/%s>", id.serviceAccount.GetNamespace(), id.serviceAccount.GetName())
}

type registerOptions struct {
	kube            *kubeFlags
	MemberContext   string
	HubContext      string
	Name            string
	MemberServer    string
	ReadOnly        bool
	DryRun          bool
	Force           bool
	AllowDuplicate  bool
	TokenWait       time.Duration
	TokenExpiration time.Duration
	// Compression is "true" or "false" for the Secret's member-compression
	// annotation, "" to leave the annotation alone.
	Compression string
}

func newRegisterOptions() *registerOptions {
	return &registerOptions{
		kube:            newKubeFlags(),
		TokenWait:       10 * time.Second,
		TokenExpiration: 365 * 24 * time.Hour,
	}
}

func (o *registerOptions) addFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	o.kube.addFlags(fs)
	fs.StringVar(&o.MemberContext, "member-context", o.MemberContext, "Kubeconfig context of the member cluster (required).")
	fs.StringVar(&o.HubContext, "hub-context", o.HubContext, "Kubeconfig context of the hub cluster. Default: the current context.")
	fs.StringVar(&o.Name, "name", o.Name, "Cluster name of the member, a DNS-1123 label; also the registration Secret's name. Default: the member's About API cluster id (ClusterProperty cluster.clusterset.k8s.io), else the member context's name.")
	fs.StringVar(&o.MemberServer, "member-server", o.MemberServer, "URL at which the hub reaches the member's apiserver. Default: the server of the member context.")
	fs.BoolVar(&o.ReadOnly, "read-only", o.ReadOnly, "Grant only get/list/watch in the member: no patch/update of serviceexports/status (the daemon then cannot write ServiceExport conditions).")
	fs.BoolVar(&o.DryRun, "dry-run", o.DryRun, "Change nothing anywhere: run every check of a real run against the hub and the member, print each verdict and what would be applied to stderr and the registration Secret (token replaced by a placeholder) to stdout; fail when a real run would.")
	fs.BoolVar(&o.Force, "force", o.Force, "Re-point a registered --name at another API server.")
	fs.BoolVar(&o.AllowDuplicate, "allow-duplicate", o.AllowDuplicate, "Register an API server that is already registered under another name (its endpoints are then imported twice).")
	fs.DurationVar(&o.TokenWait, "token-wait", o.TokenWait, "How long to wait for the token controller to fill a newly created ServiceAccount token Secret before asking the TokenRequest API instead.")
	fs.DurationVar(&o.TokenExpiration, "token-expiration", o.TokenExpiration, "Lifetime requested for a TokenRequest token (the member's apiserver may cap it; at least 10m).")
	fs.StringVar(&o.Compression, "member-compression", o.Compression, "true or false: annotate the registration Secret with "+clusters.AnnotationMemberCompression+", so that this member's API server gzips its responses to the daemon or does not, whatever the daemon's --member-compression says. Default: leave the annotation as it is.")
}

// clusterName is --name, by default the member context's name.
func (o *registerOptions) clusterName() string {
	if o.Name != "" {
		return o.Name
	}
	return o.MemberContext
}

func (o *registerOptions) validate() error {
	errs := o.kube.validate()
	if o.MemberContext == "" {
		errs = append(errs, errors.New("--member-context is required"))
	}
	if err := o.kube.defaultHubContext(&o.HubContext); err != nil {
		errs = append(errs, err)
	}
	if name := o.clusterName(); name != "" {
		if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
			from := "--name"
			if o.Name == "" {
				from = "the member context's name (set --name)"
			}
			errs = append(errs, fmt.Errorf("cluster name %q from %s is not a DNS-1123 label: %s", name, from, strings.Join(msgs, "; ")))
		}
	}
	if o.MemberServer != "" {
		if err := validateServerURL(o.MemberServer); err != nil {
			errs = append(errs, fmt.Errorf("--member-server: %w", err))
		}
	}
	if o.TokenWait < 0 {
		errs = append(errs, errors.New("--token-wait must not be negative"))
	}
	if o.Compression != "" && o.Compression != "true" && o.Compression != "false" {
		errs = append(errs, fmt.Errorf("--member-compression must be true or false, not %q", o.Compression))
	}
	if o.TokenExpiration < 10*time.Minute {
		errs = append(errs, errors.New("--token-expiration must be at least 10m (the TokenRequest minimum)"))
	}
	return errors.Join(errs...)
}

func newRegisterCommand() *cobra.Command {
	o := newRegisterOptions()
	return newOperatorCommand(o, &cobra.Command{
		Use:   "register --member-context M [--hub-context H] [--name N]",
		Short: "Register a member cluster with the hub",
		Long: `Register a member cluster with the hub.

In the member (--member-context), register creates or updates the identity the
daemon uses there, from the manifests of config/rbac: the Namespace,
ServiceAccount, ClusterRole and ClusterRoleBinding endpoint-aggregator-member
and the kubernetes.io/service-account-token Secret
endpoint-aggregator-member-token. The ClusterRole allows get/list/watch on
Services, EndpointSlices and ServiceExports, and patch/update on
serviceexports/status unless --read-only. The mcs-api CRDs are not installed:
apply config/crd to the member when the daemon runs with
--export-mode=serviceexport (the default).

It then writes a kubeconfig for that ServiceAccount (server, inline CA data,
token) into the registration Secret in the hub (--hub-context): Secret <name>
in the daemon's namespace (--namespace, created if missing), labelled
endpoint-aggregator.io/member-cluster=true, annotated
endpoint-aggregator.io/cluster-name=<name>. The CA comes from the member
context, else from the token Secret or the kube-root-ca.crt ConfigMap.

The token is the one the token controller of kube-controller-manager writes
into the token Secret: it does not expire, and deleting the Secret revokes it.
When the Secret is not filled within --token-wait (a member without a token
controller), register asks the TokenRequest API for a token valid for
--token-expiration (default one year; the member's apiserver may cap it).
--member-compression=true|false annotates the Secret with
endpoint-aggregator.io/member-compression, which decides for this member
alone whether its API server gzips what it sends the daemon.
Such a token expires: run register again before then. A later run keeps a
token that still works and renews it once less than a third of its lifetime
is left.

Before it writes anything, register checks the hub and the member: the
name is free or already this member's; the member answers; the member is
not registered under another name already, neither by server URL and CA
nor by the UID of its kube-system namespace, which register records on the
Secret (annotation endpoint-aggregator.io/kube-system-uid), unless
--allow-duplicate; and an existing name is not moved to another cluster
unless --force.

Running register again changes nothing when nothing changed: the member
objects are server-side applied, and the hub Secret is only written when its
content differs.

--dry-run runs the same checks, and the writes as server-side dry runs
(persisting nothing), or as access reviews where a namespace would have to
be created first. It prints each verdict, and fails when a real run would.`,
		Example: `  # Register context east as member "east" of the hub in context hub:
  endpoint-aggregator register --member-context east --hub-context hub

  # The hub reaches the member at another address than this machine does:
  endpoint-aggregator register --member-context east --hub-context hub \
      --name east --member-server https://east.example.com:6443

  # Print the registration Secret without changing anything:
  endpoint-aggregator register --member-context east --hub-context hub --dry-run`,
	})
}

func (o *registerOptions) run(ctx context.Context, out, errOut io.Writer) error {
	name := o.clusterName()
	identity, err := loadMemberIdentity(o.ReadOnly)
	if err != nil {
		return err
	}
	memberCfg, err := o.kube.restConfig(o.MemberContext)
	if err != nil {
		return fmt.Errorf("member: %w", err)
	}
	if _, err := o.kube.restConfig(o.HubContext); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	ep, err := endpointFromConfig(memberCfg, o.MemberServer)
	if err != nil {
		return err
	}
	member, err := newCLIClients(o.MemberContext, memberCfg)
	if err != nil {
		return err
	}
	hub, err := o.kube.clients(o.HubContext)
	if err != nil {
		return err
	}
	if name, err = o.aboutName(ctx, member, name, errOut); err != nil {
		return err
	}
	ns := o.kube.Namespace

	// Check the hub and the member first, reading only, so that a refused
	// registration changes nothing anywhere.
	c := &checks{w: errOut, all: o.DryRun}
	pre, err := o.preflight(ctx, hub, member, name, ep, c)
	if err != nil {
		return err
	}
	if o.DryRun {
		return o.dryRun(ctx, hub, member, name, identity, ep, pre, c, out, errOut)
	}

	report := func(ref, result string) {
		fmt.Fprintf(out, "member %s: %s %s\n", o.MemberContext, ref, result)
	}
	applied, err := identity.apply(ctx, member, false, report)
	if err != nil {
		return fmt.Errorf("member %s: %w", o.MemberContext, err)
	}
	tokenSecretCreated := applied[identityKey(identity.tokenSecret)] == "created"
	var previous string
	if pre.existing != nil {
		previous = kubeconfigToken(pre.existing.Data[clusters.KubeconfigKey])
	}
	token, tokenCA, err := o.memberToken(ctx, member, identity, tokenSecretCreated, previous, out, errOut)
	if err != nil {
		return fmt.Errorf("member %s: %w", o.MemberContext, err)
	}
	if len(ep.CAData) == 0 {
		ep.CAData = tokenCA
	}
	if len(ep.CAData) == 0 {
		if cm, err := member.kube.CoreV1().ConfigMaps(identity.namespace()).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err == nil {
			ep.CAData = []byte(cm.Data["ca.crt"])
		}
	}
	if len(ep.CAData) == 0 {
		fmt.Fprintf(errOut, "Warning: no CA data for member %s (not in its context, the token Secret or kube-root-ca.crt); the daemon will verify %s against its system roots\n", o.MemberContext, ep.Server)
	}
	o.noteCRDs(member, errOut)

	kubeconfig, err := buildMemberKubeconfig(name, identity.serviceAccount.GetName(), ep, token)
	if err != nil {
		return err
	}
	desired := o.registrationSecret(ns, name, kubeconfig, pre.uid)
	result, err := writeRegistration(ctx, hub, pre.existing, desired, false)
	if err != nil {
		return fmt.Errorf("hub %s: %w", o.HubContext, err)
	}
	fmt.Fprintf(out, "hub %s: secret/%s (namespace %s) %s\n", o.HubContext, name, ns, result)
	fmt.Fprintf(out, "Member %q registered. Check it with: endpoint-aggregator status --hub-context %s -n %s\n", name, o.HubContext, ns)
	return nil
}

// registrationSecret is the registration Secret with the annotation
// --member-compression asks for.
func (o *registerOptions) registrationSecret(namespace, name string, kubeconfig []byte, kubeSystemUID string) *corev1.Secret {
	s := registrationSecret(namespace, name, kubeconfig, kubeSystemUID)
	if o.Compression != "" {
		s.Annotations[clusters.AnnotationMemberCompression] = o.Compression
	}
	return s
}

// noteCRDs says when the member does not serve the mcs-api.
func (o *registerOptions) noteCRDs(member *cliClients, errOut io.Writer) {
	if _, err := member.kube.Discovery().ServerResourcesForGroupVersion(mcsv1beta1.GroupVersion.String()); apierrors.IsNotFound(err) {
		fmt.Fprintf(errOut, "Note: member %s does not serve %s: apply config/crd to it if the daemon runs with --export-mode=serviceexport\n", o.MemberContext, mcsv1beta1.GroupVersion)
	}
}

// dryRun goes on from the preflight checks with every step of a real run
// that can be checked without writing: server-side dry runs of the member
// identity and of the hub Secret, and where the token would come from. It
// prints each verdict and what a real run would do to errOut, and the
// registration Secret (token replaced by a placeholder) to out, or fails
// if a check failed.
func (o *registerOptions) dryRun(ctx context.Context, hub, member *cliClients, name string, identity *memberIdentity, ep memberEndpoint, pre *preflight, c *checks, out, errOut io.Writer) error {
	what := fmt.Sprintf("member %s: may apply the member identity", o.MemberContext)
	if pre.memberOK {
		report := func(ref, result string) {
			fmt.Fprintf(errOut, "member %s: would apply %s: %s\n", o.MemberContext, ref, result)
		}
		_, err := identity.apply(ctx, member, true, report)
		if err != nil {
			err = fmt.Errorf("member %s: %w", o.MemberContext, err)
		}
		_ = c.report(what, err)
		what = fmt.Sprintf("member %s: token", o.MemberContext)
		source, err := o.dryRunTokenSource(ctx, member, identity, kubeconfigToken(pre.existingKubeconfig()))
		if err != nil {
			err = fmt.Errorf("member %s: %w", o.MemberContext, err)
		} else {
			what += " " + source
		}
		_ = c.report(what, err)
		o.noteCRDs(member, errOut)
	} else {
		for _, obj := range identity.objects {
			fmt.Fprintf(errOut, "member %s: would apply %s\n", o.MemberContext, identityObjectRef(obj))
		}
		c.skip(what, "the member does not answer")
	}
	if len(ep.CAData) == 0 {
		fmt.Fprintf(errOut, "Note: the member context has no CA data; register would take it from the member's token Secret or kube-root-ca.crt\n")
	}

	kubeconfig, err := buildMemberKubeconfig(name, identity.serviceAccount.GetName(), ep, dryRunToken(identity))
	if err != nil {
		return err
	}
	desired := o.registrationSecret(o.kube.Namespace, name, kubeconfig, pre.uid)
	what = fmt.Sprintf("hub %s: may write secret/%s (namespace %s)", o.HubContext, name, o.kube.Namespace)
	if pre.hubOK {
		// Written (as a dry run) with the registered token, which a real
		// run keeps while it works: the placeholder would always differ.
		write := desired
		if previous := kubeconfigToken(pre.existingKubeconfig()); previous != "" {
			if kc, err := buildMemberKubeconfig(name, identity.serviceAccount.GetName(), ep, previous); err == nil {
				write = o.registrationSecret(o.kube.Namespace, name, kc, pre.uid)
			}
		}
		result, err := writeRegistration(ctx, hub, pre.existing, write, true)
		if err != nil {
			err = fmt.Errorf("hub %s: %w", o.HubContext, err)
		} else {
			fmt.Fprintf(errOut, "hub %s: secret/%s (namespace %s) %s\n", o.HubContext, name, o.kube.Namespace, result)
		}
		_ = c.report(what, err)
	} else {
		c.skip(what, "the hub's registrations could not be read")
	}
	if err := c.err(); err != nil {
		return err
	}
	data, err := secretYAML(desired)
	if err != nil {
		return err
	}
	_, err = out.Write(data)
	return err
}

// dryRunTokenSource says where a real run would take the member token
// from (see memberToken), and checks that it may. previous is the token of
// the current registration, or "".
func (o *registerOptions) dryRunTokenSource(ctx context.Context, member *cliClients, id *memberIdentity, previous string) (string, error) {
	ns, secretName := id.tokenSecret.GetNamespace(), id.tokenSecret.GetName()
	s, err := member.kube.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
	var source string
	switch {
	case err == nil && len(s.Data[corev1.ServiceAccountTokenKey]) > 0:
		return fmt.Sprintf("from secret %s/%s", ns, secretName), nil
	case err != nil && !apierrors.IsNotFound(err):
		return "", fmt.Errorf("reading token secret %s/%s: %w", ns, secretName, err)
	case previous != "":
		source = "the registered one while it works and is not due for renewal, else one from the TokenRequest API"
	case err != nil:
		source = fmt.Sprintf("from secret %s/%s if the token controller fills it within --token-wait, else from the TokenRequest API", ns, secretName)
	default:
		source = fmt.Sprintf("from the TokenRequest API (secret %s/%s is empty)", ns, secretName)
	}
	if err := mayDo(ctx, member.kube, "create", "", "serviceaccounts", "token", ns); err != nil {
		return "", fmt.Errorf("a token from the TokenRequest API may be needed: %w", err)
	}
	return source, nil
}

// registrationFor returns the hub Secret that would register name, or nil.
// It fails when that Secret is not a registration Secret for name, or when
// another Secret already claims the name: the daemon would reject one of them.
func registrationFor(ctx context.Context, hub *cliClients, ns, name string) (*corev1.Secret, []corev1.Secret, error) {
	s, err := hub.kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		s = nil
	case err != nil:
		return nil, nil, fmt.Errorf("hub %s: reading secret %s/%s: %w", hub.context, ns, name, err)
	case s.Labels[clusters.LabelMemberCluster] != clusters.MemberClusterValue:
		return nil, nil, fmt.Errorf("hub %s: secret %s/%s exists and is not a registration Secret (no label %s=%s); choose another --name", hub.context, ns, name, clusters.LabelMemberCluster, clusters.MemberClusterValue)
	case clusters.ClusterName(s) != name:
		return nil, nil, fmt.Errorf("hub %s: secret %s/%s registers cluster %q; choose another --name or unregister %q first", hub.context, ns, name, clusters.ClusterName(s), clusters.ClusterName(s))
	}
	all, err := hub.kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{clusters.LabelMemberCluster: clusters.MemberClusterValue}.String()})
	if err != nil {
		return nil, nil, fmt.Errorf("hub %s: listing registration Secrets: %w", hub.context, err)
	}
	for _, other := range all.Items {
		if other.Name != name && clusters.ClusterName(&other) == name {
			return nil, nil, fmt.Errorf("hub %s: cluster name %q is already registered by secret %s/%s; unregister it first", hub.context, name, ns, other.Name)
		}
	}
	return s, all.Items, nil
}

// normalServer compares server URLs: scheme and host are case-insensitive,
// a trailing slash means nothing.
func normalServer(s string) string { return strings.TrimSuffix(strings.ToLower(s), "/") }

// writeRegistration creates or updates the hub Secret; it writes nothing
// when the Secret is up to date. With dryRun the writes are server-side dry
// runs and the result says what a real run would do; a Secret in a
// namespace that does not exist yet cannot be dry-run: only the permission
// to create it is checked.
func writeRegistration(ctx context.Context, hub *cliClients, existing, desired *corev1.Secret, dryRun bool) (string, error) {
	api := hub.kube.CoreV1().Secrets(desired.Namespace)
	would := func(result string) string {
		if dryRun {
			return "would be " + result
		}
		return result
	}
	if existing == nil {
		created, err := ensureHubNamespace(ctx, hub, desired.Namespace, dryRun)
		if err != nil {
			return "", err
		}
		if dryRun && created {
			if err := mayDo(ctx, hub.kube, "create", "", "secrets", "", desired.Namespace); err != nil {
				return "", err
			}
			return "would be created, with namespace " + desired.Namespace, nil
		}
		if _, err := api.Create(ctx, desired, metav1.CreateOptions{FieldManager: cliFieldManager, DryRun: dryRunOption(dryRun)}); err != nil {
			return "", fmt.Errorf("creating secret %s/%s: %w", desired.Namespace, desired.Name, err)
		}
		return would("created"), nil
	}
	if registrationUpToDate(existing, desired) {
		return "unchanged", nil
	}
	s := existing.DeepCopy()
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	for k, v := range desired.Labels {
		s.Labels[k] = v
	}
	for k, v := range desired.Annotations {
		s.Annotations[k] = v
	}
	s.Data[clusters.KubeconfigKey] = desired.Data[clusters.KubeconfigKey]
	if _, err := api.Update(ctx, s, metav1.UpdateOptions{FieldManager: cliFieldManager, DryRun: dryRunOption(dryRun)}); err != nil {
		return "", fmt.Errorf("updating secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return would("configured"), nil
}

// ensureHubNamespace creates the namespace if it does not exist, and
// reports whether it did (with dryRun: would).
func ensureHubNamespace(ctx context.Context, hub *cliClients, ns string, dryRun bool) (bool, error) {
	_, err := hub.kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err == nil {
		return false, nil
	}
	if !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
		return false, fmt.Errorf("reading namespace %s: %w", ns, err)
	}
	_, err = hub.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{FieldManager: cliFieldManager, DryRun: dryRunOption(dryRun)})
	switch {
	case apierrors.IsAlreadyExists(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	return true, nil
}

// memberToken returns a token of the member ServiceAccount, and the CA the
// token Secret carries if the token came from there. In order: the token
// Secret once the token controller filled it; the token of the current
// registration while it works and is not due for renewal; a new TokenRequest
// token.
func (o *registerOptions) memberToken(ctx context.Context, member *cliClients, id *memberIdentity, fresh bool, previous string, out, errOut io.Writer) (token string, ca []byte, err error) {
	ns, secretName := id.tokenSecret.GetNamespace(), id.tokenSecret.GetName()
	secrets := member.kube.CoreV1().Secrets(ns)
	s, err := secrets.Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		return "", nil, fmt.Errorf("reading token secret %s/%s: %w", ns, secretName, err)
	}
	// Only a token Secret this run created is waited for: one that existed
	// before and is still empty will not be filled, as the member has no
	// token controller.
	waitFor := o.TokenWait
	if !fresh {
		waitFor = 0
	}
	if len(s.Data[corev1.ServiceAccountTokenKey]) == 0 && waitFor > 0 {
		fmt.Fprintf(errOut, "Waiting up to %s for the token controller to fill secret %s/%s...\n", waitFor, ns, secretName)
		_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, waitFor, false, func(ctx context.Context) (bool, error) {
			got, err := secrets.Get(ctx, secretName, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			s = got
			return len(s.Data[corev1.ServiceAccountTokenKey]) > 0, nil
		})
		if ctx.Err() != nil {
			return "", nil, ctx.Err()
		}
	}
	if t := s.Data[corev1.ServiceAccountTokenKey]; len(t) > 0 {
		fmt.Fprintf(out, "member %s: token from secret %s/%s (does not expire)\n", o.MemberContext, ns, secretName)
		return string(t), s.Data[corev1.ServiceAccountRootCAKey], nil
	}

	if previous != "" && !tokenDueForRenewal(time.Now(), previous) {
		ok, err := tokenAuthenticatesAs(ctx, member, previous, id.username())
		switch {
		case err != nil:
			fmt.Fprintf(errOut, "Note: cannot check the current token with a TokenReview (%v); requesting a new one\n", err)
		case ok:
			msg := ""
			if _, exp, ok := jwtLifetime(previous); ok {
				msg = ", expires " + exp.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(out, "member %s: keeping the registered token (still valid%s)\n", o.MemberContext, msg)
			return previous, nil, nil
		}
	}

	tr, err := member.kube.CoreV1().ServiceAccounts(id.serviceAccount.GetNamespace()).CreateToken(ctx, id.serviceAccount.GetName(),
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(o.TokenExpiration / time.Second))}},
		metav1.CreateOptions{})
	if err != nil {
		return "", nil, fmt.Errorf("token secret %s/%s has no token (is the token controller of kube-controller-manager running?), and the TokenRequest API failed: %w", ns, secretName, err)
	}
	expires := tr.Status.ExpirationTimestamp.Time
	fmt.Fprintf(out, "member %s: token from the TokenRequest API (secret %s/%s was not filled), expires %s; run register again before then\n",
		o.MemberContext, ns, secretName, expires.UTC().Format(time.RFC3339))
	if requested := time.Now().Add(o.TokenExpiration); expires.Before(requested.Add(-time.Hour)) {
		fmt.Fprintf(errOut, "Warning: the member's apiserver shortened the token lifetime to %s (requested %s)\n", time.Until(expires).Round(time.Minute), o.TokenExpiration)
	}
	return tr.Status.Token, nil, nil
}

// tokenAuthenticatesAs asks the member whether token authenticates as user.
func tokenAuthenticatesAs(ctx context.Context, member *cliClients, token, user string) (bool, error) {
	tr, err := member.kube.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return tr.Status.Authenticated && tr.Status.User.Username == user, nil
}

// aboutName checks name against the member's About API cluster id, which
// names the member when --name is not given. A member whose id differs
// from its registration is refused by the daemon, so register refuses it
// first. An id that cannot be read is not a reason to stop.
func (o *registerOptions) aboutName(ctx context.Context, member *cliClients, name string, errOut io.Writer) (string, error) {
	rc := member.kube.Discovery().RESTClient()
	if rc == nil {
		return name, nil
	}
	id, err := clusters.ReadIdentity(ctx, rc)
	switch {
	case err != nil:
		fmt.Fprintf(errOut, "Warning: cannot read member %s's About API ClusterProperty %s: %v\n", o.MemberContext, clusters.PropertyClusterID, err)
		return name, nil
	case id.ClusterID == "" || id.ClusterID == name:
		return name, nil
	case o.Name != "":
		return "", fmt.Errorf("member %s names itself %q (About API ClusterProperty %s), not %q: the daemon refuses a member registered under another name than its id; omit --name or correct the property",
			o.MemberContext, id.ClusterID, clusters.PropertyClusterID, o.Name)
	}
	if msgs := validation.IsDNS1123Label(id.ClusterID); len(msgs) > 0 {
		return "", fmt.Errorf("member %s names itself %q (About API ClusterProperty %s), which is not a DNS-1123 label: %s; set a valid id",
			o.MemberContext, id.ClusterID, clusters.PropertyClusterID, strings.Join(msgs, "; "))
	}
	fmt.Fprintf(errOut, "Cluster name %q from member %s's About API ClusterProperty %s\n", id.ClusterID, o.MemberContext, clusters.PropertyClusterID)
	return id.ClusterID, nil
}
