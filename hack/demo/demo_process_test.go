//go:build unix

package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
)

// TestDemoPrintsAMergedKubeconfigAndEndsCleanlyOnCtrlC runs the demo as
// `make demo` does, as its own process, and then does what its output
// suggests: it loads the one KUBECONFIG the demo printed and reaches hub,
// east and west through its contexts, and runs the printed `status` and
// `explain` commands. Then it presses Ctrl-C the way a terminal does (SIGINT
// to the demo's whole process group, which the clusters' etcd and
// kube-apiserver share) and expects exit status 0, with everything removed.
//
// It needs the Kubernetes binaries (`make tools` or `make demo` builds
// them) and skips, saying so, only when they are not there and
// ENDPOINT_AGGREGATOR_ASSETS is unset (with it set, as `make test` sets it,
// a missing binary fails).
func TestDemoPrintsAMergedKubeconfigAndEndsCleanlyOnCtrlC(t *testing.T) {
	assets, err := testenv.AssetsDir()
	if errors.Is(err, testenv.ErrNoAssets) && os.Getenv(testenv.AssetsEnv) == "" {
		// `make test-unit` alone builds no binaries; `make test` sets
		// AssetsEnv, and a missing binary then fails below.
		t.Skipf("the demo needs kube-apiserver and etcd, which are not built: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}

	// A working directory laid out like the repository's: the CLI at
	// bin/endpoint-aggregator, so the demo prints that relative path.
	work := t.TempDir()
	cli := filepath.Join(work, "bin", "endpoint-aggregator")
	demoBin := filepath.Join(work, "demo")
	goBuild(t, cli, "github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator")
	goBuild(t, demoBin, "github.com/endpoint-aggregator/endpoint-aggregator/hack/demo")

	tmp := t.TempDir() // the demo's TMPDIR: what it leaves behind shows here
	cmd := exec.Command(demoBin, "-binary", filepath.Join("bin", "endpoint-aggregator"), "-timeout", "3m")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), testenv.AssetsEnv+"="+assets, "TMPDIR="+tmp)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a process group of its own, as a terminal's job is
	out := &lockedLines{running: make(chan struct{})}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			out.add(sc.Text())
		}
		done <- cmd.Wait()
	}()
	exited := false
	t.Cleanup(func() {
		if exited {
			return
		}
		// The demo cleans up after SIGTERM; SIGKILL its group if it hangs.
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
		select {
		case err := <-done:
			t.Logf("demo ended after SIGTERM: %v", err)
		case <-time.After(90 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Logf("demo killed after 90s: %v", <-done)
		}
	})

	select {
	case <-out.running:
	case err := <-done:
		exited = true
		t.Fatalf("the demo exited (%v) before it was running; output:\n%s", err, out)
	case <-time.After(6 * time.Minute):
		t.Fatalf("the demo did not print its tables within 6m; output:\n%s", out)
	}

	// One kubeconfig, with a working context per cluster.
	m := regexp.MustCompile(`(?m)^  export KUBECONFIG=(\S+)$`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("the demo printed no KUBECONFIG; output:\n%s", out)
	}
	kubeconfig := m[1]
	kc, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatalf("the printed KUBECONFIG: %v", err)
	}
	if got := sortedKeys(kc.Contexts); strings.Join(got, ",") != "east,hub,west" {
		t.Errorf("contexts %v, want east, hub and west", got)
	}
	hosts := map[string]string{}
	for _, name := range []string{"hub", "east", "west"} {
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: name}).ClientConfig()
		if err != nil {
			t.Errorf("context %s: %v", name, err)
			continue
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.Discovery().ServerVersion(); err != nil {
			t.Errorf("context %s (%s) does not answer: %v", name, cfg.Host, err)
		}
		if other, dup := hosts[cfg.Host]; dup {
			t.Errorf("contexts %s and %s both reach %s", other, name, cfg.Host)
		}
		hosts[cfg.Host] = name
	}

	// The printed CLI commands work as printed, from the working directory.
	for _, sub := range []string{"status", "explain"} {
		line := printedCommand(t, out.String(), "bin/endpoint-aggregator "+sub+" ")
		args := strings.Fields(line)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		c := exec.CommandContext(ctx, args[0], args[1:]...)
		c.Dir = work
		got, err := c.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("%s: %v\n%s", line, err, got)
			continue
		}
		for _, member := range []string{"east", "west"} {
			if !strings.Contains(string(got), member) {
				t.Errorf("%s says nothing of %s:\n%s", line, member, got)
			}
		}
		t.Logf("%s\n%s", line, got)
	}

	// Ctrl-C in a terminal: SIGINT to the foreground process group.
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		exited = true
		if err != nil {
			t.Errorf("after Ctrl-C the demo ended with %v, want exit status 0; output:\n%s", err, out)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the demo did not end within 2m of Ctrl-C; output:\n%s", out)
	}
	if !strings.Contains(out.String(), "\nDone.") {
		t.Errorf("the demo did not finish its cleanup; output:\n%s", out)
	}
	if _, err := os.Stat(kubeconfig); !os.IsNotExist(err) {
		t.Errorf("the demo left its kubeconfig behind (stat: %v)", err)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		var names []string
		for _, e := range left {
			names = append(names, e.Name())
		}
		t.Errorf("the demo left %v in its TMPDIR", names)
	}
}

// printedCommand returns the command line the demo printed that starts with
// prefix (after its indentation).
func printedCommand(t *testing.T, out, prefix string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("the demo printed no command starting with %q; output:\n%s", prefix, out)
	return ""
}

func goBuild(t *testing.T, out, pkg string) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("building %s needs the go command in PATH: %v", pkg, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if b, err := exec.CommandContext(ctx, goTool, "build", "-o", out, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
}

// lockedLines collects the demo's output; running is closed once the demo
// says it runs until Ctrl-C.
type lockedLines struct {
	mu      sync.Mutex
	b       strings.Builder
	running chan struct{}
	seen    bool
}

func (l *lockedLines) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(line + "\n")
	if !l.seen && strings.HasPrefix(line, "Running. Press Ctrl-C") {
		l.seen = true
		close(l.running)
	}
}

// Write takes stderr.
func (l *lockedLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
