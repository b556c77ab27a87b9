package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	stdsync "sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
)

// liarRewrite changes one object a member returns, in place, and reports
// whether it changed anything. kind is "EndpointSlice" or "ServiceExport";
// obj is the object as decoded JSON (numbers as json.Number).
type liarRewrite func(kind string, obj map[string]any) bool

// liarKinds are the kinds the proxy hands to its rewrite, by resource.
var liarKinds = map[string]string{
	"endpointslices": "EndpointSlice",
	"serviceexports": "ServiceExport",
	"services":       "Service",
}

// liarProxy is an HTTPS reverse proxy on a loopback port in front of a
// member's API server, as the member's own admin: a compromised member.
// It forwards every request and rewrites EndpointSlices and ServiceExports
// in responses (single objects, lists, watch events) with its rewrite, so
// the member says what its API server would never accept.
type liarProxy struct {
	srv        *http.Server
	url        string
	caPEM      []byte
	kubeconfig []byte // the member's admin kubeconfig, served by the proxy

	rewrite liarRewrite
	mu      stdsync.Mutex
	counts  map[string]int // rewritten objects by kind
}

// startLiarProxy starts a proxy in front of c that rewrites with rw, and
// closes it when the test ends.
func startLiarProxy(t *testing.T, c *testenv.Cluster, rw liarRewrite) *liarProxy {
	t.Helper()
	target, err := url.Parse(c.Host())
	if err != nil {
		t.Fatal(err)
	}
	// Uncompressed upstream responses, so they can be decoded here.
	up := rest.CopyConfig(c.Config)
	up.DisableCompression = true
	transport, err := rest.TransportFor(up)
	if err != nil {
		t.Fatal(err)
	}
	cert, caPEM, err := liarCert()
	if err != nil {
		t.Fatal(err)
	}
	p := &liarProxy{caPEM: caPEM, rewrite: rw, counts: map[string]int{}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			// JSON, not protobuf or CBOR, and no gzip: the proxy must read it.
			pr.Out.Header.Set("Accept", "application/json")
			pr.Out.Header.Del("Accept-Encoding")
		},
		Transport:      transport,
		ModifyResponse: p.modify,
		FlushInterval:  -1, // flush every write: watch events go out one by one
		ErrorLog:       log.New(io.Discard, "", 0),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.url = "https://" + ln.Addr().String()
	p.srv = &http.Server{
		Handler:           rp,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go func() { _ = p.srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = p.srv.Close() })

	// The member's kubeconfig (admin credentials, which the proxy ignores:
	// it talks upstream as admin itself) with the proxy as server and CA.
	kc, err := clientcmd.Load(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range kc.Clusters {
		cl.Server, cl.CertificateAuthorityData = p.url, caPEM
	}
	if p.kubeconfig, err = clientcmd.Write(*kc); err != nil {
		t.Fatal(err)
	}
	return p
}

// restConfig is a client config that reaches the member through the proxy.
func (p *liarProxy) restConfig(t *testing.T) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(p.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// rewrites returns how many objects of kind the proxy has changed.
func (p *liarProxy) rewrites(kind string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[kind]
}

// modify rewrites a successful JSON response of a rewritten resource: a
// watch as a stream, anything else whole.
func (p *liarProxy) modify(resp *http.Response) error {
	kind := liarKinds[resourceOf(resp.Request.URL.Path)]
	if kind == "" || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return nil
	}
	if w := resp.Request.URL.Query().Get("watch"); w == "true" || w == "1" {
		resp.Body = &watchRewriter{upstream: resp.Body, dec: newNumberDecoder(resp.Body), p: p, kind: kind}
		return nil
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := newNumberDecoder(bytes.NewReader(body)).Decode(&obj); err != nil {
		return err
	}
	if obj["kind"] == kind+"List" {
		items, _ := obj["items"].([]any)
		for _, it := range items {
			if m, ok := it.(map[string]any); ok {
				p.apply(kind, m)
			}
		}
	} else {
		p.apply(kind, obj)
	}
	if body, err = json.Marshal(obj); err != nil {
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return nil
}

// apply runs the rewrite on one object and counts it if it changed.
func (p *liarProxy) apply(kind string, obj map[string]any) {
	if p.rewrite(kind, obj) {
		p.mu.Lock()
		p.counts[kind]++
		p.mu.Unlock()
	}
}

// watchRewriter is a watch response body: it reads one newline-delimited
// event {"type":..,"object":..} at a time from upstream, rewrites its
// object (not bookmarks or errors), and hands it on whole, so that each
// event is written, and flushed, as soon as it arrives.
type watchRewriter struct {
	upstream io.Closer
	dec      *json.Decoder
	p        *liarProxy
	kind     string
	buf      []byte
}

func (w *watchRewriter) Read(b []byte) (int, error) {
	if len(w.buf) == 0 {
		var ev struct {
			Type   string         `json:"type"`
			Object map[string]any `json:"object"`
		}
		if err := w.dec.Decode(&ev); err != nil {
			return 0, err
		}
		if ev.Type == "ADDED" || ev.Type == "MODIFIED" || ev.Type == "DELETED" {
			w.p.apply(w.kind, ev.Object)
		}
		out, err := json.Marshal(ev)
		if err != nil {
			return 0, err
		}
		w.buf = append(out, '\n')
	}
	n := copy(b, w.buf)
	w.buf = w.buf[n:]
	return n, nil
}

func (w *watchRewriter) Close() error { return w.upstream.Close() }

func newNumberDecoder(r io.Reader) *json.Decoder {
	d := json.NewDecoder(r)
	d.UseNumber()
	return d
}

// resourceOf returns the resource a request path names: "endpointslices"
// for /apis/discovery.k8s.io/v1/namespaces/ns/endpointslices/name, and for
// its list and watch forms; "" for paths outside /api and /apis.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	default:
		return ""
	}
	if len(parts) > 0 && parts[0] == "watch" {
		parts = parts[1:]
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	if len(parts) == 0 {
		return ""
	}
	return parts[0]
}

// liarCert returns a serving certificate for 127.0.0.1 that is its own CA,
// and its PEM.
func liarCert() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "e2e lying member proxy"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		return tls.Certificate{}, nil, errors.Join(errors.New("liar proxy certificate"), err)
	}
	return cert, certPEM, nil
}
