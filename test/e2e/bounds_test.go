package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"

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
