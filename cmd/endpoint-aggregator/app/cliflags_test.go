package app

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// runCLICommand runs the root command with args in-process.
func runCLICommand(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := NewCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = cmd.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// TestOperatorCommandFlags checks flag validation. Every case fails before
// any cluster is contacted: the kubeconfig points at unreachable servers.
func TestOperatorCommandFlags(t *testing.T) {
	kubeconfig := writeTestKubeconfig(t)
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr []string
	}{
		{"register needs a member context", []string{"register"}, []string{"--member-context is required"}},
		{"register name must be a DNS label", []string{"register", "--member-context", "east", "--hub-context", "hub", "--name", "East_1"}, []string{`cluster name "East_1" from --name is not a DNS-1123 label`}},
		{"register default name from an unfit context", []string{"register", "--member-context", "arn:aws:eks:x", "--hub-context", "hub"}, []string{"from the member context's name (set --name)"}},
		{"register member server", []string{"register", "--member-context", "east", "--hub-context", "hub", "--member-server", "east:6443"}, []string{"--member-server"}},
		{"register token expiration", []string{"register", "--member-context", "east", "--hub-context", "hub", "--token-expiration", "5m"}, []string{"--token-expiration must be at least 10m"}},
		{"register member compression", []string{"register", "--member-context", "east", "--hub-context", "hub", "--member-compression", "yes"}, []string{`--member-compression must be true or false, not "yes"`}},
		{"register token wait", []string{"register", "--member-context", "east", "--hub-context", "hub", "--token-wait", "-1s"}, []string{"--token-wait must not be negative"}},
		{"namespace", []string{"register", "--member-context", "east", "--hub-context", "hub", "-n", "Bad"}, []string{`--namespace "Bad"`}},
		{"request timeout", []string{"status", "--hub-context", "hub", "--request-timeout", "-1s"}, []string{"--request-timeout"}},
		{"unknown context", []string{"register", "--member-context", "north", "--hub-context", "hub", "--dry-run"}, []string{`context "north" is not in the kubeconfig `, "(it has east, hub)"}},
		{"positional arguments", []string{"status", "--hub-context", "hub", "extra"}, []string{"unknown command"}},
		{"unregister needs a name", []string{"unregister"}, []string{"--name is required"}},
		{"unregister name", []string{"unregister", "--hub-context", "hub", "--name", "a.b"}, []string{`--name "a.b" is not a DNS-1123 label`}},
		{"unregister cleanup needs member", []string{"unregister", "--hub-context", "hub", "--name", "east", "--cleanup-member"}, []string{"--cleanup-member needs --member-context"}},
		{"unregister member without cleanup", []string{"unregister", "--hub-context", "hub", "--name", "east", "--member-context", "east"}, []string{"--member-context is only used with --cleanup-member"}},
		{"status output", []string{"status", "--hub-context", "hub", "-o", "wide"}, []string{`--output "wide": want one of table, json, yaml`}},
		{"explain needs a target", []string{"explain", "--hub-context", "hub"}, []string{"accepts 1 arg(s)"}},
		{"explain target", []string{"explain", "shop", "--hub-context", "hub"}, []string{`argument "shop": want NAMESPACE/SERVICE`}},
		{"explain target names", []string{"explain", "Shop/cart", "--hub-context", "hub"}, []string{`namespace "Shop"`}},
		{"explain daemon flags", []string{"explain", "shop/cart", "--hub-context", "hub", "--export-mode", "some", "--per-cluster-services", "x"},
			[]string{"--export-mode: unknown export mode", "--per-cluster-services: invalid per-cluster mode"}},
		{"cleanup in-cluster excludes a context", []string{"cleanup", "--in-cluster", "--hub-context", "hub"}, []string{"--in-cluster excludes --hub-context and --kubeconfig"}},
		{"cleanup flags", []string{"cleanup", "--hub-context", "hub", "-o", "wide", "--wait", "-1s", "--leader-election-id", "Bad_ID"},
			[]string{`--output "wide"`, "--wait must not be negative", `--leader-election-id "Bad_ID"`}},
		{"cleanup delete-deployment needs wait", []string{"cleanup", "--hub-context", "hub", "--delete-deployment", "endpoint-aggregator"}, []string{"--delete-deployment needs --wait"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, err := runCLICommand(t, append(tc.args, "--kubeconfig", kubeconfig)...)
			if err == nil {
				t.Fatal("no error")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q (stderr %q)", err, want, stderr)
				}
			}
		})
	}
}

// TestRegisterDryRunRunsTheChecks: --dry-run contacts the hub and the
// member as a real run does; when neither answers, it says which checks
// failed and which could not run, still lists what it would apply, prints
// no Secret, and fails as a real run would.
func TestRegisterDryRunRunsTheChecks(t *testing.T) {
	kubeconfig := writeTestKubeconfigWithoutCA(t)
	stdout, stderr, err := runCLICommand(t, "register", "--kubeconfig", kubeconfig, "--member-context", "east", "--hub-context", "hub",
		"--dry-run", "--read-only", "--member-server", "https://east.example:6443", "-n", "aggregator")
	if err == nil || !strings.Contains(err.Error(), "a real run would fail: hub hub: reading secret aggregator/east:") {
		t.Errorf("error %v, want the hub's failure", err)
	}
	for _, want := range []string{
		`check hub hub: cluster name "east": FAILED: hub hub: reading secret aggregator/east:`,
		"check member east: reachable: FAILED: member east: reading namespace kube-system:",
		`check hub hub: not registered under another name, "east" not re-pointed: not run: needs the hub and the member`,
		"check member east: may apply the member identity: not run: the member does not answer",
		"member east: would apply clusterrole.rbac.authorization.k8s.io/endpoint-aggregator-member",
		"check hub hub: may write secret/east (namespace aggregator): not run",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("dry-run stderr lacks %q:\n%s", want, stderr)
		}
	}
	if stdout != "" {
		t.Errorf("a failed dry run printed a Secret:\n%s", stdout)
	}
}

