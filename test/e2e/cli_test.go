package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
)

// The member identity register creates (config/rbac).
const (
	cliMemberNamespace = "endpoint-aggregator-member"
	cliMemberSA        = "endpoint-aggregator-member"
	cliMemberToken     = "endpoint-aggregator-member-token"
	cliMemberRole      = "endpoint-aggregator-member"
)

// cliMember is one row of `status -o json`.
type cliMember struct {
	Name           string `json:"name"`
	Secret         string `json:"secret"`
	Connected      string `json:"connected"`
	Synced         string `json:"synced"`
	Services       int    `json:"services"`
	Endpoints      int    `json:"endpoints"`
	ReadyEndpoints int    `json:"readyEndpoints"`
	LastError      string `json:"lastError"`
	AboutID        string `json:"aboutID"`
	IDSource       string `json:"idSource"`
	LeaseRenewTime string `json:"leaseRenewTime"`
}

// TestCLI drives register, status and unregister in-process against a hub
// and members, with the daemon aggregating what register set up. The steps
// share state and run in order.
func TestCLI(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	kubeconfig := cliKubeconfig(t, e.hub, e.east, e.west)
	cli := func(t *testing.T, args ...string) (stdout, stderr string) {
		t.Helper()
		stdout, stderr, err := runCLI(ctx, append(args, "--kubeconfig", kubeconfig)...)
		if err != nil {
			t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout, stderr)
		}
		return stdout, stderr
	}
	register := []string{"register", "--member-context", "east", "--hub-context", "hub", "--name", "east", "--token-wait", "2s"}
	secrets := e.hub.Client.CoreV1().Secrets(daemonNamespace)
	var secretRV string

	t.Run("register creates the member identity and the registration Secret", func(t *testing.T) {
		stdout, stderr := cli(t, register...)
		t.Logf("stdout:\n%sstderr:\n%s", stdout, stderr)
		// No token controller runs: the token comes from the TokenRequest API.
		if !strings.Contains(stdout, "token from the TokenRequest API") {
			t.Errorf("register did not fall back to the TokenRequest API:\n%s", stdout)
		}
		s, err := secrets.Get(ctx, "east", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		secretRV = s.ResourceVersion
		if s.Labels[clusters.LabelMemberCluster] != "true" || s.Annotations[clusters.AnnotationClusterName] != "east" {
			t.Errorf("registration Secret labels %v annotations %v", s.Labels, s.Annotations)
		}
		kc, err := clientcmd.Load(s.Data[clusters.KubeconfigKey])
		if err != nil {
			t.Fatal(err)
		}
		cluster := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster]
		user := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]
		if cluster.Server != e.east.Host() || !bytes.Equal(cluster.CertificateAuthorityData, e.east.Config.CAData) || user.Token == "" {
			t.Errorf("kubeconfig server %q (want %q), CA data matches %v, token set %v",
				cluster.Server, e.east.Host(), bytes.Equal(cluster.CertificateAuthorityData, e.east.Config.CAData), user.Token != "")
		}
		if _, err := clusters.RESTConfig(s.Data[clusters.KubeconfigKey], clusters.KubeconfigPolicy{}); err != nil {
			t.Errorf("the daemon's default policy refuses the kubeconfig: %v", err)
		}
		sa := "system:serviceaccount:" + cliMemberNamespace + ":" + cliMemberSA
		for _, tc := range []struct {
			group, resource, sub, verb string
			allowed                    bool
		}{
			{"", "services", "", "watch", true},
			{"discovery.k8s.io", "endpointslices", "", "list", true},
			{"multicluster.x-k8s.io", "serviceexports", "", "get", true},
			{"multicluster.x-k8s.io", "serviceexports", "status", "patch", true},
			{"", "services", "", "create", false},
			{"", "secrets", "", "list", false},
		} {
			if got := cliAllowed(t, e.east.Client, sa, tc.group, tc.resource, tc.sub, tc.verb); got != tc.allowed {
				t.Errorf("%s %s/%s %s: allowed=%v, want %v", tc.verb, tc.group, tc.resource, tc.sub, got, tc.allowed)
			}
		}
	})

	t.Run("register again changes nothing", func(t *testing.T) {
		before := cliMemberIdentityRVs(t, e.east.Client)
		stdout, _ := cli(t, register...)
		s, err := secrets.Get(ctx, "east", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s.ResourceVersion != secretRV {
			t.Errorf("registration Secret resourceVersion %s, was %s: the second run wrote it", s.ResourceVersion, secretRV)
		}
		if after := cliMemberIdentityRVs(t, e.east.Client); !cliEqualMaps(before, after) {
			t.Errorf("member identity changed: before %v, after %v", before, after)
		}
		if strings.Contains(stdout, " created") || strings.Contains(stdout, " configured") || !strings.Contains(stdout, "keeping the registered token") {
			t.Errorf("second run output:\n%s", stdout)
		}
		list, err := secrets.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 {
			t.Errorf("%d Secrets in the daemon namespace, want 1", len(list.Items))
		}
	})

	t.Run("a token Secret filled by a token controller is preferred", func(t *testing.T) {
		// No token controller runs here: play its part with a token of the
		// ServiceAccount from the TokenRequest API.
		tr, err := e.east.Client.CoreV1().ServiceAccounts(cliMemberNamespace).CreateToken(ctx, cliMemberSA, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tokens := e.east.Client.CoreV1().Secrets(cliMemberNamespace)
		tok, err := tokens.Get(ctx, cliMemberToken, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tok.Data = map[string][]byte{
			corev1.ServiceAccountTokenKey:     []byte(tr.Status.Token),
			corev1.ServiceAccountRootCAKey:    e.east.Config.CAData,
			corev1.ServiceAccountNamespaceKey: []byte(cliMemberNamespace),
		}
		if _, err := tokens.Update(ctx, tok, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		stdout, _ := cli(t, register...)
		if !strings.Contains(stdout, "token from secret") || !strings.Contains(stdout, "secret/east (namespace endpoint-aggregator) configured") {
			t.Errorf("register after the token Secret was filled:\n%s", stdout)
		}
		s, err := secrets.Get(ctx, "east", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		kc, err := clientcmd.Load(s.Data[clusters.KubeconfigKey])
		if err != nil {
			t.Fatal(err)
		}
		if got := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo].Token; got != tr.Status.Token {
			t.Errorf("registered token is not the token Secret's")
		}
		secretRV = s.ResourceVersion
		cli(t, register...)
		if s, err := secrets.Get(ctx, "east", metav1.GetOptions{}); err != nil || s.ResourceVersion != secretRV {
			t.Errorf("third run wrote the Secret (err %v)", err)
		}
	})

	t.Run("dry-run prints the Secret and creates nothing", func(t *testing.T) {
		stdout, stderr := cli(t, "register", "--member-context", "west", "--hub-context", "hub", "--name", "west", "--dry-run")
		var s corev1.Secret
		if err := yaml.UnmarshalStrict([]byte(stdout), &s); err != nil {
			t.Fatalf("dry-run output is not a Secret: %v\n%s", err, stdout)
		}
		if s.Name != "west" || s.Namespace != daemonNamespace || s.Labels[clusters.LabelMemberCluster] != "true" {
			t.Errorf("dry-run Secret %s/%s labels %v", s.Namespace, s.Name, s.Labels)
		}
		kc, err := clientcmd.Load([]byte(s.StringData[clusters.KubeconfigKey]))
		if err != nil {
			t.Fatalf("dry-run kubeconfig: %v", err)
		}
		if got := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster].Server; got != e.west.Host() {
			t.Errorf("dry-run server %q, want %q", got, e.west.Host())
		}
		if !strings.Contains(stderr, "would apply") {
			t.Errorf("dry-run does not say what it would apply:\n%s", stderr)
		}
		if _, err := secrets.Get(ctx, "west", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("dry-run created the hub Secret (err %v)", err)
		}
		if _, err := e.west.Client.CoreV1().Namespaces().Get(ctx, cliMemberNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("dry-run created the member namespace (err %v)", err)
		}
		if _, err := e.west.Client.RbacV1().ClusterRoles().Get(ctx, cliMemberRole, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("dry-run created the member ClusterRole (err %v)", err)
		}
		if s, err := secrets.Get(ctx, "east", metav1.GetOptions{}); err != nil || s.ResourceVersion != secretRV {
			t.Errorf("dry-run touched the east Secret (err %v)", err)
		}
	})

	d := e.startDaemon(t, nil)

	t.Run("the daemon aggregates the member with the identity register created", func(t *testing.T) {
		exportService(t, e.east.Client, "cart")
		exportService(t, e.east.Client, "db")
		applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-east-1", 1, 3, true))
		applySlices(t, e.east.Client, "db", endpointSlice("db", "db-east-1", 2, 2, false))
		waitFor(t, e, "cart", map[string]int{"east": 3}, map[string]int{"east": 3})
		waitFor(t, e, "db", map[string]int{"east": 2}, map[string]int{})
		d.waitSettled(t)
	})

	t.Run("status reports east connected and synced with its counts", func(t *testing.T) {
		var east cliMember
		var leaseRenewed string
		eventually(t, waitTimeout, func() error {
			stdout, _, err := runCLI(ctx, "status", "--hub-context", "hub", "-o", "json", "--kubeconfig", kubeconfig)
			if err != nil {
				return err
			}
			var report struct {
				Namespace string      `json:"namespace"`
				Members   []cliMember `json:"members"`
			}
			if err := json.Unmarshal([]byte(stdout), &report); err != nil {
				return fmt.Errorf("%v\n%s", err, stdout)
			}
			if len(report.Members) != 1 {
				return fmt.Errorf("members %+v, want only east", report.Members)
			}
			east = report.Members[0]
			// The daemon renews a liveness Lease per healthy member.
			if east.LeaseRenewTime == "" {
				return fmt.Errorf("status reports no renewal of the member Lease yet")
			}
			leaseRenewed, east.LeaseRenewTime = east.LeaseRenewTime, ""
			// east has no About API: its name is its registration's.
			want := cliMember{Name: "east", Secret: "east", Connected: "True", Synced: "True", Services: 2, Endpoints: 5, ReadyEndpoints: 3, IDSource: "registration"}
			if east != want {
				return fmt.Errorf("status %+v, want %+v", east, want)
			}
			return nil
		})
		t.Logf("member Lease renewed at %q", leaseRenewed)
		stdout, _ := cli(t, "status", "--hub-context", "hub")
		t.Logf("status:\n%s", stdout)
		// The replicas share the members by default: OWNER names the one
		// replica, which writes east.
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME SECRET OWNER CONNECTED SYNCED SERVICES ENDPOINTS CONFLICT LAST ERROR AGE" ||
			!strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "east east "+d.Identity()+" True True 2 5 <none> ") {
			t.Errorf("status table:\n%s", stdout)
		}
		stdout, _ = cli(t, "status", "--hub-context", "hub", "-o", "yaml")
		var fromYAML struct {
			Members []cliMember `json:"members"`
		}
		err := yaml.Unmarshal([]byte(stdout), &fromYAML)
		if err == nil && len(fromYAML.Members) == 1 {
			fromYAML.Members[0].LeaseRenewTime = ""
		}
		if err != nil || len(fromYAML.Members) != 1 || fromYAML.Members[0] != east {
			t.Errorf("status -o yaml (err %v):\n%s", err, stdout)
		}
	})

	t.Run("unregister removes the Secret, the member identity and the member's hub objects", func(t *testing.T) {
		stdout, _ := cli(t, "unregister", "--hub-context", "hub", "--name", "east", "--cleanup-member", "--member-context", "east")
		t.Logf("unregister:\n%s", stdout)
		if _, err := secrets.Get(ctx, "east", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("registration Secret still there (err %v)", err)
		}
		c := e.east.Client
		for what, err := range map[string]error{
			"ClusterRoleBinding": cliGetErr(c.RbacV1().ClusterRoleBindings().Get(ctx, cliMemberRole, metav1.GetOptions{})),
			"ClusterRole":        cliGetErr(c.RbacV1().ClusterRoles().Get(ctx, cliMemberRole, metav1.GetOptions{})),
			"ServiceAccount":     cliGetErr(c.CoreV1().ServiceAccounts(cliMemberNamespace).Get(ctx, cliMemberSA, metav1.GetOptions{})),
			"token Secret":       cliGetErr(c.CoreV1().Secrets(cliMemberNamespace).Get(ctx, cliMemberToken, metav1.GetOptions{})),
		} {
			if !apierrors.IsNotFound(err) {
				t.Errorf("member %s still there (err %v)", what, err)
			}
		}
		// No namespace controller runs in the test clusters: the namespace
		// stays Terminating.
		ns, err := c.CoreV1().Namespaces().Get(ctx, cliMemberNamespace, metav1.GetOptions{})
		if err == nil && ns.DeletionTimestamp == nil {
			t.Errorf("member namespace not deleted")
		} else if err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
		eventually(t, waitTimeout, func() error {
			if objs := e.ourObjects(t); len(objs) > 0 {
				return fmt.Errorf("hub objects left: %v", objs)
			}
			return nil
		})
		eventually(t, waitTimeout, func() error {
			stdout, _, err := runCLI(ctx, "status", "--hub-context", "hub", "-o", "json", "--kubeconfig", kubeconfig)
			if err != nil {
				return err
			}
			if !strings.Contains(stdout, `"members": []`) {
				return fmt.Errorf("status after unregister:\n%s", stdout)
			}
			return nil
		})
		// Again: nothing left to delete is not an error.
		_, stderr := cli(t, "unregister", "--hub-context", "hub", "--name", "east")
		if !strings.Contains(stderr, "no registration Secret") {
			t.Errorf("second unregister: %s", stderr)
		}
	})

	t.Run("register --read-only grants no ServiceExport status writes", func(t *testing.T) {
		cli(t, "register", "--member-context", "west", "--hub-context", "hub", "--read-only", "--token-wait", "0s")
		sa := "system:serviceaccount:" + cliMemberNamespace + ":" + cliMemberSA
		if !cliAllowed(t, e.west.Client, sa, "multicluster.x-k8s.io", "serviceexports", "", "watch") {
			t.Error("read-only identity cannot watch ServiceExports")
		}
		for _, verb := range []string{"patch", "update"} {
			if cliAllowed(t, e.west.Client, sa, "multicluster.x-k8s.io", "serviceexports", "status", verb) {
				t.Errorf("read-only identity may %s serviceexports/status", verb)
			}
		}
		// The name defaults to the member context's.
		if _, err := secrets.Get(ctx, "west", metav1.GetOptions{}); err != nil {
			t.Error(err)
		}
		cli(t, "unregister", "--hub-context", "hub", "--name", "west", "--cleanup-member", "--member-context", "west")
		if _, err := e.west.Client.RbacV1().ClusterRoles().Get(ctx, cliMemberRole, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("member ClusterRole still there (err %v)", err)
		}
	})
}

// runCLI runs the endpoint-aggregator command line in-process.
func runCLI(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	cmd := app.NewCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err = cmd.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// cliKubeconfig writes one kubeconfig with a context per cluster,
// named like the cluster.
func cliKubeconfig(t *testing.T, cs ...*testenv.Cluster) string {
	t.Helper()
	return testenv.MergedKubeconfig(t, cs...)
}

// cliMemberIdentityRVs returns the resourceVersions of the member identity.
func cliMemberIdentityRVs(t *testing.T, c kubernetes.Interface) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	add := func(what string, o metav1.Object, err error) {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		out[what] = o.GetResourceVersion()
	}
	ns, err := c.CoreV1().Namespaces().Get(ctx, cliMemberNamespace, metav1.GetOptions{})
	add("Namespace", ns, err)
	sa, err := c.CoreV1().ServiceAccounts(cliMemberNamespace).Get(ctx, cliMemberSA, metav1.GetOptions{})
	add("ServiceAccount", sa, err)
	tok, err := c.CoreV1().Secrets(cliMemberNamespace).Get(ctx, cliMemberToken, metav1.GetOptions{})
	add("Secret", tok, err)
	cr, err := c.RbacV1().ClusterRoles().Get(ctx, cliMemberRole, metav1.GetOptions{})
	add("ClusterRole", cr, err)
	crb, err := c.RbacV1().ClusterRoleBindings().Get(ctx, cliMemberRole, metav1.GetOptions{})
	add("ClusterRoleBinding", crb, err)
	return out
}

func cliAllowed(t *testing.T, c kubernetes.Interface, user, group, resource, sub, verb string) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + cliMemberNamespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Group: group, Resource: resource, Subresource: sub, Verb: verb, Namespace: appNamespace,
		},
	}}
	got, err := c.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got.Status.Allowed
}

func cliGetErr[T any](_ T, err error) error { return err }

func cliEqualMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
