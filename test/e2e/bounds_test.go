package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// A member past its bounds (--max-member-services, --max-member-endpoints)
// gets its oldest exports imported and the rest refused, each refusal
// counted and said in an Event; the other member is untouched. When the
// member shrinks back, what was refused is imported again.
func TestMemberPastItsBoundsKeepsItsOldestExportsAndSparesTheRest(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	d := e.startDaemon(t, func(o *app.Options) { o.MaxMemberServices, o.MaxMemberEndpoints = 4, 40 })

	for i := range 2 {
		name := fmt.Sprintf("w-%d", i)
		exportService(t, e.west.Client, name)
		applySlices(t, e.west.Client, name, endpointSlice(name, name+"-1", 60+i, 3, true))
	}
	// East exports six services of two endpoints; they rank by creation,
	// then name, so e-0 … e-3 are the oldest four.
	for i := range 6 {
		name := fmt.Sprintf("e-%d", i)
		exportService(t, e.east.Client, name)
		applySlices(t, e.east.Client, name, endpointSlice(name, name+"-1", 70+i, 2, true))
	}
	imported := func(want ...string) {
		t.Helper()
		eventually(t, waitTimeout, func() error {
			var got []string
			for i := range 6 {
				name := fmt.Sprintf("e-%d", i)
				if e.hubState(t, name).total["east"] > 0 {
					got = append(got, name)
				}
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("east's services in the hub: %v, want %v", got, want)
			}
			return nil
		})
	}
	refused := func(want float64) {
		t.Helper()
		eventually(t, waitTimeout, func() error {
			if got := gaugeSum(t, d, "endpoint_aggregator_refused_member_services", map[string]string{"cluster": "east"}); got != want {
				return fmt.Errorf("refused_member_services{cluster=east} = %v, want %v", got, want)
			}
			return nil
		})
	}

	imported("e-0", "e-1", "e-2", "e-3")
	refused(2)
	for i := range 2 {
		waitFor(t, e, fmt.Sprintf("w-%d", i), map[string]int{"west": 3}, map[string]int{"west": 3})
	}
	if got := gaugeSum(t, d, "endpoint_aggregator_refused_member_services", map[string]string{"cluster": "west"}); got != 0 {
		t.Errorf("west has %v refused services, want 0", got)
	}
	eventually(t, waitTimeout, func() error {
		list, err := e.hub.Client.CoreV1().Events(appNamespace).List(t.Context(), metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.kind": "ServiceImport", "involvedObject.name": "e-5", "reason": easync.ReasonExportRefused}.String()})
		if err != nil {
			return err
		}
		for _, ev := range list.Items {
			if strings.Contains(ev.Message, "cluster east exports more than --max-member-services=4") {
				return nil
			}
		}
		return fmt.Errorf("no ExportRefused Event on ServiceImport e-5 naming the bound (%d Events)", len(list.Items))
	})

	// e-1 grows to 40 endpoints: it crosses the endpoint bound, and so do
	// the newer exports; e-0 stays, and west does not notice.
	applySlices(t, e.east.Client, "e-1", endpointSlice("e-1", "e-1-1", 71, 40, true))
	imported("e-0")
	refused(5)
	for i := range 2 {
		waitFor(t, e, fmt.Sprintf("w-%d", i), map[string]int{"west": 3}, map[string]int{"west": 3})
	}

	// It shrinks back: the four oldest are imported again.
	applySlices(t, e.east.Client, "e-1", endpointSlice("e-1", "e-1-1", 71, 2, true))
	imported("e-0", "e-1", "e-2", "e-3")
	refused(2)
}

// A member that holds ten times what the daemon reads of one member
// (--max-member-read-endpoints, then --max-member-read-services) is not
// read past the bound: it is reported OverBounds (metric, Event), its hub
// objects are kept as last seen, and the other member's changes keep
// arriving. Once it is back within its bounds it is read again, and its
// own changes arrive.
func TestMemberPastItsReadBoundsIsNotReadAndSparesTheRest(t *testing.T) {
	t.Parallel()
	const readServices, readEndpoints = 60, 600
	e := startEnv(t)
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	d := e.startDaemon(t, func(o *app.Options) {
		o.MaxMemberReadServices, o.MaxMemberReadEndpoints = readServices, readEndpoints
		o.ProbeInterval = time.Second
	})
	exportService(t, e.west.Client, "shop")
	applySlices(t, e.west.Client, "shop", endpointSlice("shop", "shop-west", 30, 3, true))
	exportService(t, e.east.Client, "shop")
	applySlices(t, e.east.Client, "shop", endpointSlice("shop", "shop-east", 31, 2, true))
	waitFor(t, e, "shop", map[string]int{"west": 3, "east": 2}, map[string]int{"west": 3, "east": 2})

	overBounds := func(want float64) {
		t.Helper()
		eventually(t, waitTimeout, func() error {
			got := gaugeSum(t, d, "endpoint_aggregator_member_cluster_error", map[string]string{"cluster": "west", "reason": "over_bounds"})
			if got != want {
				return fmt.Errorf("member_cluster_error{cluster=west,reason=over_bounds} = %v, want %v", got, want)
			}
			return nil
		})
	}
	// While west is over, east's changes arrive and west's last-seen
	// endpoints stay.
	eastGrows := func(n int) {
		t.Helper()
		applySlices(t, e.east.Client, "shop", endpointSlice("shop", "shop-east", 31, n, true))
		waitFor(t, e, "shop", map[string]int{"west": 3, "east": n}, map[string]int{"west": 3, "east": n})
	}

	// Ten times the endpoints bound, in a Service west does not export.
	flood := make([]*discoveryv1.EndpointSlice, 60)
	for i := range flood {
		flood[i] = endpointSlice("flood", fmt.Sprintf("flood-%d", i), 100+i, 100, true)
	}
	applySlices(t, e.west.Client, "flood", flood...)
	overBounds(1)
	eventually(t, waitTimeout, func() error {
		list, err := e.hub.Client.CoreV1().Events(daemonNamespace).List(t.Context(), metav1.ListOptions{
			FieldSelector: fields.Set{"reason": "MemberOverBounds"}.String()})
		if err != nil {
			return err
		}
		for _, ev := range list.Items {
			if strings.Contains(ev.Message, "--max-member-read-endpoints=600") {
				return nil
			}
		}
		return fmt.Errorf("no MemberOverBounds Event naming --max-member-read-endpoints=600 (%d Events)", len(list.Items))
	})
	eastGrows(4)
	applySlices(t, e.west.Client, "flood")
	overBounds(0)
	applySlices(t, e.west.Client, "shop", endpointSlice("shop", "shop-west", 30, 5, true))
	waitFor(t, e, "shop", map[string]int{"west": 5, "east": 4}, map[string]int{"west": 5, "east": 4})
	applySlices(t, e.west.Client, "shop", endpointSlice("shop", "shop-west", 30, 3, true))

	// Ten times the Services bound, none exported.
	svcs := e.west.Client.CoreV1().Services(appNamespace)
	for i := range 10 * readServices {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: fmt.Sprintf("flood-%d", i)},
			Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Port: 80}}},
		}
		if _, err := svcs.Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	overBounds(1)
	eastGrows(6)
	for i := range 10 * readServices {
		if err := svcs.Delete(t.Context(), fmt.Sprintf("flood-%d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	overBounds(0)
	applySlices(t, e.west.Client, "shop", endpointSlice("shop", "shop-west", 30, 7, true))
	waitFor(t, e, "shop", map[string]int{"west": 7, "east": 6}, map[string]int{"west": 7, "east": 6})
}
