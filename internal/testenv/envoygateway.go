package testenv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// EnvoyGatewayVersion is the Envoy Gateway that `make envoy-gateway`
// installs from its Go module. It must match ENVOY_GATEWAY_VERSION in the
// Makefile (a test checks that).
const EnvoyGatewayVersion = "v1.9.1"

// EnvoyGatewayEnv names the environment variable that points at the
// envoy-gateway binary (`make test` sets it). Its CRDs are in crds/ beside
// it.
const EnvoyGatewayEnv = "ENDPOINT_AGGREGATOR_ENVOY_GATEWAY"

// EnvoyGatewayControllerName is the controllerName of the GatewayClasses
// Envoy Gateway reconciles (its default).
const EnvoyGatewayControllerName = "gateway.envoyproxy.io/gatewayclass-controller"

// envoyGatewayNamespace is where Envoy Gateway keeps its lease and the
// Envoy Deployments it creates (its default, ENVOY_GATEWAY_NAMESPACE).
const envoyGatewayNamespace = "envoy-gateway-system"

// DefaultEnvoyGatewayPath returns where the Makefile installs Envoy Gateway
// when CACHE_DIR is not overridden:
// ${XDG_CACHE_HOME:-$HOME/.cache}/endpoint-aggregator/bin/envoy-gateway-<ver>/envoy-gateway.
func DefaultEnvoyGatewayPath() (string, error) {
	bin, err := cacheBinDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(bin, "envoy-gateway-"+EnvoyGatewayVersion, "envoy-gateway"), nil
}

// EnvoyGatewayPath returns the envoy-gateway binary: $ENDPOINT_AGGREGATOR_ENVOY_GATEWAY
// if set, else [DefaultEnvoyGatewayPath]. It checks that the file is
// executable and that its CRDs are beside it.
func EnvoyGatewayPath() (string, error) {
	abs, err := envOrDefaultPath(EnvoyGatewayEnv, DefaultEnvoyGatewayPath)
	if err == nil {
		err = checkExecutable(abs)
	}
	if err == nil {
		var crds []string
		crds, err = filepath.Glob(filepath.Join(filepath.Dir(abs), "crds", "*.yaml"))
		if err == nil && len(crds) == 0 {
			err = fmt.Errorf("%w: no CRDs in %s", ErrNoAssets, filepath.Join(filepath.Dir(abs), "crds"))
		}
	}
	if err != nil {
		return "", fmt.Errorf("%w (run `make envoy-gateway` to install Envoy Gateway %s, or set %s to an envoy-gateway binary with its CRDs in crds/ beside it)", err, EnvoyGatewayVersion, EnvoyGatewayEnv)
	}
	return abs, nil
}

// EnvoyGateway is Envoy Gateway's controller running against a cluster:
// its Kubernetes provider reads the Gateway API objects, Services,
// ServiceImports and EndpointSlices, translates them and writes route
// status. No Envoy runs; what it would program is read from the xDS IR it
// logs for each Gateway.
type EnvoyGateway struct {
	proc    *process
	logPath string
	admin   string // host:port of its admin server
}

// StartEnvoyGateway installs Envoy Gateway's CRDs (Gateway API's and its
// own, from the module's chart) into c and runs its controller against c,
// logging the xDS IR of every Gateway it translates. It returns once the
// admin server answers. t.Cleanup stops it; its log is printed if the test
// fails. A missing binary fails the test: it never skips.
//
// The controller reads its xDS and webhook certificates from /certs, a
// path no option changes. It runs in a mount namespace of its own whose
// root is a tmpfs holding binds of the host's top-level directories and a
// /certs of its own: no mount and no /certs appear on the host, and the
// namespace ends with the process. That needs root, or user namespaces for
// everyone else. Its other listeners are on fixed
// ports of every address (xDS 18000, health 8081, metrics 8080 and 19001),
// so one runs at a time on a machine.
func StartEnvoyGateway(t testing.TB, c *Cluster) *EnvoyGateway {
	t.Helper()
	bin, err := EnvoyGatewayPath()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if _, err := envtest.InstallCRDs(c.Config, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join(filepath.Dir(bin), "crds")}, ErrorIfPathMissing: true,
	}); err != nil {
		t.Fatalf("testenv: installing Envoy Gateway's CRDs: %v", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: envoyGatewayNamespace}}
	if _, err := c.Client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("testenv: %v", err)
	}
	killOrphans(bin)
	eg, err := startEnvoyGateway(bin, t.TempDir(), c.KubeconfigPath)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		eg.proc.stop()
		if t.Failed() {
			t.Logf("testenv: Envoy Gateway log (tail):\n%s", tail(eg.logPath, 40))
		}
	})
	return eg
}

