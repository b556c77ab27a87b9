package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// memberLabel marks a member EndpointSlice with the simulated member it
// belongs to; the proxy selects on it.
const memberLabel = "bench.endpoint-aggregator.io/member"

// allView is the proxy path that sees every simulated member (the floor's
// watch).
const allView = "all"

// memberProxy serves the member apiserver to the simulated members on
// https://127.0.0.1:PORT/<member>/..., each with its own view: EndpointSlice
// lists and watches only return that member's slices. Everything else
// passes through untouched (bytes, content type, streaming watches).
//
// Each view listens on its own port, as each member of a fleet is its own
// API server: a client keeps a connection per host, so the members' requests
// do not queue on one shared HTTP/2 connection, which no fleet has (client-go
// shares one transport among configs with the same CA and token).
type memberProxy struct {
	srv      *http.Server
	addrs    map[string]string // view -> host:port
	caPEM    []byte
	token    string
	views    map[string]bool
	requests atomic.Int64
	// wrap, when set, passes each member view's request on to next (the
	// soak's unreachable members and watch count).
	wrap atomic.Pointer[proxyWrap]
}

type proxyWrap func(view string, w http.ResponseWriter, r *http.Request, next http.Handler)

// startMemberProxy listens on a free loopback port in front of the member
// apiserver at cfg, with the member's admin credentials.
func startMemberProxy(cfg *rest.Config, views []string) (*memberProxy, error) {
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	// Pass Accept-Encoding through as the client sent it: left to itself the
	// upstream transport would ask for gzip and decompress here, for a client
	// that asked for a plain response.
	plain := rest.CopyConfig(cfg)
	plain.DisableCompression = true
	upstream, err := rest.TransportFor(plain)
	if err != nil {
		return nil, err
	}
	cert, caPEM, err := selfSignedCert()
	if err != nil {
		return nil, err
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	p := &memberProxy{caPEM: caPEM, token: hex.EncodeToString(tok), views: map[string]bool{allView: true}}
	for _, v := range views {
		p.views[v] = true
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Del("Authorization") // the upstream identity is the client certificate
		},
		Transport:     upstream,
		FlushInterval: -1, // watches stream
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	p.srv = &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.serve(rp, w, r) }),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 30 * time.Second,
		// One client connection may carry hundreds of watches.
		HTTP2:    &http.HTTP2Config{MaxConcurrentStreams: 4096},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	p.addrs = make(map[string]string, len(p.views))
	for v := range p.views {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			p.close()
			return nil, err
		}
		p.addrs[v] = ln.Addr().String()
		go func() { _ = p.srv.ServeTLS(ln, "", "") }()
	}
	return p, nil
}

func (p *memberProxy) serve(rp *httputil.ReverseProxy, w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	if r.Header.Get("Authorization") != "Bearer "+p.token {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	view, rest, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if !ok || !p.views[view] {
		http.Error(w, "unknown member view", http.StatusNotFound)
		return
	}
	r.URL.Path, r.URL.RawPath = "/"+rest, ""
	if view != allView && isSliceCollection(r.URL.Path) {
		q := r.URL.Query()
		sel := memberLabel + "=" + view
		if cur := q.Get("labelSelector"); cur != "" {
			sel = cur + "," + sel
		}
		q.Set("labelSelector", sel)
		r.URL.RawQuery = q.Encode()
	}
	if wrap := p.wrap.Load(); wrap != nil && view != allView {
		(*wrap)(view, w, r, rp)
		return
	}
	rp.ServeHTTP(w, r)
}

// isSliceCollection reports whether path lists or watches EndpointSlices
// (all namespaces or one), rather than naming one.
func isSliceCollection(path string) bool {
	const group = "/apis/discovery.k8s.io/v1/"
	rest, ok := strings.CutPrefix(path, group)
	if !ok {
		return false
	}
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	switch {
	case len(parts) == 1:
		return parts[0] == "endpointslices"
	case len(parts) == 3:
		return parts[0] == "namespaces" && parts[2] == "endpointslices"
	}
	return false
}

// kubeconfig returns a self-contained kubeconfig (inline CA, token) for one
// view of the member.
func (p *memberProxy) kubeconfig(view string) ([]byte, error) {
	if !p.views[view] {
		return nil, fmt.Errorf("unknown view %q", view)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters[view] = &clientcmdapi.Cluster{Server: "https://" + p.addrs[view] + "/" + view, CertificateAuthorityData: p.caPEM}
	kc.AuthInfos[view] = &clientcmdapi.AuthInfo{Token: p.token}
	kc.Contexts[view] = &clientcmdapi.Context{Cluster: view, AuthInfo: view}
	kc.CurrentContext = view
	return clientcmd.Write(*kc)
}

// restConfig returns a client config for one view.
func (p *memberProxy) restConfig(view string) (*rest.Config, error) {
	kc, err := p.kubeconfig(view)
	if err != nil {
		return nil, err
	}
	return clientcmd.RESTConfigFromKubeConfig(kc)
}

func (p *memberProxy) close() {
	if p != nil && p.srv != nil {
		_ = p.srv.Close()
	}
}

// selfSignedCert returns a serving certificate for 127.0.0.1 that is its own
// CA, and its PEM.
func selfSignedCert() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "endpoint-aggregator bench member proxy"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(48 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, nil, errors.Join(errors.New("self-signed certificate"), err)
	}
	return cert, certPEM, nil
}