// writeTestKubeconfigWithoutCA is writeTestKubeconfig without east's
// (unparsable) CA data, so that clients can be built for both contexts.
func writeTestKubeconfigWithoutCA(t *testing.T) string {
	t.Helper()
	path := writeTestKubeconfig(t)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.Contains(line, "certificate-authority-data:") {
			kept = append(kept, line)
		}
	}
	if err := os.WriteFile(path, []byte(strings.Join(kept, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRegisterClusterNameDefault(t *testing.T) {
	o := newRegisterOptions()
	o.MemberContext = "east"
	if o.clusterName() != "east" {
		t.Errorf("default name %q", o.clusterName())
	}
	o.Name = "east-1"
	if o.clusterName() != "east-1" {
		t.Errorf("--name %q", o.clusterName())
	}
}

// writeTestKubeconfig writes a kubeconfig with contexts east and hub whose
// servers accept no connection.
func writeTestKubeconfig(t *testing.T) string {
	t.Helper()
	const kc = `apiVersion: v1
kind: Config
clusters:
- name: east
  cluster:
    server: https://127.0.0.1:1
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=
- name: hub
  cluster:
    server: https://127.0.0.1:2
users:
- name: admin
  user:
    token: admin-token
contexts:
- name: east
  context: {cluster: east, user: admin}
- name: hub
  context: {cluster: hub, user: admin}
current-context: hub
`
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestHelpHidesKlogFlagsButAcceptsThem: --help lists -v of klog's flags
// only; the others still parse.
func TestHelpHidesKlogFlagsButAcceptsThem(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"status", "--help"}} {
		out, _, err := runCLICommand(t, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		for _, hidden := range []string{"--log_file", "--skip_headers", "--logtostderr", "--vmodule"} {
			if strings.Contains(out, hidden) {
				t.Errorf("%v lists klog's %s:\n%s", args, hidden, out)
			}
		}
		if !strings.Contains(out, "--v Level") {
			t.Errorf("%v does not list -v:\n%s", args, out)
		}
	}
	if out, _, err := runCLICommand(t, "version", "--logtostderr=true", "--skip_headers", "-v", "2"); err != nil || out == "" {
		t.Errorf("version with klog flags: %q, %v", out, err)
	}
}

// TestCLIPrintsEachAPIWarningOnce: the hub's Endpoints deprecation warning,
// sent with every response, reaches the operator once per run.
func TestCLIPrintsEachAPIWarningOnce(t *testing.T) {
	const warning = "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Add("Warning", `299 - "`+warning+`"`)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"EndpointsList","apiVersion":"v1","items":[]}`))
	}))
	defer srv.Close()
	var buf bytes.Buffer
	old := cliWarnings
	cliWarnings = &buf
	defer func() { cliWarnings = old }()
	c, err := newCLIClients("test", &rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.kube.CoreV1().Endpoints("shop").List(context.Background(), metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(buf.String(), warning); n != 1 {
		t.Errorf("the warning was printed %d times, want once:\n%s", n, buf.String())
	}
}

// TestHubContextDefaultsToTheCurrentContext: without --hub-context the
// commands use the kubeconfig's current context, as kubectl does, and say
// so clearly when there is none.
func TestHubContextDefaultsToTheCurrentContext(t *testing.T) {
	kubeconfig := writeTestKubeconfigWithoutCA(t) // current-context: hub
	// No cluster answers: the dry run fails, after checking the hub.
	_, stderr, _ := runCLICommand(t, "register", "--kubeconfig", kubeconfig, "--member-context", "east", "--dry-run", "--member-server", "https://east.example:6443")
	if !strings.Contains(stderr, "check hub hub: cluster name") {
		t.Errorf("register --dry-run without --hub-context did not use the current context hub:\n%s", stderr)
	}

	raw, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	none := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(none, []byte(strings.Replace(string(raw), "current-context: hub", "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status"}, {"explain", "shop/cart"}, {"cleanup"}, {"unregister", "--name", "east"}, {"register", "--member-context", "east"}} {
		_, _, err := runCLICommand(t, append(args, "--kubeconfig", none)...)
		if err == nil || !strings.Contains(err.Error(), "--hub-context not given, and the kubeconfig has no current context") {
			t.Errorf("%v with no current context: %v", args, err)
		}
	}
}

// TestKubeconfigErrorsNameTheFile: a kubeconfig that is missing is named,
// whether given with --kubeconfig or $KUBECONFIG.
func TestKubeconfigErrorsNameTheFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-kubeconfig")
	_, _, err := runCLICommand(t, "status", "--kubeconfig", missing, "--hub-context", "hub")
	if err == nil || !strings.Contains(err.Error(), missing+", which does not exist") {
		t.Errorf("--kubeconfig missing: %v; want it named", err)
	}
	t.Setenv("KUBECONFIG", missing)
	_, _, err = runCLICommand(t, "status")
	if err == nil || !strings.Contains(err.Error(), missing+", which does not exist") {
		t.Errorf("$KUBECONFIG missing: %v; want it named", err)
	}
}
