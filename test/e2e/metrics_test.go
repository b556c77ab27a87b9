package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
)

// TestMetricsAndProbesAreServed scrapes the daemon's HTTP endpoint after a
// scenario and checks the counters and the propagation histogram moved.
func TestMetricsAndProbesAreServed(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	addr := freeLoopbackAddr(t)
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	e.startDaemon(t, func(o *app.Options) { o.MetricsBindAddress = addr })

	eventually(t, waitTimeout, func() error {
		if code := get(t, addr, "/healthz"); code != http.StatusOK {
			return fmt.Errorf("/healthz answered %d", code)
		}
		if code := get(t, addr, "/readyz"); code != http.StatusOK {
			return fmt.Errorf("/readyz answered %d", code)
		}
		return nil
	})

	exportService(t, e.east.Client, "cart")
	exportService(t, e.west.Client, "cart")
	// As the member's EndpointSlice controller does, stamp when the change
	// was triggered; the daemon measures propagation from it.
	for i, member := range []kubernetes.Interface{e.east.Client, e.west.Client} {
		s := endpointSlice("cart", "cart-1", 1+i, 3, true)
		s.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().UTC().Format(time.RFC3339Nano)}
		applySlices(t, member, "cart", s)
	}
	waitFor(t, e, "cart", map[string]int{"east": 3, "west": 3}, map[string]int{"east": 3, "west": 3})

	eventually(t, waitTimeout, func() error {
		m := scrape(t, addr)
		checks := []struct {
			series string
			min    float64
		}{
			{`endpoint_aggregator_hub_writes_total{resource="endpointslices",result="success",verb="create"}`, 2},
			{`endpoint_aggregator_hub_writes_total{resource="serviceimports",result="success",verb="create"}`, 1},
			{`endpoint_aggregator_syncs_total{result="success"}`, 1},
			{`endpoint_aggregator_endpoint_propagation_seconds_count`, 2},
			{`endpoint_aggregator_member_clusters{state="synced"}`, 2},
			{`endpoint_aggregator_cluster_endpoints{cluster="east"}`, 3},
			{`endpoint_aggregator_workqueue_adds_total{name="endpoint_aggregator"}`, 1},
		}
		for _, c := range checks {
			v, ok := m[c.series]
			if !ok || v < c.min {
				return fmt.Errorf("%s = %v (present %v), want ≥ %v", c.series, v, ok, c.min)
			}
		}
		// Propagation on loopback takes well under the histogram's top bucket.
		if m[`endpoint_aggregator_endpoint_propagation_seconds_bucket{le="+Inf"}`] != m[`endpoint_aggregator_endpoint_propagation_seconds_count`] {
			return fmt.Errorf("propagation histogram is inconsistent")
		}
		return nil
	})
}

func get(t *testing.T, addr, path string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// scrape returns every sample of /metrics keyed by its series text, e.g.
// `name{label="value"}`, labels in the order the exposition prints them.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndex(line, " ")
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}
