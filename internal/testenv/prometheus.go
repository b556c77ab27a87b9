package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PrometheusVersion is the github.com/prometheus/prometheus module that
// `make prometheus` builds from hack/prometheus (v0.3XX.Y is Prometheus
// 3.XX.Y). It must match PROMETHEUS_VERSION in the Makefile and
// hack/prometheus/go.mod (a test checks that).
const PrometheusVersion = "v0.316.0"

// PrometheusEnv names the environment variable that points at the directory
// holding the prometheus and promtool binaries (`make test` sets it).
const PrometheusEnv = "ENDPOINT_AGGREGATOR_PROMETHEUS"

// DefaultPrometheusDir returns where the Makefile builds Prometheus when
// CACHE_DIR is not overridden:
// ${XDG_CACHE_HOME:-$HOME/.cache}/endpoint-aggregator/bin/prometheus-<ver>.
func DefaultPrometheusDir() (string, error) {
	bin, err := cacheBinDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(bin, "prometheus-"+PrometheusVersion), nil
}

// PrometheusTool returns the path of name ("prometheus" or "promtool") in
// $ENDPOINT_AGGREGATOR_PROMETHEUS, else in [DefaultPrometheusDir]. It checks
// that the file is executable.
func PrometheusTool(name string) (string, error) {
	dir, err := envOrDefaultPath(PrometheusEnv, DefaultPrometheusDir)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, name)
	if err := checkExecutable(p); err != nil {
		return "", fmt.Errorf("%w (run `make prometheus` to build Prometheus and promtool, or set %s to a directory holding them)", err, PrometheusEnv)
	}
	return p, nil
}

// RequirePrometheusTool returns PrometheusTool(name), or fails the test. It
// never skips: `make test` builds the tools first.
func RequirePrometheusTool(t testing.TB, name string) string {
	t.Helper()
	p, err := PrometheusTool(name)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return p
}

// Promtool runs promtool with args in dir and returns its combined output.
func Promtool(t testing.TB, dir string, stdin io.Reader, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(RequirePrometheusTool(t, "promtool"), args...)
	cmd.Dir = dir
	cmd.Stdin = stdin
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// ScrapeTarget is one static target of StartPrometheus: a job scraping
// host:port, with extra target labels (e.g. namespace) as a ServiceMonitor
// would attach them.
type ScrapeTarget struct {
	Job    string
	Addr   string
	Labels map[string]string
	// Secure scrapes over HTTPS with BearerToken, accepting any certificate,
	// as a ServiceMonitor for the chart's metrics.secure does.
	Secure      bool
	BearerToken string
}

// Prometheus is a running Prometheus server on loopback.
type Prometheus struct {
	URL string // http://127.0.0.1:PORT
	*process
}

// StartPrometheus runs Prometheus scraping targets every second and
// evaluating the rule files every second, its TSDB in a t.TempDir(). It
// returns once the server is ready; t.Cleanup stops it (its log is printed
// if the test failed).
func StartPrometheus(t testing.TB, targets []ScrapeTarget, ruleFiles ...string) *Prometheus {
	t.Helper()
	bin := RequirePrometheusTool(t, "prometheus")
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n")
	if len(ruleFiles) > 0 {
		b.WriteString("rule_files:\n")
		for _, f := range ruleFiles {
			fmt.Fprintf(&b, "  - %q\n", f)
		}
	}
	b.WriteString("scrape_configs:\n")
	for _, tg := range targets {
		fmt.Fprintf(&b, "  - job_name: %q\n", tg.Job)
		if tg.Secure {
			fmt.Fprintf(&b, "    scheme: https\n    tls_config:\n      insecure_skip_verify: true\n    authorization:\n      credentials: %q\n", tg.BearerToken)
		}
		fmt.Fprintf(&b, "    static_configs:\n      - targets: [%q]\n", tg.Addr)
		if len(tg.Labels) > 0 {
			b.WriteString("        labels:\n")
			for k, v := range tg.Labels {
				fmt.Fprintf(&b, "          %s: %q\n", k, v)
			}
		}
	}
	config := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(config, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := Promtool(t, dir, nil, "check", "config", config); err != nil {
		t.Fatalf("testenv: promtool check config: %v\n%s\n%s", err, out, b.String())
	}

	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freeTCPPort()
		if err != nil {
			t.Fatal(err)
		}
		p, err := startPrometheusProcess(bin, dir, config, port)
		if err != nil {
			lastErr = err
			continue
		}
		t.Cleanup(func() {
			p.stop()
			if t.Failed() {
				t.Logf("testenv: Prometheus config:\n%s\nPrometheus log (tail):\n%s", b.String(), tail(p.logPath, 40))
			}
		})
		return p
	}
	t.Fatalf("testenv: %v", lastErr)
	return nil
}

func startPrometheusProcess(bin, dir, config string, port int) (*Prometheus, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logPath := filepath.Join(dir, fmt.Sprintf("prometheus-%d.log", port))
	cmd := exec.Command(bin,
		"--config.file="+config,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		// No update checks, no remote anything: only the static targets.
		"--log.level=warn",
	)
	cmd.Dir = dir
	proc, err := startProcess(cmd, logPath)
	if err != nil {
		return nil, err
	}
	p := &Prometheus{URL: "http://" + addr, process: proc}
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return nil, fmt.Errorf("prometheus exited during startup: %v\n%s", p.waitErr, tail(logPath, 40))
		default:
		}
		if resp, err := client.Get(p.URL + "/-/ready"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.stop()
	return nil, fmt.Errorf("prometheus on %s not ready after 60s\n%s", addr, tail(logPath, 40))
}

// Sample is one series of an instant query's result.
type Sample struct {
	Metric map[string]string
	Value  float64
}

// Query evaluates an instant PromQL query at time at (the server's now when
// zero) through the HTTP API. An empty vector is no error; the caller
// decides what an empty result means.
func (p *Prometheus) Query(ctx context.Context, query string, at time.Time) ([]Sample, error) {
	form := url.Values{"query": {query}}
	if !at.IsZero() {
		form.Set("time", strconv.FormatFloat(float64(at.UnixNano())/1e9, 'f', 3, 64))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL+"/api/v1/query", strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("query %q: %s: %w", query, resp.Status, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %q: %s: %s", query, body.ErrorType, body.Error)
	}
	if body.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %q: result type %s, want vector", query, body.Data.ResultType)
	}
	out := make([]Sample, 0, len(body.Data.Result))
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("query %q: value %v: %w", query, r.Value[1], err)
		}
		out = append(out, Sample{Metric: r.Metric, Value: v})
	}
	return out, nil
}

// Targets returns the health ("up", "down", "unknown", with the last scrape
// error if any) of every active scrape target, by instance.
func (p *Prometheus) Targets(ctx context.Context) (map[string]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/api/v1/targets?state=active", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Data struct {
			ActiveTargets []struct {
				Labels    map[string]string `json:"labels"`
				Health    string            `json:"health"`
				LastError string            `json:"lastError"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, tg := range body.Data.ActiveTargets {
		h := tg.Health
		if tg.LastError != "" {
			h += ": " + tg.LastError
		}
		out[tg.Labels["instance"]] = h
	}
	if len(out) == 0 {
		return nil, errors.New("prometheus has no active targets")
	}
	return out, nil
}
