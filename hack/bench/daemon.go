package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
)

// daemonProc is the endpoint-aggregator under test, run as a subprocess so
// that its memory and CPU are its own.
type daemonProc struct {
	cmd        *exec.Cmd
	base       string // http://127.0.0.1:PORT
	logPath    string
	started    time.Time
	done       chan struct{}
	err        error // valid once done is closed
	httpClient *http.Client
}

// daemonArgs are the flags of `endpoint-aggregator run` for this benchmark.
func daemonArgs(c *config, hubKubeconfig, metricsAddr string) []string {
	args := []string{"run",
		"--kubeconfig", hubKubeconfig,
		"--namespace", daemonNamespace,
		"--export-mode", "annotation",
		"--leader-elect=false",
		"--metrics-bind-address", metricsAddr,
		"--workers", strconv.Itoa(c.workers),
		"--kube-api-qps", strconv.FormatFloat(c.qps, 'f', -1, 64),
		"--kube-api-burst", strconv.Itoa(c.burst),
		"--per-cluster-services", c.perCluster,
		"--member-sync-timeout", "2m",
	}
	if c.profileDir != "" {
		args = append(args, "--profiling")
	}
	return append(args, c.daemonFlags...)
}

// startDaemon starts the binary with args (a --metrics-bind-address among
// them) and env added to the benchmark's environment, and logs to logPath.
func startDaemon(binary string, args, env []string, metricsAddr, logPath string) (*daemonProc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logf.Close() }() // the child has its own descriptor; nothing was written through this one
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	setProcAttrs(cmd)
	d := &daemonProc{
		cmd: cmd, base: "http://" + metricsAddr, logPath: logPath, done: make(chan struct{}),
		httpClient: &http.Client{Timeout: 10 * time.Second},
	}
	d.started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	go func() {
		d.err = cmd.Wait()
		close(d.done)
	}()
	return d, nil
}

// exited reports an early exit as an error.
func (d *daemonProc) exited() error {
	select {
	case <-d.done:
		return fmt.Errorf("endpoint-aggregator exited: %v%s", d.err, d.logTail())
	default:
		return nil
	}
}

// stop sends SIGTERM and waits; after timeout it kills the process.
func (d *daemonProc) stop(timeout time.Duration) error {
	if d == nil {
		return nil
	}
	select {
	case <-d.done:
		return nil
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return nil
	case <-time.After(timeout):
		_ = d.cmd.Process.Kill()
		<-d.done
		return errors.New("endpoint-aggregator did not stop on SIGTERM; killed")
	}
}

func (d *daemonProc) logTail() string {
	s, err := testenv.TailFile(d.logPath, 20)
	if err != nil || s == "" {
		return ""
	}
	return "\n--- last lines of the daemon's log ---\n" + s
}

func (d *daemonProc) get(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.base+path, nil)
	if err != nil {
		return nil, err
	}
	return d.httpClient.Do(req)
}

