package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
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

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
)

// The daemon as a separate process, for faults an in-process daemon cannot
// take: SIGKILL.

const daemonPackage = "github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator"

// buildDaemon builds the endpoint-aggregator binary into a temporary
// directory of the test.
func buildDaemon(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("building the daemon needs the go command in PATH: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "endpoint-aggregator")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, daemonPackage).CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", daemonPackage, err, out)
	}
	t.Logf("built the daemon in %s", time.Since(t0).Round(time.Millisecond))
	return bin
}

// daemonProcess is one run of the daemon binary.
type daemonProcess struct {
	cmd     *exec.Cmd
	logPath string
	metrics string // host:port of /metrics and /readyz
	done    chan struct{}
	err     error // from Wait, once done is closed
}

// startDaemonProcess runs `endpoint-aggregator run` against the hub in
// annotation mode without leader election, serving metrics on a free
// loopback port, plus extra flags. The process is killed when the test ends.
func (e *env) startDaemonProcess(t *testing.T, bin string, extra ...string) *daemonProcess {
	t.Helper()
	addr := freeLoopbackAddr(t)
	logf, err := os.CreateTemp(t.TempDir(), "daemon-*.log")
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"run",
		"--kubeconfig", e.hub.KubeconfigPath,
		"--namespace", daemonNamespace,
		"--export-mode", "annotation",
		"--leader-elect=false",
		"--metrics-bind-address", addr,
	}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		t.Fatal(err)
	}
	p := &daemonProcess{cmd: cmd, logPath: logf.Name(), metrics: addr, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("last lines of daemon (pid %d) log:\n%s", cmd.Process.Pid, p.logTail(40))
		}
	})
	return p
}

// freeLoopbackAddr returns a loopback address with a port that was free a
// moment ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func (p *daemonProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits for the process to go.
func (p *daemonProcess) kill() {
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
}

// terminate sends SIGTERM and waits for a clean exit.
func (p *daemonProcess) terminate(t *testing.T) {
	t.Helper()
	if p.exited() {
		t.Fatalf("daemon exited early: %v\n%s", p.err, p.logTail(40))
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.err != nil {
			t.Errorf("daemon exited with %v after SIGTERM, want a clean exit\n%s", p.err, p.logTail(40))
		}
	case <-time.After(30 * time.Second):
		p.kill()
		t.Fatalf("daemon did not exit within 30s of SIGTERM\n%s", p.logTail(40))
	}
}

func (p *daemonProcess) logTail(n int) string {
	s, err := testenv.TailFile(p.logPath, n)
	if err != nil {
		return err.Error()
	}
	return s
}

// get fetches a path of the daemon's metrics server.
func (p *daemonProcess) get(path string) (int, string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + p.metrics + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// ready reports whether /readyz answers 200.
func (p *daemonProcess) ready() error {
	if p.exited() {
		return fmt.Errorf("daemon exited: %v", p.err)
	}
	code, body, err := p.get("/readyz")
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("/readyz: %d %s", code, strings.TrimSpace(body))
	}
	return nil
}

// metric sums the samples of a metric family from /metrics, except those
// whose labels contain one of the skip strings (e.g. `resource="leases"`).
// A vector with no samples yet is not exposed at all: found is false.
func (p *daemonProcess) metric(name string, skip ...string) (sum float64, found bool, err error) {
	code, body, err := p.get("/metrics")
	if err != nil {
		return 0, false, err
	}
	if code != http.StatusOK {
		return 0, false, fmt.Errorf("/metrics: %d", code)
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		if slices.ContainsFunc(skip, func(s string) bool { return strings.Contains(line, s) }) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return 0, false, fmt.Errorf("metric line %q: %w", line, err)
		}
		sum += v
		found = true
	}
	return sum, found, sc.Err()
}
