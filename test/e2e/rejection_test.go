package e2e

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// TestBadInputIsReportedAndLosesNothing registers a member with a malformed
// kubeconfig next to a good one, and puts a user's own Service where the
// daemon would write a per-cluster one.
func TestBadInputIsReportedAndLosesNothing(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()

	foreign := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: "cart-east", Labels: map[string]string{"team": "payments"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443}}},
	}
	foreign, err := e.hub.Client.CoreV1().Services(appNamespace).Create(ctx, foreign, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "broken", "west", []byte("apiVersion: v1\nkind: Config\nclusters: [this is not a kubeconfig"))
	d := e.startDaemon(t, nil)

	exportService(t, e.east.Client, "cart")
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-east-1", 1, 3, true))
	exportService(t, e.west.Client, "cart")

	t.Run("a malformed kubeconfig gets an Event and the other member keeps syncing", func(t *testing.T) {
		eventually(t, waitTimeout, func() error {
			ev := secretEvents(t, e, "broken")
			if !strings.Contains(ev, clusters.ReasonInvalidConfig) {
				return fmt.Errorf("no %s Event on the Secret; events: %q", clusters.ReasonInvalidConfig, ev)
			}
			return nil
		})
		waitFor(t, e, "cart", map[string]int{"east": 3}, map[string]int{"east": 3})
		if !d.Ready() {
			t.Error("daemon not ready with one good member and one rejected Secret")
		}
		// A change in the good member still flows.
		applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-east-1", 1, 7, true))
		waitFor(t, e, "cart", map[string]int{"east": 7}, map[string]int{"east": 7})
	})

	t.Run("a hub Service the daemon does not own is left untouched and reported", func(t *testing.T) {
		eventually(t, waitTimeout, func() error {
			ev := objectEvents(t, e, "Service", "cart-east")
			if !strings.Contains(ev, easync.ReasonNameConflict) {
				return fmt.Errorf("no %s Event on the Service; events: %q", easync.ReasonNameConflict, ev)
			}
			return nil
		})
		live, err := e.hub.Client.CoreV1().Services(appNamespace).Get(ctx, "cart-east", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if live.ResourceVersion != foreign.ResourceVersion || !reflect.DeepEqual(live.Labels, foreign.Labels) {
			t.Errorf("foreign Service was modified: %+v", live.ObjectMeta)
		}
		if n := counterValue(t, d, "endpoint_aggregator_hub_conflicts_total"); n < 1 {
			t.Errorf("hub_conflicts_total = %v, want ≥ 1", n)
		}
		// The rest of the service is aggregated regardless.
		eventually(t, waitTimeout, func() error {
			if st := e.hubState(t, "cart"); st.derived == nil || len(st.importClusters) != 1 {
				return fmt.Errorf("import/derived Service missing despite the conflict: %+v", st)
			}
			return nil
		})
	})
}

func secretEvents(t *testing.T, e *env, name string) string {
	return objectEvents(t, e, "Secret", name)
}

// objectEvents returns "reason: message" lines of the Events about one object
// in the daemon or app namespace.
func objectEvents(t *testing.T, e *env, kind, name string) string {
	t.Helper()
	var out []string
	for _, ns := range []string{daemonNamespace, appNamespace} {
		list, err := e.hub.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.kind": kind, "involvedObject.name": name}.String(),
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range list.Items {
			out = append(out, ev.Reason+": "+ev.Message)
		}
	}
	return strings.Join(out, "\n")
}

// counterValue sums a counter family from the daemon's metrics.
func counterValue(t *testing.T, d *daemon, name string) float64 {
	t.Helper()
	return metricSum(t, d, name, nil)
}

// gaugeValue reads one labelled gauge from the daemon's metrics (0 if absent).
func gaugeValue(t *testing.T, d *daemon, name, label, value string) float64 {
	t.Helper()
	return metricSum(t, d, name, map[string]string{label: value})
}

// gaugeSum sums the series of a gauge family whose labels include labels.
func gaugeSum(t *testing.T, d *daemon, name string, labels map[string]string) float64 {
	t.Helper()
	return metricSum(t, d, name, labels)
}

// metricSum sums the counter or gauge series of a family from the daemon's
// metrics whose labels include labels (0 if none).
func metricSum(t *testing.T, d *daemon, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := d.Gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}