// ready reports whether /readyz answers 200.
func (d *daemonProc) ready(ctx context.Context) bool {
	resp, err := d.get(ctx, "/readyz")
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// scrape reads /metrics.
func (d *daemonProc) scrape(ctx context.Context) (metrics, error) {
	resp, err := d.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

// forceGC has the daemon collect its garbage: pprof's heap handler with
// gc=1 runs a collection before it writes the profile, which is dropped.
func (d *daemonProc) forceGC(ctx context.Context) error {
	resp, err := d.get(ctx, "/debug/pprof/heap?gc=1")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /debug/pprof/heap: %s (does the binary serve pprof with --profiling?)", resp.Status)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// waitSettled waits until the daemon is ready, its queue is empty and no
// sync has run for quiet: everything it knows is in the hub.
func (d *daemonProc) waitSettled(ctx context.Context, quiet, timeout time.Duration) (metrics, error) {
	deadline := time.Now().Add(timeout)
	var lastSyncs float64 = -1
	var since time.Time
	for {
		if err := d.exited(); err != nil {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("endpoint-aggregator did not settle within %s", timeout)
		}
		m, err := d.scrape(ctx)
		if err == nil && d.ready(ctx) {
			syncs := m.sum("endpoint_aggregator_syncs_total", nil)
			depth := m.sum("endpoint_aggregator_workqueue_depth", nil)
			switch {
			case depth > 0 || syncs != lastSyncs:
				lastSyncs, since = syncs, time.Now()
			case time.Since(since) >= quiet:
				return m, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// profile saves a pprof profile (path under /debug/pprof/) to dir/name,
// waiting first for the daemon's HTTP server to answer.
func (d *daemonProc) profile(ctx context.Context, path, dir, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		resp, err := d.get(ctx, "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if err := d.exited(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.base+"/debug/pprof/"+path, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /debug/pprof/%s: %s (does the binary serve pprof with --profiling?)", path, resp.Status)
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close() // the copy's error is the one to report
		return err
	}
	return f.Close()
}

// freeLoopbackAddr returns 127.0.0.1:PORT with a port free right now.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// metrics are parsed Prometheus text-format samples, by metric name.
type metrics map[string][]sample

type sample struct {
	labels map[string]string
	value  float64
}

// parseMetrics reads the Prometheus text exposition format (what promhttp
// serves without content negotiation).
func parseMetrics(r io.Reader) (metrics, error) {
	out := metrics{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest := line, ""
		labels := map[string]string{}
		if i := strings.IndexByte(line, '{'); i >= 0 {
			name = line[:i]
			j, err := parseLabels(line[i+1:], labels)
			if err != nil {
				return nil, fmt.Errorf("metrics line %q: %w", line, err)
			}
			rest = line[i+1+j:]
		} else if i := strings.IndexByte(line, ' '); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("metrics line %q: no value", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		out[name] = append(out[name], sample{labels: labels, value: v})
	}
	return out, sc.Err()
}

// parseLabels parses `k="v",...}` into labels and returns the length read,
// the closing brace included.
func parseLabels(s string, labels map[string]string) (int, error) {
	i := 0
	for {
		for i < len(s) && (s[i] == ',' || s[i] == ' ') {
			i++
		}
		if i < len(s) && s[i] == '}' {
			return i + 1, nil
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 || i+eq+1 >= len(s) || s[i+eq+1] != '"' {
			return 0, errors.New("bad label")
		}
		key := s[i : i+eq]
		i += eq + 2
		var val strings.Builder
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[i])
				}
				continue
			}
			val.WriteByte(s[i])
		}
		if i >= len(s) {
			return 0, errors.New("unterminated label value")
		}
		i++ // closing quote
		labels[key] = val.String()
	}
}

// sum adds the samples of name whose labels match match (nil: all).
func (m metrics) sum(name string, match func(map[string]string) bool) float64 {
	var t float64
	for _, s := range m[name] {
		if match == nil || match(s.labels) {
			t += s.value
		}
	}
	return t
}

// value returns the first sample of name, or -1.
func (m metrics) value(name string) float64 {
	if s := m[name]; len(s) > 0 {
		return s[0].value
	}
	return -1
}

// hubWrites counts the daemon's writes of aggregated hub objects: every
// resource but the member liveness Leases.
func (m metrics) hubWrites() float64 {
	return m.sum("endpoint_aggregator_hub_writes_total", func(l map[string]string) bool { return l["resource"] != "leases" })
}

// leaseWrites counts the member liveness Lease writes.
func (m metrics) leaseWrites() float64 {
	return m.sum("endpoint_aggregator_hub_writes_total", func(l map[string]string) bool { return l["resource"] == "leases" })
}

// failedWrites counts hub writes that did not succeed.
func (m metrics) failedWrites() float64 {
	return m.sum("endpoint_aggregator_hub_writes_total", func(l map[string]string) bool {
		return l["resource"] != "leases" && l["result"] != "success"
	})
}

// writesByResource summarizes the daemon's hub writes by resource/verb.
func (m metrics) writesByResource(base metrics) string {
	counts := map[string]float64{}
	for _, s := range m["endpoint_aggregator_hub_writes_total"] {
		counts[s.labels["resource"]+"/"+s.labels["verb"]+"/"+s.labels["result"]] += s.value
	}
	for _, s := range base["endpoint_aggregator_hub_writes_total"] {
		counts[s.labels["resource"]+"/"+s.labels["verb"]+"/"+s.labels["result"]] -= s.value
	}
	var parts []string
	for k, v := range counts {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%s=%.0f", k, v))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// syncsByResult summarizes the syncs between base and m by result.
func (m metrics) syncsByResult(base metrics) (total float64, detail string) {
	counts := map[string]float64{}
	for _, s := range m["endpoint_aggregator_syncs_total"] {
		counts[s.labels["result"]] += s.value
	}
	for _, s := range base["endpoint_aggregator_syncs_total"] {
		counts[s.labels["result"]] -= s.value
	}
	var parts []string
	for k, v := range counts {
		total += v
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%s=%.0f", k, v))
		}
	}
	sort.Strings(parts)
	return total, strings.Join(parts, " ")
}

// histogramQuantile estimates a quantile of a histogram's observations made
// between base and m (base may be nil), interpolating within buckets.
func (m metrics) histogramQuantile(name string, q float64, base metrics) float64 {
	type bucket struct{ le, n float64 }
	counts := map[float64]float64{}
	add := func(ms metrics, sign float64) {
		for _, s := range ms[name+"_bucket"] {
			le, err := strconv.ParseFloat(s.labels["le"], 64)
			if err != nil {
				continue
			}
			counts[le] += sign * s.value
		}
	}
	add(m, 1)
	if base != nil {
		add(base, -1)
	}
	var bs []bucket
	for le, n := range counts {
		bs = append(bs, bucket{le, n})
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	if len(bs) == 0 || bs[len(bs)-1].n == 0 {
		return -1
	}
	rank := q * bs[len(bs)-1].n
	prevLe, prevN := 0.0, 0.0
	for _, b := range bs {
		if b.n >= rank {
			if b.le > 1e300 { // +Inf
				return prevLe
			}
			if b.n == prevN {
				return b.le
			}
			return prevLe + (b.le-prevLe)*(rank-prevN)/(b.n-prevN)
		}
		prevLe, prevN = b.le, b.n
	}
	return prevLe
}

// delta is the growth of the counter name (all its samples) from base to m;
// base nil counts from the process start.
func (m metrics) delta(name string, base metrics) float64 {
	return m.sum(name, nil) - base.sum(name, nil)
}

// requestCounts are the daemon's hub requests in one phase, by "client/verb"
// of endpoint_aggregator_hub_requests_total (client hub or lease; verb get,
// list, watch, create, update, patch, ...), the verbs it made only.
type requestCounts map[string]int64

// requests counts the hub requests from base to m (base may be nil).
func (m metrics) requests(base metrics) requestCounts {
	const name = "endpoint_aggregator_hub_requests_total"
	counts := map[string]float64{}
	for _, s := range m[name] {
		counts[s.labels["client"]+"/"+s.labels["verb"]] += s.value
	}
	for _, s := range base[name] {
		counts[s.labels["client"]+"/"+s.labels["verb"]] -= s.value
	}
	out := requestCounts{}
	for k, v := range counts {
		if v != 0 {
			out[k] = int64(v)
		}
	}
	return out
}

// verb counts the requests of verb by client ("" for every client).
func (rc requestCounts) verb(client, verb string) int64 {
	var n int64
	for k, v := range rc {
		c, vb, _ := strings.Cut(k, "/")
		if vb == verb && (client == "" || c == client) {
			n += v
		}
	}
	return n
}

// reads summarizes the read requests: "GET 2, LIST 0, WATCH 14", every
// client, and the member Lease client's share if it read at all.
func (rc requestCounts) reads() string {
	s := fmt.Sprintf("GET %d, LIST %d, WATCH %d", rc.verb("", "get"), rc.verb("", "list"), rc.verb("", "watch"))
	if g, l, w := rc.verb("lease", "get"), rc.verb("lease", "list"), rc.verb("lease", "watch"); g+l+w > 0 {
		s += fmt.Sprintf(" (Lease client: GET %d, LIST %d, WATCH %d)", g, l, w)
	}
	return s
}

// gcCPU returns the runtime's estimates of the CPU-seconds its GC used
// from base to m, and of all the CPU it used (its total, GOMAXPROCS × wall
// time, less idle): runtime/metrics /cpu/classes/gc/total, /cpu/classes/total
// and /cpu/classes/idle. It returns -1, -1 when the daemon does not export
// them.
func (m metrics) gcCPU(base metrics) (gc, used float64) {
	const gcName, totalName, idleName = "go_cpu_classes_gc_total_cpu_seconds_total",
		"go_cpu_classes_total_cpu_seconds_total", "go_cpu_classes_idle_cpu_seconds_total"
	if len(m[gcName]) == 0 || len(m[totalName]) == 0 || len(m[idleName]) == 0 {
		return -1, -1
	}
	return m.delta(gcName, base), m.delta(totalName, base) - m.delta(idleName, base)
}
