package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
)

// TestChartRBACWithIncludeNamespacesConvergesAndWritesNowhereElse installs
// the chart with includeNamespaces=[shop] and runs the daemon as its
// ServiceAccount: the daemon aggregates both members and records its Events
// without a single Forbidden answer, while the ServiceAccount can write
// Services, Endpoints, EndpointSlices and ServiceImports in shop only: the
// hub refuses the same write in another namespace.
func TestChartRBACWithIncludeNamespacesConvergesAndWritesNowhereElse(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	kubectl := filepath.Join(testenv.RequireAssets(t), "kubectl")
	forbidden := &forbiddenRecorder{}

	// billing exists everywhere but is not included: nothing of it may be
	// imported, and the daemon may write nothing there.
	for _, c := range []*testenv.Cluster{e.hub, e.east, e.west} {
		mustCreateNamespace(t, c.Client, "billing")
	}
	exportServiceIn(t, e.east, "billing", "invoices")

	// The NetworkPolicy goes along, for the hub's API server to validate
	// (the test hub has no network plugin to enforce it).
	manifests := installChart(t, e, kubectl, "--set", "exportMode=annotation", "--set", "memberHealth.leaseDuration=4s",
		"--set-json", `includeNamespaces=["`+appNamespace+`"]`, "--set", "networkPolicy.enabled=true",
		"--set-json", `networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]`,
		"--set-json", `networkPolicy.egressTo=[{"ipBlock":{"cidr":"10.0.0.0/8"}}]`, "--set-json", `networkPolicy.egressPorts=[{"port":6443}]`)
	if _, err := e.hub.Client.NetworkingV1().NetworkPolicies(daemonNamespace).Get(ctx, chartRelease, metav1.GetOptions{}); err != nil {
		t.Fatalf("the chart's NetworkPolicy: %v", err)
	}
	// A user's own Service where a per-cluster one would go: a conflict
	// Event in shop.
	if _, err := e.hub.Client.CoreV1().Services(appNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: "lonely-east"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	// A registration the daemon refuses: an Event on its Secret, in the
	// release namespace.
	e.register(t, "bad", "bad", []byte("not a kubeconfig"))
	d := startChartDaemon(t, e, manifests, forbidden)

	exportCartAndLonely(t, e)
	wait := waitUnforbidden(forbidden)

	t.Run("the daemon converges with Roles only in shop", func(t *testing.T) {
		wait(t, func() error {
			if err := cartAggregated(t, e); err != nil {
				return err
			}
			if ev := eventsAbout(t, e, appNamespace, "Service", "lonely-east"); ev == "" {
				return fmt.Errorf("no Event on the foreign Service lonely-east")
			}
			if ev := eventsAbout(t, e, daemonNamespace, "Secret", "bad"); ev == "" {
				return fmt.Errorf("no Event on the refused registration")
			}
			return nil
		})
		d.waitSettled(t)
		if _, err := e.hub.Client.CoreV1().Services("billing").Get(ctx, "invoices-east", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("billing/invoices-east on the hub: %v, want none (billing is not included)", err)
		}
		if n, reqs := forbidden.get(); n > 0 {
			t.Errorf("%d requests as the chart's ServiceAccount were Forbidden:\n%s", n, strings.Join(reqs, "\n"))
		}
	})

	t.Run("the ServiceAccount writes only in shop", func(t *testing.T) {
		type access struct {
			ns, group, resource, sub, verb string
		}
		var allowed, denied []access
		for _, w := range []struct{ group, resource, sub string }{
			{"", "services", ""}, {"", "endpoints", ""}, {"discovery.k8s.io", "endpointslices", ""},
			{"multicluster.x-k8s.io", "serviceimports", ""}, {"multicluster.x-k8s.io", "serviceimports", "status"},
		} {
			verbs := []string{"create", "update", "delete"}
			if w.sub == "status" {
				verbs = []string{"update"}
			}
			for _, v := range verbs {
				allowed = append(allowed, access{appNamespace, w.group, w.resource, w.sub, v})
				for _, ns := range []string{"billing", metav1.NamespaceDefault, metav1.NamespaceSystem, daemonNamespace, ""} {
					denied = append(denied, access{ns, w.group, w.resource, w.sub, v})
				}
			}
			if w.sub == "" {
				// The hub caches read every namespace.
				allowed = append(allowed, access{"", w.group, w.resource, "", "list"}, access{"", w.group, w.resource, "", "watch"})
			}
		}
		for _, ns := range []string{appNamespace, daemonNamespace, metav1.NamespaceDefault} {
			allowed = append(allowed, access{ns, "", "events", "", "create"}, access{ns, "", "events", "", "patch"})
		}
		denied = append(denied, access{"billing", "", "events", "", "create"}, access{"", "", "events", "", "create"},
			access{"", "", "namespaces", "", "create"})
		check := func(a access, want bool) {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: chartUser.UserName, Groups: chartUser.Groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: a.ns, Group: a.group, Resource: a.resource, Subresource: a.sub, Verb: a.verb},
			}}
			got, err := e.hub.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.Allowed != want {
				t.Errorf("%s %s/%s/%s in namespace %q: allowed=%v, want %v", a.verb, a.group, a.resource, a.sub, a.ns, got.Status.Allowed, want)
			}
		}
		for _, a := range allowed {
			check(a, true)
		}
		for _, a := range denied {
			check(a, false)
		}

		// And the hub refuses the write itself.
		cfg := rest.CopyConfig(e.hub.Config)
		cfg.Impersonate = chartUser
		as := kubernetes.NewForConfigOrDie(cfg)
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "injected"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
		}
		if _, err := as.CoreV1().Services("billing").Create(ctx, svc, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("creating a Service in billing as the chart's ServiceAccount: %v, want Forbidden", err)
		}
		if _, err := as.CoreV1().Services(appNamespace).Create(ctx, svc, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("creating a Service in %s (dry run) as the chart's ServiceAccount: %v", appNamespace, err)
		}
	})
}

