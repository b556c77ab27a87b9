package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// CoreDNSVersion is the CoreDNS that `make coredns` builds from hack/coredns.
// It must match COREDNS_VERSION in the Makefile and hack/coredns/go.mod (a
// test checks that).
const CoreDNSVersion = "v1.15.0"

// CoreDNSEnv names the environment variable that points at the coredns
// binary (`make test` sets it).
const CoreDNSEnv = "ENDPOINT_AGGREGATOR_COREDNS"

// ClusterSetZone is the zone StartCoreDNS serves from the hub's
// ServiceImports and MCS EndpointSlices.
const ClusterSetZone = "clusterset.local"

// DefaultCoreDNSPath returns where the Makefile builds CoreDNS when
// CACHE_DIR is not overridden:
// ${XDG_CACHE_HOME:-$HOME/.cache}/endpoint-aggregator/bin/coredns-<ver>/coredns.
func DefaultCoreDNSPath() (string, error) {
	bin, err := cacheBinDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(bin, "coredns-"+CoreDNSVersion, "coredns"), nil
}

// CoreDNSPath returns the coredns binary: $ENDPOINT_AGGREGATOR_COREDNS if
// set, else [DefaultCoreDNSPath]. It checks that the file is executable.
func CoreDNSPath() (string, error) {
	abs, err := envOrDefaultPath(CoreDNSEnv, DefaultCoreDNSPath)
	if err != nil {
		return "", err
	}
	if err := checkExecutable(abs); err != nil {
		return "", fmt.Errorf("%w (run `make coredns` to build CoreDNS %s, or set %s to a coredns binary)", err, CoreDNSVersion, CoreDNSEnv)
	}
	return abs, nil
}

// CoreDNSCorefile is the Corefile StartCoreDNS runs: one server on
// 127.0.0.1:dnsPort whose kubernetes plugin reads the cluster of kubeconfig
// (context kubeContext) and answers cluster.local as usual and
// clusterset.local the MCS way (ServiceImports and EndpointSlices labelled
// multicluster.kubernetes.io/service-name), with a zero TTL so nothing
// downstream caches an answer. The ready plugin reports on readyPort once the
// kubernetes caches have synced.
func CoreDNSCorefile(kubeconfig, kubeContext string, dnsPort, readyPort int) string {
	return corefileAt("127.0.0.1", ClusterSetZone, kubeconfig, kubeContext, dnsPort, readyPort)
}

// corefileAt is the Corefile of a server on bindIP that serves the MCS
// names in zone (the multicluster zone) instead of clusterset.local.
func corefileAt(bindIP, zone, kubeconfig, kubeContext string, dnsPort, readyPort int) string {
	return fmt.Sprintf(`.:%d {
    bind %s
    ready 127.0.0.1:%d
    errors
    log
    kubernetes cluster.local %s {
        kubeconfig %s %s
        multicluster %s
        ttl 0
        startup_timeout 30s
    }
}
`, dnsPort, bindIP, readyPort, zone, kubeconfig, kubeContext, zone)
}

// StartCoreDNS runs CoreDNS (see [CoreDNSPath]) against the cluster of the
// kubeconfig at hubKubeconfigPath, serving [CoreDNSCorefile] on a free UDP
// and TCP port of 127.0.0.1, and returns that address ("127.0.0.1:PORT")
// once CoreDNS is ready and answers queries over both UDP and TCP. The
// Corefile and CoreDNS's log are in a t.TempDir(); the log is printed if the
// test fails. t.Cleanup stops the process. A missing binary fails the test:
// it never skips.
func StartCoreDNS(t testing.TB, hubKubeconfigPath string) (addr string) {
	t.Helper()
	return startCoreDNS(t, hubKubeconfigPath, "127.0.0.1", 0, ClusterSetZone)
}

// StartCoreDNSAt is StartCoreDNS serving on ip port 53: the cluster DNS of a
// node whose pods reach ip (NodeOptions.ClusterDNS = ip).
func StartCoreDNSAt(t testing.TB, hubKubeconfigPath, ip string) (addr string) {
	t.Helper()
	return startCoreDNS(t, hubKubeconfigPath, ip, 53, ClusterSetZone)
}

// StartCoreDNSZoneAt is StartCoreDNS serving on a free port of ip, with
// zone as its multicluster zone in place of [ClusterSetZone]: the MCS
// names are <svc>.<ns>.svc.<zone>, and clusterset.local is not served. It
// is what a cluster whose ClusterSet uses another DNS domain runs (the
// conformance suite's --dns-domain).
func StartCoreDNSZoneAt(t testing.TB, hubKubeconfigPath, ip, zone string) (addr string) {
	t.Helper()
	return startCoreDNS(t, hubKubeconfigPath, ip, 0, zone)
}

