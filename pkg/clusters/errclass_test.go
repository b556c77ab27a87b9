package clusters

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// fakeServer answers every request with one status, content type and body.
func fakeServer(t *testing.T, code int, contentType, body string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(code)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(s.Close)
	return s
}

// listServices lists Services through a real clientset, as an informer does.
func listServices(t *testing.T, cfg *rest.Config) error {
	t.Helper()
	cfg.Timeout = 2 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CoreV1().Services("").List(context.Background(), metav1.ListOptions{})
	return err
}

// probeOf probes a server as the health probe does.
func probeOf(t *testing.T, cfg *rest.Config) error {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{name: "east", clients: Clients{Kube: cs}}
	return c.probe(2 * time.Second)
}

func statusJSON(code int, reason metav1.StatusReason) string {
	return fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":%q,"code":%d,"message":"refused"}`, reason, code)
}

// TestClassifyNamesTheCauseOfRealMemberErrors classifies errors as the
// daemon meets them: from net.Dial, from client-go talking to servers that
// answer like a member that revoked the token, a web server, a hung
// process, and from apierrors constructors.
func TestClassifyNamesTheCauseOfRealMemberErrors(t *testing.T) {
	_, dialRefused := net.Dial("tcp", closedAddr(t))

	tlsServer := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(tlsServer.Close)
	// No CA data: the test server's certificate is signed by an unknown CA.
	resp, x509Err := http.Get(tlsServer.URL)
	if resp != nil {
		_ = resp.Body.Close()
	}
	plainServer := fakeServer(t, 200, "text/plain", "ok")

	// A listener that accepts and never answers, as a frozen API server.
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hung.Close() })
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()

	// A resolver with no server to ask fails as an unresolvable name does.
	resolver := &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no DNS server in this test")
	}}
	_, dnsErr := (&net.Dialer{Resolver: resolver}).Dial("tcp", "member.example:443")

	html := "<!DOCTYPE html><html><body>Welcome</body></html>"
	for _, tc := range []struct {
		name string
		err  error
		want ErrorClass
	}{
		{"nil", nil, ""},
		{"dial to a closed port", dialRefused, ClassConnectionRefused},
		{"client-go list to a closed port", listServices(t, &rest.Config{Host: "https://" + closedAddr(t)}), ClassConnectionRefused},
		{"probe of a closed port", probeOf(t, &rest.Config{Host: "https://" + closedAddr(t)}), ClassConnectionRefused},
		{"x509 unknown authority from net/http", x509Err, ClassTLS},
		{"x509 unknown authority from client-go", listServices(t, &rest.Config{Host: tlsServer.URL}), ClassTLS},
		{"https URL to a plain HTTP server", listServices(t, &rest.Config{Host: "https://" + plainServer.Listener.Addr().String()}), ClassTLS},
		{"hung server", listServices(t, &rest.Config{Host: "http://" + hung.Addr().String(), Timeout: 200 * time.Millisecond}), ClassTimeout},
		{"context deadline", fmt.Errorf("probing: %w", context.DeadlineExceeded), ClassTimeout},
		{"unresolvable name", dnsErr, ClassDNS},
		{"apierrors Unauthorized", apierrors.NewUnauthorized("token revoked"), ClassUnauthorized},
		{"401 from a member", listServices(t, &rest.Config{Host: fakeServer(t, 401, "application/json", statusJSON(401, metav1.StatusReasonUnauthorized)).URL}), ClassUnauthorized},
		{"401 probe", probeOf(t, &rest.Config{Host: fakeServer(t, 401, "application/json", statusJSON(401, metav1.StatusReasonUnauthorized)).URL}), ClassUnauthorized},
		{"apierrors Forbidden", apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "", errors.New("RBAC")), ClassForbidden},
		{"403 from a member", listServices(t, &rest.Config{Host: fakeServer(t, 403, "application/json", statusJSON(403, metav1.StatusReasonForbidden)).URL}), ClassForbidden},
		{"HTML page with 200", listServices(t, &rest.Config{Host: fakeServer(t, 200, "text/html", html).URL}), ClassNotAPIServer},
		{"HTML page with 404", listServices(t, &rest.Config{Host: fakeServer(t, 404, "text/html", html).URL}), ClassNotAPIServer},
		{"probe answered 404", probeOf(t, &rest.Config{Host: fakeServer(t, 404, "text/plain", "404 page not found").URL}), ClassNotAPIServer},
		{"a resource the member does not serve", apierrors.NewNotFound(schema.GroupResource{Group: "multicluster.x-k8s.io", Resource: "serviceexports"}, ""), ClassNotFound},
		{"readyz failing", probeOf(t, &rest.Config{Host: fakeServer(t, 500, "text/plain", "[-]etcd failed: reason withheld\nreadyz check failed").URL}), ClassUnhealthy},
		{"503 from a member", apierrors.NewServiceUnavailable("starting"), ClassUnhealthy},
		{"504 from a member", apierrors.NewTimeoutError("slow", 1), ClassTimeout},
		{"cluster manager says unhealthy", fmt.Errorf("member %q: %w: ControlPlaneHealthy=False", "east", errReported), ClassUnhealthy},
		{"anything else", errors.New("boom"), ClassOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want != "" && tc.err == nil {
				t.Fatal("the case produced no error")
			}
			if got := Classify(tc.err); got != tc.want {
				t.Errorf("Classify(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}

func TestErrorClassReasonAndLabel(t *testing.T) {
	for _, tc := range []struct {
		class         ErrorClass
		reason, label string
	}{
		{ClassUnauthorized, "MemberUnauthorized", "unauthorized"},
		{ClassTLS, "MemberTLSError", "tls_error"},
		{ClassConnectionRefused, "MemberConnectionRefused", "connection_refused"},
		{ClassDNS, "MemberDNSError", "dns_error"},
		{ClassNotAPIServer, "MemberNotAPIServer", "not_api_server"},
		{ClassOther, ReasonUnreachable, "other"},
	} {
		if got := tc.class.Reason(); got != tc.reason {
			t.Errorf("%s.Reason() = %q, want %q", tc.class, got, tc.reason)
		}
		if got := tc.class.Label(); got != tc.label {
			t.Errorf("%s.Label() = %q, want %q", tc.class, got, tc.label)
		}
		if c, ok := ClassOfReason(tc.reason); !ok || c != tc.class {
			t.Errorf("ClassOfReason(%q) = %q, %v", tc.reason, c, ok)
		}
	}
	if snakeCase("InvalidKubeconfig") != "invalid_kubeconfig" {
		t.Errorf("snakeCase(InvalidKubeconfig) = %q", snakeCase("InvalidKubeconfig"))
	}
}