// TestChartMetricsSecureAnswers401And403And200 installs the chart with
// metrics.secure and a reader ServiceAccount, and runs the daemon as the
// chart's ServiceAccount with its metrics port open: /metrics over HTTPS
// answers 401 without a token, 403 to a token whose ServiceAccount may not
// get /metrics, 200 to the reader's; /healthz needs no token; plain HTTP
// gets nothing; and a real Prometheus scrapes it with the reader's token.
func TestChartMetricsSecureAnswers401And403And200(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	kubectl := filepath.Join(testenv.RequireAssets(t), "kubectl")
	forbidden := &forbiddenRecorder{}
	addr := freeLoopbackAddr(t)

	manifests := installChart(t, e, kubectl, "--set", "exportMode=annotation", "--set", "metrics.secure=true",
		"--set-json", `metrics.readers=[{"name":"scraper","namespace":"`+daemonNamespace+`"}]`)
	token := func(sa string) string {
		t.Helper()
		if _, err := e.hub.Client.CoreV1().ServiceAccounts(daemonNamespace).Create(ctx, &corev1.ServiceAccount{
			ObjectMeta: metav1.ObjectMeta{Name: sa},
		}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		tr, err := e.hub.Client.CoreV1().ServiceAccounts(daemonNamespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	scraper, nobody := token("scraper"), token("nobody")
	e.register(t, "east", "east", e.east.Kubeconfig)
	d := startChartDaemonWith(t, e, manifests, forbidden, func(o *app.Options) { o.MetricsBindAddress = addr })

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the daemon's certificate is self-signed
	}}
	get := func(url, token string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, "", err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	eventually(t, waitTimeout, func() error {
		code, _, err := get("https://"+addr+"/healthz", "")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/healthz without a token: %d, want 200", code)
		}
		return nil
	})
	d.waitSettled(t)

	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a token the hub does not know", "forged", http.StatusUnauthorized},
		{"a ServiceAccount without get /metrics", nobody, http.StatusForbidden},
		{"the reader ServiceAccount", scraper, http.StatusOK},
	} {
		code, body, err := get("https://"+addr+"/metrics", tc.token)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if code != tc.want {
			t.Errorf("GET /metrics with %s: %d %q, want %d", tc.name, code, body, tc.want)
		}
		if code == http.StatusOK && !strings.Contains(body, "endpoint_aggregator_") {
			t.Errorf("GET /metrics with %s: no endpoint_aggregator_ series", tc.name)
		}
	}
	if code, _, err := get("http://"+addr+"/metrics", scraper); err == nil && code == http.StatusOK {
		t.Errorf("plain HTTP /metrics answered 200: the token would travel in clear")
	}
	if n, reqs := forbidden.get(); n > 0 {
		t.Errorf("%d requests as the chart's ServiceAccount were Forbidden (tokenreviews, subjectaccessreviews?):\n%s", n, strings.Join(reqs, "\n"))
	}

	t.Run("Prometheus scrapes it with the reader's token", func(t *testing.T) {
		prom := testenv.StartPrometheus(t, []testenv.ScrapeTarget{
			{Job: "reader", Addr: addr, Secure: true, BearerToken: scraper},
			{Job: "nobody", Addr: addr, Secure: true, BearerToken: nobody},
		})
		eventually(t, waitTimeout, func() error {
			for job, want := range map[string]float64{"reader": 1, "nobody": 0} {
				s, err := prom.Query(ctx, fmt.Sprintf(`up{job=%q}`, job), time.Time{})
				if err != nil {
					return err
				}
				if len(s) != 1 || s[0].Value != want {
					return fmt.Errorf("up{job=%q} = %v, want %v", job, s, want)
				}
			}
			s, err := prom.Query(ctx, `endpoint_aggregator_leader{job="reader"}`, time.Time{})
			if err != nil {
				return err
			}
			if len(s) == 0 {
				return fmt.Errorf("no endpoint_aggregator_leader from the reader's scrape")
			}
			return nil
		})
	})
}