func startCoreDNS(t testing.TB, hubKubeconfigPath, bindIP string, dnsPort int, zone string) (addr string) {
	t.Helper()
	bin, err := CoreDNSPath()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	kubeconfig, err := filepath.Abs(hubKubeconfigPath)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	kc, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatalf("testenv: reading the kubeconfig for CoreDNS: %v", err)
	}
	if kc.CurrentContext == "" {
		t.Fatalf("testenv: kubeconfig %s has no current context", kubeconfig)
	}
	dir := t.TempDir()
	killOrphans(bin)

	// A port free now may be taken before CoreDNS binds it: retry with
	// new ports when CoreDNS exits during startup.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		p, err := startCoreDNSProcess(bin, dir, kubeconfig, kc.CurrentContext, bindIP, dnsPort, zone)
		if err != nil {
			lastErr = err
			if errors.Is(err, errCoreDNSExited) {
				continue
			}
			break
		}
		t.Cleanup(func() {
			if err := p.stop(); err != nil {
				t.Errorf("testenv: stopping CoreDNS: %v", err)
			}
			if t.Failed() {
				t.Logf("testenv: CoreDNS Corefile:\n%s\nCoreDNS log (tail):\n%s", p.corefile, tail(p.logPath, 60))
			}
		})
		return p.addr
	}
	t.Fatalf("testenv: %v", lastErr)
	return ""
}

var errCoreDNSExited = errors.New("CoreDNS exited during startup")

type coreDNSProcess struct {
	cmd      *exec.Cmd
	done     chan struct{}
	waitErr  error
	addr     string
	corefile string
	logPath  string
	zone     string // the multicluster zone
}

func startCoreDNSProcess(bin, dir, kubeconfig, kubeContext, bindIP string, dnsPort int, zone string) (*coreDNSProcess, error) {
	if dnsPort == 0 {
		p, err := freeUDPAndTCPPort(bindIP)
		if err != nil {
			return nil, err
		}
		dnsPort = p
	}
	readyPort, err := freeTCPPort()
	if err != nil {
		return nil, err
	}
	corefile := corefileAt(bindIP, zone, kubeconfig, kubeContext, dnsPort, readyPort)
	corefilePath := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(corefilePath, []byte(corefile), 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "coredns.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logFile.Close() }() // the child has its own descriptor; nothing was written through this one
	cmd := exec.Command(bin, "-conf", corefilePath)
	cmd.Dir = dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	p := &coreDNSProcess{
		cmd:      cmd,
		done:     make(chan struct{}),
		addr:     net.JoinHostPort(bindIP, strconv.Itoa(dnsPort)),
		corefile: corefile,
		logPath:  logPath,
		zone:     zone,
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := p.waitReady(readyPort, 60*time.Second); err != nil {
		_ = p.stop()
		return nil, fmt.Errorf("%w\nCorefile:\n%s\nCoreDNS log (tail):\n%s", err, corefile, tail(logPath, 60))
	}
	return p, nil
}

// waitReady waits until the ready plugin reports that the kubernetes caches
// have synced and the server answers a query over UDP and over TCP.
func (p *coreDNSProcess) waitReady(readyPort int, timeout time.Duration) error {
	readyURL := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(readyPort)) + "/ready"
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	last := errors.New("no check ran")
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("%w: %v", errCoreDNSExited, p.waitErr)
		default:
		}
		last = p.check(client, readyURL)
		if last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("CoreDNS on %s not ready after %s: %v", p.addr, timeout, last)
}

func (p *coreDNSProcess) check(client *http.Client, readyURL string) error {
	resp, err := client.Get(readyURL)
	if err != nil {
		return err
	}
	body := new(bytes.Buffer)
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", readyURL, resp.Status, strings.TrimSpace(body.String()))
	}
	// The zone apex has an SOA: an authoritative answer from the
	// kubernetes plugin, whatever the cluster holds.
	for _, network := range []string{"udp", "tcp"} {
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, p.addr)
		}}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := r.LookupNS(ctx, p.zone+".")
		cancel()
		var dnsErr *net.DNSError
		// NS of the apex is answered (ns.dns.<zone>); a NODATA or
		// NXDOMAIN would still prove the server answers.
		if err != nil && !(errors.As(err, &dnsErr) && dnsErr.IsNotFound) {
			return fmt.Errorf("DNS over %s to %s: %w", network, p.addr, err)
		}
	}
	return nil
}

// stop ends CoreDNS: SIGTERM, then SIGKILL after five seconds.
func (p *coreDNSProcess) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return nil
}

// freeUDPAndTCPPort returns a port of ip free for both TCP and UDP.
func freeUDPAndTCPPort(ip string) (int, error) {
	for i := 0; i < 20; i++ {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort(ip, strconv.Itoa(port)))
		l.Close()
		if err != nil {
			continue
		}
		u.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no port of %s is free for both TCP and UDP", ip)
}

func freeTCPPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the last n lines of the file at path, or why it cannot.
func tail(path string, n int) string {
	s, err := TailFile(path, n)
	if err != nil {
		return err.Error()
	}
	return s
}
