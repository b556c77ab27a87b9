package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	stdsync "sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"k8s.io/utils/ptr"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	cpclientset "sigs.k8s.io/cluster-inventory-api/client/clientset/versioned"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	"sigs.k8s.io/yaml"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/config"
	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/explain"
)

const (
	fleetNamespace    = "fleet"
	clusterManager    = "test-fleet-manager"
	pluginProvider    = "test-token-plugin"
	memberIdentityNS  = "endpoint-aggregator-member"
	tokenPluginSource = `package main

// A credential plugin for client-go's exec mechanism: it prints the token in
// the file named by its only argument, valid for two seconds, and logs what
// it served. Any other argument (one a ClusterProfile proposed) fails it.
import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintf(os.Stderr, "token-plugin: want one argument, got %q\n", os.Args[1:])
		os.Exit(2)
	}
	tok, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	token := strings.TrimSpace(string(tok))
	if f, err := os.OpenFile(os.Args[1]+".log", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
		fmt.Fprintln(f, token[len(token)-8:])
		f.Close()
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{
		"apiVersion": "client.authentication.k8s.io/v1",
		"kind":       "ExecCredential",
		"status": map[string]any{
			"token":               token,
			"expirationTimestamp": time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339),
		},
	})
}
`
)

// A ClusterProfile whose access provider is a credential plugin (built here;
// it prints the member's ServiceAccount token) registers a member. Rotating
// what the plugin returns and revoking the old token keeps the member
// connected; ControlPlaneHealthy=False makes it unreachable; a newer Secret
// claiming its name is refused; deleting the ClusterProfile withdraws it.
func TestClusterProfileMemberFromCredentialPluginSurvivesTokenRotation(t *testing.T) {
	t.Parallel()
	cs := testenv.StartAllT(t,
		testenv.Spec{Name: "hub", Options: testenv.Options{CRDs: true}},
		testenv.Spec{Name: "east", Options: testenv.Options{CRDs: true}},
	)
	e := &env{hub: cs[0], east: cs[1], hubMCS: mcsclientset.NewForConfigOrDie(cs[0].Config)}
	ctx := context.Background()
	for _, c := range cs {
		mustCreateNamespace(t, c.Client, appNamespace)
	}
	mustCreateNamespace(t, e.hub.Client, daemonNamespace)
	mustCreateNamespace(t, e.hub.Client, fleetNamespace)
	installClusterProfileCRD(t, e.hub)
	cps := cpclientset.NewForConfigOrDie(e.hub.Config).ApisV1alpha1().ClusterProfiles(fleetNamespace)

	// The member identity: two ServiceAccounts with the member rules, one
	// token each, the second for the rotation.
	memberIdentity(t, e.east, "reader-1", "reader-2")
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	first := memberToken(t, e.east, "reader-1")
	writeToken(t, tokenFile, first)
	plugin := buildTokenPlugin(t, dir)
	providers := filepath.Join(dir, "access-providers.json")
	writeJSON(t, providers, map[string]any{"providers": []any{map[string]any{
		"name": pluginProvider,
		"execConfig": map[string]any{
			"apiVersion": "client.authentication.k8s.io/v1", "command": plugin, "args": []string{tokenFile},
			"interactiveMode": "Never",
		},
	}}})

	// The daemon reaches east through a proxy that counts its probes.
	probes := startProbeCounter(t, e.east)
	createClusterProfile(t, cps, "east", clusterManager, probes.srv.URL, probes.caData)
	// Another cluster manager's ClusterProfile is not the daemon's.
	createClusterProfile(t, cps, "other", "someone-else", e.east.Host(), e.east.Config.CAData)

	svc := "cart"
	exportService(t, e.east.Client, svc)
	applySlices(t, e.east.Client, svc, endpointSlice(svc, svc+"-a", 1, 3, true))

	d := e.startDaemon(t, func(o *app.Options) {
		o.ClusterProfileNamespaces = []string{fleetNamespace}
		o.ClusterManager = clusterManager
		o.AccessProviderFile = providers
		o.ProbeInterval = time.Second
		o.ProbeTimeout = 2 * time.Second
	})
	eventually(t, waitTimeout, func() error {
		if st := e.hubState(t, svc); st.total["east"] != 3 {
			return fmt.Errorf("hub has %d endpoints of east, want 3", st.total["east"])
		}
		return nil
	})
	d.waitSettled(t)
	if got := d.Registry.Names(); len(got) != 1 || got[0] != "east" {
		t.Fatalf("members %v, want [east] (not the other cluster manager's)", got)
	}
	if ev := eventsAbout(t, e, fleetNamespace, "ClusterProfile", "east"); !strings.Contains(ev, clusters.ReasonConnected) {
		t.Errorf("no %s Event on the ClusterProfile; events:\n%s", clusters.ReasonConnected, ev)
	}

	t.Run("explain gives the ClusterProfile member a row, read through the plugin", func(t *testing.T) {
		kubeconfig := cliKubeconfig(t, e.hub)
		stdout, stderr, err := runCLI(ctx, "explain", appNamespace+"/"+svc, "--hub-context", "hub", "--kubeconfig", kubeconfig,
			"-n", daemonNamespace, "--export-mode", "annotation", "--cluster-profile-namespaces", fleetNamespace,
			"--cluster-manager", clusterManager, "--access-provider-file", providers, "-o", "json")
		if err != nil {
			t.Fatalf("explain: %v\n%s", err, stderr)
		}
		var r explain.Report
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("explain -o json: %v\n%s", err, stdout)
		}
		if len(r.Members) != 1 {
			t.Fatalf("explain rows %+v, want one (east; not the other cluster manager's)", r.Members)
		}
		m := r.Members[0]
		if m.Cluster != "east" || m.Registration != "ClusterProfile "+fleetNamespace+"/east" || m.Connected != "True" || m.Ready != 3 {
			t.Errorf("explain row %+v, want east from its ClusterProfile, connected, 3 ready", m)
		}
	})

	t.Run("rotation keeps the member connected", func(t *testing.T) {
		second := memberToken(t, e.east, "reader-2")
		writeToken(t, tokenFile, second)
		// The plugin's credential expires within 2s; client-go runs it again.
		eventually(t, waitTimeout, func() error {
			log, _ := os.ReadFile(tokenFile + ".log")
			if !strings.Contains(string(log), second[len(second)-8:]) {
				return fmt.Errorf("the plugin has not served the new token yet")
			}
			return nil
		})
		// Revoke the first token: its ServiceAccount goes. The API server
		// may accept a token it checked for a few more seconds.
		if err := e.east.Client.CoreV1().ServiceAccounts(memberIdentityNS).Delete(ctx, "reader-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		revoked := &rest.Config{Host: e.east.Host(), BearerToken: first, TLSClientConfig: rest.TLSClientConfig{CAData: e.east.Config.CAData}}
		eventually(t, waitTimeout, func() error {
			_, err := kubernetes.NewForConfigOrDie(revoked).CoreV1().Services(appNamespace).List(ctx, metav1.ListOptions{})
			if !apierrors.IsUnauthorized(err) {
				return fmt.Errorf("the first token still works: %v", err)
			}
			return nil
		})
		answeredBefore, failedBefore := probes.counts()
		applySlices(t, e.east.Client, svc, endpointSlice(svc, svc+"-a", 1, 5, true))
		eventually(t, waitTimeout, func() error {
			if st := e.hubState(t, svc); st.total["east"] != 5 {
				return fmt.Errorf("hub has %d endpoints of east, want 5", st.total["east"])
			}
			return nil
		})
		// Several probes with the new credentials, none failing.
		const several = 3
		eventually(t, waitTimeout, func() error {
			if answered, _ := probes.counts(); answered-answeredBefore < several {
				return fmt.Errorf("%d probes of east answered since the revocation, want %d", answered-answeredBefore, several)
			}
			return nil
		})
		if _, failed := probes.counts(); failed != failedBefore {
			t.Errorf("%d probes of east failed after the revocation", failed-failedBefore)
		}
		if since, down := d.Registry.Get("east").UnreachableSince(); down {
			t.Errorf("east unreachable since %s after the rotation", since)
		}
		ev := eventsAbout(t, e, fleetNamespace, "ClusterProfile", "east")
		for _, reason := range clusters.FailureReasons() {
			if strings.Contains(ev, reason+":") {
				t.Errorf("east was unreachable during the rotation; events:\n%s", ev)
			}
		}
	})

	t.Run("ControlPlaneHealthy=False is unreachable", func(t *testing.T) {
		setControlPlaneHealthy(t, cps, "east", metav1.ConditionFalse)
		eventually(t, waitTimeout, func() error {
			if _, down := d.Registry.Get("east").UnreachableSince(); !down {
				return fmt.Errorf("east not unreachable yet")
			}
			reason := clusters.ClassUnhealthy.Reason()
			if ev := eventsAbout(t, e, fleetNamespace, "ClusterProfile", "east"); !strings.Contains(ev, reason+": member \"east\" is unhealthy: the cluster manager reports ControlPlaneHealthy=False") {
				return fmt.Errorf("no %s Event naming the condition; events:\n%s", reason, ev)
			}
			return nil
		})
		// Back to True: the member answers again, and its informers are
		// restarted, listing and watching with the rotated token alone.
		setControlPlaneHealthy(t, cps, "east", metav1.ConditionTrue)
		eventually(t, waitTimeout, func() error {
			if _, down := d.Registry.Get("east").UnreachableSince(); down {
				return fmt.Errorf("east still unreachable")
			}
			return nil
		})
		applySlices(t, e.east.Client, svc, endpointSlice(svc, svc+"-a", 1, 2, true))
		eventually(t, waitTimeout, func() error {
			if st := e.hubState(t, svc); st.total["east"] != 2 {
				return fmt.Errorf("hub has %d endpoints of east, want 2", st.total["east"])
			}
			return nil
		})
	})

	t.Run("a newer Secret claiming the name is refused", func(t *testing.T) {
		e.register(t, "east-kubeconfig", "east", e.east.Kubeconfig)
		eventually(t, waitTimeout, func() error {
			if ev := secretEvents(t, e, "east-kubeconfig"); !strings.Contains(ev, clusters.ReasonDuplicateName+": cluster name \"east\" is already registered by the older ClusterProfile fleet/east") {
				return fmt.Errorf("no %s Event on the Secret; events:\n%s", clusters.ReasonDuplicateName, ev)
			}
			return nil
		})
		if err := e.hub.Client.CoreV1().Secrets(daemonNamespace).Delete(ctx, "east-kubeconfig", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("deleting the ClusterProfile withdraws the member", func(t *testing.T) {
		if err := cps.Delete(ctx, "east", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, waitTimeout, func() error {
			if objs := e.ourObjects(t); len(objs) > 0 {
				return fmt.Errorf("%d hub objects left, e.g. %v", len(objs), objs)
			}
			return nil
		})
		if got := d.Registry.Names(); len(got) != 0 {
			t.Errorf("members %v after the ClusterProfile was deleted", got)
		}
	})
}

// installClusterProfileCRD installs the ClusterProfile CRD of the
// sigs.k8s.io/cluster-inventory-api module the daemon is built against (the
// cluster manager's CRD: the chart does not ship it) and waits until it is
// served.
func installClusterProfileCRD(t *testing.T, hub *testenv.Cluster) {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/cluster-inventory-api").Output()
	if err != nil {
		t.Fatalf("finding the cluster-inventory-api module: %v", err)
	}
	raw, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases", "multicluster.x-k8s.io_clusterprofiles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(raw, crd); err != nil {
		t.Fatal(err)
	}
	api := apiextensionsclient.NewForConfigOrDie(hub.Config).ApiextensionsV1().CustomResourceDefinitions()
	if _, err := api.Create(context.Background(), crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cps := cpclientset.NewForConfigOrDie(hub.Config).ApisV1alpha1().ClusterProfiles(fleetNamespace)
	eventually(t, waitTimeout, func() error {
		_, err := cps.List(context.Background(), metav1.ListOptions{})
		return err
	})
}

// memberIdentity creates ServiceAccounts in the member bound to the member
// rules of config/rbac.
func memberIdentity(t *testing.T, member *testenv.Cluster, names ...string) {
	t.Helper()
	ctx := context.Background()
	raw, err := config.RBAC.ReadFile("rbac/member-clusterrole.yaml")
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(raw, role); err != nil {
		t.Fatal(err)
	}
	if _, err := member.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mustCreateNamespace(t, member.Client, memberIdentityNS)
	for _, n := range names {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: memberIdentityNS, Name: n}}
		if _, err := member.Client.CoreV1().ServiceAccounts(memberIdentityNS).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "endpoint-aggregator-" + n},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: memberIdentityNS, Name: n}},
		}
		if _, err := member.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// memberToken asks the member's TokenRequest API for a token of a
