package app

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	stdsync "sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
	"k8s.io/utils/lru"
)

// The file names --metrics-cert-dir holds, as in a kubernetes.io/tls Secret.
const (
	metricsCertFile = "tls.crt"
	metricsKeyFile  = "tls.key"
)

// How long the hub's answers are reused, as controller-runtime's metrics
// filters (k8s.io/apiserver's delegating authenticator and authorizer) do:
// a scraper every few seconds costs a review now and then, not per scrape.
const (
	tokenTTL       = time.Minute
	tokenFailedTTL = 10 * time.Second
	allowTTL       = 5 * time.Minute
	denyTTL        = 30 * time.Second
	reviewTimeout  = 10 * time.Second
	reviewCacheMax = 1024
)

// metricsGuard wraps the handlers that expose internals (/metrics, pprof).
type metricsGuard func(http.Handler) http.Handler

// newMetricsGuard returns the identity without --metrics-secure. With it,
// a request needs a bearer token that the hub authenticates (TokenReview)
// and authorizes for its method on its path, a non-resource URL
// (SubjectAccessReview): 401 without a valid token, 403 without the
// permission, as controller-runtime's WithAuthenticationAndAuthorization.
// Written against client-go rather than imported: that filter pulls in
// k8s.io/apiserver, which doubles the binary.
func (o *Options) newMetricsGuard(hub kubernetes.Interface) metricsGuard {
	if !o.MetricsSecure {
		return func(h http.Handler) http.Handler { return h }
	}
	a := &reviewer{hub: hub, tokens: lru.New(reviewCacheMax), decisions: lru.New(reviewCacheMax), now: time.Now}
	return a.guard
}

// reviewer asks the hub who a token is and what it may do, and remembers
// the answers for a while.
type reviewer struct {
	hub       kubernetes.Interface
	tokens    *lru.Cache // sha256 of the token -> cached[*authenticationv1.UserInfo]
	decisions *lru.Cache // the review's attributes as JSON -> cached[bool]
	now       func() time.Time
}

type cached[T any] struct {
	value   T
	expires time.Time
}

func (a *reviewer) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r)
		if !ok {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		user, err := a.authenticate(r.Context(), token)
		if err != nil {
			klog.ErrorS(err, "Metrics authentication failed")
			http.Error(w, "Authentication failed", http.StatusInternalServerError)
			return
		}
		if user == nil {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		allowed, err := a.authorize(r.Context(), user, strings.ToLower(r.Method), r.URL.Path)
		if err != nil {
			klog.ErrorS(err, "Metrics authorization failed", "user", user.Username)
			http.Error(w, "Authorization for user "+user.Username+" failed", http.StatusInternalServerError)
			return
		}
		if !allowed {
			klog.V(4).InfoS("Metrics request denied", "user", user.Username, "path", r.URL.Path)
			http.Error(w, "Authorization denied for user "+user.Username, http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "bearer") && token != ""
}

// authenticate returns the token's user, nil for a token the hub does not
// accept.
func (a *reviewer) authenticate(ctx context.Context, token string) (*authenticationv1.UserInfo, error) {
	key := sha256.Sum256([]byte(token))
	if c, ok := a.tokens.Get(key); ok && a.now().Before(c.(cached[*authenticationv1.UserInfo]).expires) {
		return c.(cached[*authenticationv1.UserInfo]).value, nil
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	tr, err := a.hub.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("TokenReview: %w", err)
	}
	var user *authenticationv1.UserInfo
	ttl := tokenFailedTTL
	if tr.Status.Authenticated {
		user, ttl = &tr.Status.User, tokenTTL
	}
	a.tokens.Add(key, cached[*authenticationv1.UserInfo]{user, a.now().Add(ttl)})
	return user, nil
}

// authorize asks whether user may use verb on the non-resource URL path.
func (a *reviewer) authorize(ctx context.Context, user *authenticationv1.UserInfo, verb, path string) (bool, error) {
	spec := authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}
	if len(user.Extra) > 0 {
		spec.Extra = map[string]authorizationv1.ExtraValue{}
		for k, v := range user.Extra {
			spec.Extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	keyJSON, err := json.Marshal(spec)
	if err != nil {
		return false, err
	}
	key := string(keyJSON)
	if c, ok := a.decisions.Get(key); ok && a.now().Before(c.(cached[bool]).expires) {
		return c.(cached[bool]).value, nil
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	sar, err := a.hub.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("SubjectAccessReview: %w", err)
	}
	ttl := denyTTL
	if sar.Status.Allowed {
		ttl = allowTTL
	}
	a.decisions.Add(key, cached[bool]{sar.Status.Allowed, a.now().Add(ttl)})
	return sar.Status.Allowed, nil
}

// metricsListener serves TLS on ln with --metrics-secure: bearer tokens must
// not travel in clear. The certificate comes from --metrics-cert-dir,
// reread when its files change, or is self-signed at start.
func (o *Options) metricsListener(ln net.Listener) (net.Listener, error) {
	if !o.MetricsSecure {
		return ln, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.MetricsCertDir != "" {
		f := &certFiles{cert: filepath.Join(o.MetricsCertDir, metricsCertFile), key: filepath.Join(o.MetricsCertDir, metricsKeyFile)}
		if _, err := f.get(nil); err != nil {
			return nil, fmt.Errorf("--metrics-cert-dir: %w", err)
		}
		cfg.GetCertificate = f.get
	} else {
		host, _ := os.Hostname()
		if host == "" {
			host = "localhost"
		}
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, []string{"localhost"})
		if err != nil {
			return nil, fmt.Errorf("self-signed metrics certificate: %w", err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("self-signed metrics certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return tls.NewListener(ln, cfg), nil
}

// certFiles serves a certificate and key from files, reread when either
// file's size or modification time changes (a mounted Secret's update).
type certFiles struct {
	cert, key string

	mu      stdsync.Mutex
	current *tls.Certificate
	stamp   string
}

func (f *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	stamp, err := fileStamp(f.cert, f.key)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && stamp == f.stamp && f.current != nil {
		return f.current, nil
	}
	c, lerr := tls.LoadX509KeyPair(f.cert, f.key)
	if err == nil {
		err = lerr
	}
	if err != nil {
		if f.current != nil {
			// Half-written during an update, say: keep serving the last.
			klog.V(2).InfoS("Keeping the metrics certificate", "err", err)
			return f.current, nil
		}
		return nil, err
	}
	f.current, f.stamp = &c, stamp
	return f.current, nil
}

func fileStamp(paths ...string) (string, error) {
	var b strings.Builder
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%d/%d;", st.Size(), st.ModTime().UnixNano())
	}
	return b.String(), nil
}