func startEnvoyGateway(bin, dir, kubeconfig string) (*EnvoyGateway, error) {
	kubeconfig, err := filepath.Abs(kubeconfig)
	if err != nil {
		return nil, err
	}
	caPEM, certPEM, keyPEM, err := issueServingCert("envoy-gateway",
		[]string{"envoy-gateway", "envoy-gateway." + envoyGatewayNamespace + ".svc"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	certs := filepath.Join(dir, "certs")
	root := filepath.Join(dir, "root")
	for _, d := range []string{certs, root} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
	}
	for name, b := range map[string][]byte{"ca.crt": caPEM, "tls.crt": certPEM, "tls.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(certs, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	adminPort, err := freeTCPPort()
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "envoy-gateway.yaml")
	if err := os.WriteFile(cfgPath, []byte(envoyGatewayConfig(adminPort)), 0o600); err != nil {
		return nil, err
	}
	// The shell runs in the new mount namespace and ends by becoming
	// Envoy Gateway (unshare and chroot exec too): the test's child is the
	// controller itself, and an orphan of a killed run is found by its
	// binary's path. A host /certs, if any, is replaced by the test's.
	script := strings.Join([]string{
		`set -e`,
		`root="$1"; certs="$2"; shift 2`,
		`mount -t tmpfs -o mode=0755 testenv "$root"`,
		`for p in /*; do`,
		`  n="${p#/}"`,
		`  if [ "$n" = certs ]; then continue; fi`,
		`  if [ -L "$p" ]; then ln -s "$(readlink "$p")" "$root/$n"`,
		`  elif [ -d "$p" ]; then mkdir "$root/$n"; mount --rbind "$p" "$root/$n"; fi`,
		`done`,
		`mkdir "$root/certs"`,
		`cp "$certs"/* "$root/certs/"`,
		`exec chroot "$root" "$@"`,
	}, "\n")
	args := []string{"--mount", "--propagation", "private"}
	if os.Geteuid() != 0 {
		args = append([]string{"--user", "--map-root-user"}, args...)
	}
	args = append(args, "sh", "-c", script, "sh", root, certs, bin, "server", "--config-path", cfgPath)
	cmd := exec.Command("unshare", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "ENVOY_GATEWAY_NAMESPACE="+envoyGatewayNamespace)
	// Its own process group: a test's Ctrl-C does not reach it first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logPath := filepath.Join(dir, "envoy-gateway.log")
	proc, err := startProcess(cmd, logPath)
	if err != nil {
		return nil, err
	}
	eg := &EnvoyGateway{proc: proc, logPath: logPath, admin: net.JoinHostPort("127.0.0.1", strconv.Itoa(adminPort))}
	if err := eg.waitAdmin(90 * time.Second); err != nil {
		proc.stop()
		return nil, fmt.Errorf("%w\nEnvoy Gateway log (tail):\n%s", err, tail(logPath, 40))
	}
	return eg, nil
}

// envoyGatewayConfig is the EnvoyGateway configuration the test runs: the
// Kubernetes provider without leader election or the topology webhook,
// JSON logs with the gateway-api runner at debug (it then logs each xDS
// IR), and the admin server on 127.0.0.1:adminPort.
func envoyGatewayConfig(adminPort int) string {
	return fmt.Sprintf(`apiVersion: gateway.envoyproxy.io/v1alpha1
kind: EnvoyGateway
gateway:
  controllerName: %s
provider:
  type: Kubernetes
  kubernetes:
    leaderElection:
      disable: true
    proxyTopologyInjector:
      disabled: true
logging:
  encoder: JSON
  level:
    default: info
    gateway-api: debug
admin:
  address:
    host: 127.0.0.1
    port: %d
`, EnvoyGatewayControllerName, adminPort)
}

func (eg *EnvoyGateway) waitAdmin(timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	last := errors.New("no check ran")
	for time.Now().Before(deadline) {
		if eg.proc.exited() {
			return fmt.Errorf("envoy-gateway exited during startup: %v", eg.proc.waitErr)
		}
		resp, err := client.Get("http://" + eg.admin + "/api/server_info")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("admin server: %s", resp.Status)
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("envoy-gateway not ready after %s: %v", timeout, last)
}

// XdsIR returns the last xDS IR Envoy Gateway logged for the Gateway
// namespace/name, as JSON, or an error when it logged none or exited.
func (eg *EnvoyGateway) XdsIR(namespace, name string) (json.RawMessage, error) {
	if eg.proc.exited() {
		return nil, fmt.Errorf("envoy-gateway exited: %v\n%s", eg.proc.waitErr, tail(eg.logPath, 20))
	}
	f, err := os.Open(eg.logPath)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read only
	key := namespace + "/" + name
	var last string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte(`"xds-ir"`)) {
			continue
		}
		var entry struct {
			Msg   string `json:"msg"`
			XdsIR string `json:"xds-ir"`
		}
		if json.Unmarshal(line, &entry) == nil && entry.XdsIR == key {
			last = entry.Msg
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if last == "" {
		return nil, fmt.Errorf("envoy-gateway logged no xDS IR for Gateway %s", key)
	}
	return json.RawMessage(last), nil
}

// Endpoints returns the upstream endpoints ("host:port", sorted) of the
// last xDS IR of the Gateway namespace/name, every endpoint of every
// destination its routes send to: serving ones, and draining ones (Envoy
// Gateway keeps an endpoint that is not ready, or terminating, as draining:
// no new requests go to it).
func (eg *EnvoyGateway) Endpoints(namespace, name string) (serving, draining []string, err error) {
	raw, err := eg.XdsIR(namespace, name)
	if err != nil {
		return nil, nil, err
	}
	return irEndpoints(raw)
}

// irEndpoints collects the {"host", "port", "draining"} objects of every
// "endpoints" list in an xDS IR, wherever the IR nests them (route
// destinations, or the backend clusters they refer to), deduplicated and
// sorted.
func irEndpoints(raw json.RawMessage) (serving, draining []string, err error) {
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, nil, fmt.Errorf("xDS IR: %w", err)
	}
	seen := map[string]bool{} // host:port -> draining
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, child := range v {
				if list, ok := child.([]any); ok && k == "endpoints" {
					for _, item := range list {
						ep, _ := item.(map[string]any)
						host, _ := ep["host"].(string)
						port, _ := ep["port"].(float64)
						d, _ := ep["draining"].(bool)
						if host != "" {
							addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
							seen[addr] = seen[addr] || d
						}
					}
					continue
				}
				walk(child)
			}
		case []any:
			for _, child := range v {
				walk(child)
			}
		}
	}
	walk(doc)
	for addr, d := range seen {
		if d {
			draining = append(draining, addr)
		} else {
			serving = append(serving, addr)
		}
	}
	slices.Sort(serving)
	slices.Sort(draining)
	return serving, draining, nil
}

// ConfigDump returns what Envoy Gateway's admin server reports it loaded
// of one kind (its config_dump resource names: "endpointslice",
// "httproute", ...), as JSON.
func (eg *EnvoyGateway) ConfigDump(resource string) (json.RawMessage, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + eg.admin + "/api/config_dump?resource=" + resource)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("config_dump: %s: %w", resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("config_dump: %s: %s", resp.Status, body)
	}
	return body, nil
}
