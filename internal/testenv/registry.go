package testenv

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Registry is an OCI registry on this machine: go-containerregistry's
// in-memory registry, run by `hack/image registry` as a child process (so
// go-containerregistry stays out of this module), serving HTTPS only with a
// certificate of a CA made for it. It exits with the test process, even a
// killed one.
type Registry struct {
	// Host is 127.0.0.1:PORT: the registry's name in image references and
	// oci:// chart references, which this machine's clients (helm, the
	// release's push) reach.
	Host string
	// CAFile is the PEM CA its certificate is checked against.
	CAFile string
	// Dir holds its certificates and log; its command line names it.
	Dir string

	// nodeAddrs maps a node's host-side IP to the registry's address
	// there (IP:PORT): where that node's containerd reaches it.
	nodeAddrs map[string]string
	proc      *process
}

// StartRegistry starts a registry on 127.0.0.1 and, for each of nodeIPs
// (the HostIP of nodes that pull from it, see Node.TrustRegistry), on that
// address too. t.Cleanup stops it; a missing Go toolchain fails the test.
func StartRegistry(t testing.TB, nodeIPs ...string) *Registry {
	t.Helper()
	r, err := startRegistry(t.TempDir(), nodeIPs)
	if err != nil {
		t.Fatalf("testenv: registry: %v", err)
	}
	t.Cleanup(func() {
		r.proc.stop()
		if t.Failed() {
			t.Logf("testenv: registry log (tail):\n%s", tail(r.proc.logPath, 40))
		}
	})
	return r
}

func startRegistry(dir string, nodeIPs []string) (*Registry, error) {
	bin, err := hackImage()
	if err != nil {
		return nil, err
	}
	ips := []net.IP{net.IPv4(127, 0, 0, 1)}
	args := []string{"registry", "-listen", "127.0.0.1:0", "-parent", strconv.Itoa(os.Getpid()),
		"-cert", filepath.Join(dir, "tls.crt"), "-key", filepath.Join(dir, "tls.key")}
	for _, s := range nodeIPs {
		ip := net.ParseIP(s)
		if ip == nil {
			return nil, fmt.Errorf("node IP %q", s)
		}
		ips = append(ips, ip)
		args = append(args, "-listen", net.JoinHostPort(s, "0"))
	}
	if err := writeRegistryCerts(dir, ips); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	proc, err := startProcess(cmd, filepath.Join(dir, "registry.log"))
	if err != nil {
		return nil, err
	}
	// It prints https://ADDRESS for each -listen, in order, once it serves.
	var urls []string
	deadline := time.Now().Add(30 * time.Second)
	for len(urls) < len(ips) {
		if proc.exited() || time.Now().After(deadline) {
			proc.stop()
			return nil, fmt.Errorf("did not start: %s", tail(proc.logPath, 20))
		}
		time.Sleep(50 * time.Millisecond)
		b, _ := os.ReadFile(proc.logPath)
		urls = urls[:0]
		for _, l := range strings.Split(string(b), "\n") {
			if u, ok := strings.CutPrefix(l, "https://"); ok {
				urls = append(urls, u)
			}
		}
	}
	r := &Registry{Host: urls[0], CAFile: filepath.Join(dir, "ca.crt"), Dir: dir, nodeAddrs: map[string]string{}, proc: proc}
	for i, s := range nodeIPs {
		r.nodeAddrs[s] = urls[i+1]
	}
	return r, nil
}

// writeRegistryCerts writes a CA (ca.crt) and a serving certificate of ips
// signed by it (tls.crt, tls.key) into dir.
func writeRegistryCerts(dir string, ips []net.IP) error {
	caPEM, certPEM, keyPEM, err := issueServingCert("registry", nil, ips)
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{"ca.crt": caPEM, "tls.crt": certPEM, "tls.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// Digest asks the registry, as a puller resolving a tag does, for the
// digest of repository:tag (repository without the host), and returns it
// with the media type of what it names.
func (r *Registry) Digest(repository, tag string) (digest, mediaType string, err error) {
	client, err := r.client()
	if err != nil {
		return "", "", err
	}
	req, err := http.NewRequest(http.MethodHead, "https://"+r.Host+"/v2/"+repository+"/manifests/"+tag, nil)
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Accept", strings.Join([]string{
		"application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
		"application/vnd.docker.distribution.manifest.list.v2+json", "application/vnd.docker.distribution.manifest.v2+json",
	}, ", "))
	resp, err := client.Do(req)
	if err != nil {
		return "", "", err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("HEAD %s: %s", req.URL, resp.Status)
	}
	return resp.Header.Get("Docker-Content-Digest"), resp.Header.Get("Content-Type"), nil
}

// client trusts the registry's CA only.
func (r *Registry) client() (*http.Client, error) {
	ca, err := os.ReadFile(r.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("registry CA: no certificate")
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}, nil
}

var (
	hackImageMu   sync.Mutex
	hackImagePath string
)

// hackImage builds hack/image (its own module) into the test images'
// directory, once per test process (again after RemoveTestImages).
func hackImage() (string, error) {
	hackImageMu.Lock()
	defer hackImageMu.Unlock()
	if hackImagePath != "" {
		if _, err := os.Stat(hackImagePath); err == nil {
			return hackImagePath, nil
		}
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dir, err := imagesDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "hack-image")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(root, "hack", "image")
	build.Env = append(os.Environ(), "GOOS=", "GOARCH=") // for this machine
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building hack/image: %v: %s", err, out)
	}
	hackImagePath = bin
	return bin, nil
}

// TrustRegistry lets the node's containerd pull the images named r.Host/...
// (what a chart installed from r defaults to). containerd runs in the
// node's network namespace, where 127.0.0.1 is not this machine's, so its
// hosts.toml (read at each pull: no restart) sends those pulls to r's
// address on the node's link, over TLS checked against r's CA. r must have
// been started with the node's HostIP.
func (n *Node) TrustRegistry(r *Registry) error {
	addr, ok := r.nodeAddrs[n.HostIP]
	if !ok {
		return fmt.Errorf("testenv: the registry does not serve on %s, the host side of node %s", n.HostIP, n.Name)
	}
	dir := filepath.Join(n.dir, "certs.d", r.Host)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, err := os.ReadFile(r.CAFile)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hostsTOML(r.Host, addr, filepath.Join(dir, "ca.crt"))), 0o600)
}

// hostsTOML is containerd's hosts.toml for the registry named server,
// reached at addr (IP:PORT, an IPv6 literal in brackets) with the CA in ca.
// The host is a quoted key inside [host], not a table header of its own
// ([host."https://ADDR"]): containerd 1.6 parses hosts.toml with go-toml
// v1, which refuses a ']' in a table header's key ("table key cannot
// contain ']'"), and so the whole file for an IPv6 address; the pull then
// goes to server itself, which is not reachable from the node.
func hostsTOML(server, addr, ca string) string {
	return fmt.Sprintf(`server = "https://%s"

[host]
  %q = { capabilities = ["pull", "resolve"], ca = %q }
`, server, "https://"+addr, ca)
}
