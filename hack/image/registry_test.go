package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// selfSignedCert is a CA certificate that is also the serving certificate
// of 127.0.0.1, and its PEM.
func selfSignedCert(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "registry-test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// `image registry` serves one in-memory store on every address it is
// given, over HTTPS only, prints each address once it listens, and stops
// when told.
func TestRegistryServesTLSOnEveryAddress(t *testing.T) {
	cert, caPEM := selfSignedCert(t)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	tr, err := caTransport(ca)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- serveRegistry(ctx, []string{"127.0.0.1:0", "127.0.0.1:0"}, cert, pw, log.New(io.Discard, "", 0))
		_ = pw.Close()
	}()
	var hosts []string
	sc := bufio.NewScanner(pr)
	for len(hosts) < 2 && sc.Scan() {
		host, ok := strings.CutPrefix(sc.Text(), "https://")
		if !ok {
			t.Fatalf("the registry printed %q", sc.Text())
		}
		hosts = append(hosts, host)
	}
	if len(hosts) != 2 || hosts[0] == hosts[1] {
		t.Fatalf("the registry serves on %q, want two addresses", hosts)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()

	img, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	first, err := name.ParseReference(hosts[0] + "/test:1")
	if err != nil {
		t.Fatal(err)
	}
	second, err := name.ParseReference(hosts[1] + "/test:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(first, img, remote.WithTransport(tr)); err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Head(second, remote.WithTransport(tr))
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != want {
		t.Errorf("the second address serves %s, the first was given %s", desc.Digest, want)
	}

	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + hosts[0] + "/v2/")
	if err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("the registry answers plain HTTP")
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serveRegistry: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the registry did not stop")
	}
}