// ServiceAccount; deleting the ServiceAccount revokes it.
func memberToken(t *testing.T, member *testenv.Cluster, sa string) string {
	t.Helper()
	tr, err := member.Client.CoreV1().ServiceAccounts(memberIdentityNS).CreateToken(context.Background(), sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// writeToken replaces the plugin's token file at once (rename), so the
// plugin never reads half a token.
func writeToken(t *testing.T, path, token string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// buildTokenPlugin builds tokenPluginSource into dir and returns its path.
func buildTokenPlugin(t *testing.T, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "plugin", "main.go")
	if err := os.MkdirAll(filepath.Dir(src), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte(tokenPluginSource), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "token-plugin")
	cmd := exec.Command("go", "build", "-o", bin, src)
	cmd.Dir = filepath.Dir(src)
	// Outside any module: no module flags, no downloads.
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GO111MODULE=off", "GOPROXY=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the credential plugin: %v\n%s", err, out)
	}
	return bin
}

// createClusterProfile creates a ClusterProfile of the given cluster manager
// whose access provider is the test plugin, for member's API server. It
// proposes plugin arguments, which the daemon must ignore (the plugin fails
// on any extra argument).
func createClusterProfile(t *testing.T, cps interface {
	Create(context.Context, *cpv1alpha1.ClusterProfile, metav1.CreateOptions) (*cpv1alpha1.ClusterProfile, error)
	UpdateStatus(context.Context, *cpv1alpha1.ClusterProfile, metav1.UpdateOptions) (*cpv1alpha1.ClusterProfile, error)
}, name, manager, server string, caData []byte) {
	t.Helper()
	cp := &cpv1alpha1.ClusterProfile{
		ObjectMeta: metav1.ObjectMeta{Namespace: fleetNamespace, Name: name, Labels: map[string]string{cpv1alpha1.LabelClusterManagerKey: manager}},
		Spec:       cpv1alpha1.ClusterProfileSpec{DisplayName: name, ClusterManager: cpv1alpha1.ClusterManager{Name: manager}},
	}
	cp, err := cps.Create(context.Background(), cp, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cp.Status.AccessProviders = []cpv1alpha1.AccessProvider{{
		Name: pluginProvider,
		Cluster: clientcmdv1.Cluster{
			Server:                   server,
			CertificateAuthorityData: caData,
			Extensions: []clientcmdv1.NamedExtension{{
				Name: "clusterprofiles.multicluster.x-k8s.io/exec/additional-args",
				// The CRD takes objects only, though pkg/access reads a list.
				Extension: runtime.RawExtension{Raw: []byte(`{"args": ["--proposed-by-the-profile"]}`)},
			}},
		},
	}}
	cp.Status.Conditions = []metav1.Condition{{Type: cpv1alpha1.ClusterConditionControlPlaneHealthy, Status: metav1.ConditionTrue, Reason: "Healthy", LastTransitionTime: metav1.Now()}}
	if _, err := cps.UpdateStatus(context.Background(), cp, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func setControlPlaneHealthy(t *testing.T, cps interface {
	Get(context.Context, string, metav1.GetOptions) (*cpv1alpha1.ClusterProfile, error)
	UpdateStatus(context.Context, *cpv1alpha1.ClusterProfile, metav1.UpdateOptions) (*cpv1alpha1.ClusterProfile, error)
}, name string, status metav1.ConditionStatus) {
	t.Helper()
	cp, err := cps.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cp.Status.Conditions = []metav1.Condition{{Type: cpv1alpha1.ClusterConditionControlPlaneHealthy, Status: status, Reason: "Test", Message: "set by the test", LastTransitionTime: metav1.Now()}}
	if _, err := cps.UpdateStatus(context.Background(), cp, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// probeCounter is a proxy in front of a member's API server that counts the
// health probes (GET /readyz) passing through it: answered (200) and failed.
type probeCounter struct {
	srv    *httptest.Server
	caData []byte // of srv's certificate

	mu               stdsync.Mutex
	answered, failed int
}

func startProbeCounter(t *testing.T, member *testenv.Cluster) *probeCounter {
	t.Helper()
	target, err := url.Parse(member.Host())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(member.Config.CAData) {
		t.Fatal("no CA certificate in the member's config")
	}
	p := &probeCounter{}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true},
		ModifyResponse: func(resp *http.Response) error {
			if resp.Request.Method == http.MethodGet && resp.Request.URL.Path == "/readyz" {
				p.count(resp.StatusCode == http.StatusOK)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Method == http.MethodGet && r.URL.Path == "/readyz" {
				p.count(false)
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.srv = httptest.NewUnstartedServer(rp)
	p.srv.EnableHTTP2 = true
	p.srv.StartTLS()
	t.Cleanup(p.srv.Close)
	p.caData = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw})
	return p
}

func (p *probeCounter) count(ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ok {
		p.answered++
	} else {
		p.failed++
	}
}

// counts returns the numbers of probes answered and failed so far.
func (p *probeCounter) counts() (answered, failed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.answered, p.failed
}
