package app

import (
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	certutil "k8s.io/client-go/util/cert"
)

// fakeReviews answers TokenReviews for token "scraper-token" (user scraper,
// allowed get /metrics) and "nobody-token" (user nobody, allowed nothing),
// and counts the reviews.
func fakeReviews(t *testing.T) (*fake.Clientset, *atomic.Int32, *atomic.Int32) {
	t.Helper()
	hub := fake.NewClientset()
	var tokens, sars atomic.Int32
	hub.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tokens.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		switch tr.Spec.Token {
		case "scraper-token":
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "scraper", Groups: []string{"system:authenticated"}}}
		case "nobody-token":
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "nobody"}}
		default:
			tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, tr, nil
	})
	hub.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sars.Add(1)
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		na := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "scraper" && na != nil && na.Path == "/metrics" && na.Verb == "get" && sar.Spec.ResourceAttributes == nil
		return true, sar, nil
	})
	return hub, &tokens, &sars
}

func TestMetricsGuardAsksTheHubAndRemembersItsAnswers(t *testing.T) {
	hub, tokens, sars := fakeReviews(t)
	o := NewOptions()
	o.MetricsSecure = true
	srv := httptest.NewServer(o.newMetricsGuard(hub)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("metrics"))
	})))
	defer srv.Close()
	get := func(path, auth string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		path, auth string
		want       int
	}{
		{"/metrics", "", http.StatusUnauthorized},
		{"/metrics", "Basic c2NyYXBlcjpwdw==", http.StatusUnauthorized},
		{"/metrics", "Bearer ", http.StatusUnauthorized},
		{"/metrics", "Bearer forged", http.StatusUnauthorized},
		{"/metrics", "Bearer nobody-token", http.StatusForbidden},
		{"/metrics", "Bearer scraper-token", http.StatusOK},
		{"/metrics", "bearer scraper-token", http.StatusOK},
		{"/debug/pprof/", "Bearer scraper-token", http.StatusForbidden},
	} {
		if got := get(tc.path, tc.auth); got != tc.want {
			t.Errorf("GET %s with %q: %d, want %d", tc.path, tc.auth, got, tc.want)
		}
	}
	// forged, nobody, scraper: three tokens reviewed; nobody and scraper on
	// /metrics, scraper on pprof: three access reviews. Asking again is
	// answered from memory.
	if tokens.Load() != 3 || sars.Load() != 3 {
		t.Errorf("%d TokenReviews and %d SubjectAccessReviews, want 3 and 3", tokens.Load(), sars.Load())
	}
	for range 5 {
		get("/metrics", "Bearer scraper-token")
		get("/metrics", "Bearer nobody-token")
		get("/metrics", "Bearer forged")
	}
	if tokens.Load() != 3 || sars.Load() != 3 {
		t.Errorf("after repeats: %d TokenReviews and %d SubjectAccessReviews, want still 3 and 3", tokens.Load(), sars.Load())
	}
}

func TestMetricsGuardIsOffWithoutMetricsSecure(t *testing.T) {
	hub, tokens, _ := fakeReviews(t)
	rec := httptest.NewRecorder()
	NewOptions().newMetricsGuard(hub)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})).
		ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK || tokens.Load() != 0 {
		t.Errorf("status %d after %d TokenReviews, want 200 without any", rec.Code, tokens.Load())
	}
}

// TestMetricsListenerServesTheCertificateOfItsDirectoryAndItsUpdates: the
// certificate of --metrics-cert-dir is served, and a new one written there
// is served from the next handshake.
func TestMetricsListenerServesTheCertificateOfItsDirectoryAndItsUpdates(t *testing.T) {
	dir := t.TempDir()
	write := func(host string) {
		t.Helper()
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, metricsCertFile), certPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, metricsKeyFile), keyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("first.example")
	o := NewOptions()
	o.MetricsSecure, o.MetricsCertDir = true, dir
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl, err := o.metricsListener(ln)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), ReadHeaderTimeout: time.Second,
		ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(tl) }()
	defer func() { _ = srv.Close() }()
	served := func() string {
		t.Helper()
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test reads the served certificate
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		return strings.SplitN(c.ConnectionState().PeerCertificates[0].Subject.CommonName, "@", 2)[0]
	}
	if got := served(); got != "first.example" {
		t.Fatalf("served %q, want first.example", got)
	}
	time.Sleep(10 * time.Millisecond) // a distinct modification time
	write("second.example")
	if got := served(); got != "second.example" {
		t.Errorf("after the update served %q, want second.example", got)
	}

	o.MetricsCertDir = t.TempDir()
	if _, err := o.metricsListener(ln); err == nil {
		t.Error("an empty --metrics-cert-dir was accepted")
	}
}
