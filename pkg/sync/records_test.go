package sync

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

// An export record that cannot be read queues its member's key, whose sync
// rewrites it, and is counted; the merge waits for it and then merges.
func TestUnreadableRecordQueuesItsMemberAndIsCounted(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil)
	f.exportedCart("c1")
	f.breakRecord(sliceName(0))
	for f.ctrl.queue.wq.Len() > 0 { // the edit's events
		k, _ := f.ctrl.queue.wq.Get()
		f.ctrl.queue.wq.Done(k)
	}
	f.sync(cartC1.ClusterSet())
	if got := counterValue(t, f.ctrl.metrics.UnreadableRecords); got != 1 {
		t.Errorf("unreadable records counted %v, want 1", got)
	}
	if f.ctrl.queue.wq.Len() == 0 {
		t.Fatal("the merge that found an unreadable record queued nothing")
	}
	if k, _ := f.ctrl.queue.wq.Get(); k != cartC1 {
		t.Fatalf("queued %v, want the member key %v", k, cartC1)
	}
	f.sync(cartC1) // rewrites the record
	f.sync(cartC1.ClusterSet())
	if got := f.importClusters(); len(got) != 1 || got[0] != "c1" {
		t.Fatalf("import clusters %v, want c1", got)
	}
}

// breakRecord replaces the export record on a hub slice with one that does
// not parse, as an older version or a person might leave it.
func (f *fixture) breakRecord(slice string) {
	f.t.Helper()
	s, err := f.hub.DiscoveryV1().EndpointSlices("shop").Get(f.ctx, slice, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	s.Annotations[endpoints.AnnotationExportRecord] = "{not json"
	if _, err := f.hub.DiscoveryV1().EndpointSlices("shop").Update(f.ctx, s, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.settle()
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// An unreadable record of a member that cannot rewrite it now (not
// connected) does not freeze the merge of the others.
func TestUnreadableRecordOfAnUnconnectedMemberDoesNotFreezeTheMerge(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil)
	f.exportedCart("c1")
	f.sync(cartC1.ClusterSet())
	f.breakRecord(sliceName(0))
	f.disconnect("c1", time.Now())
	f.ctrl.ClusterHealthChanged("c1", false)
	c2 := f.member("c2")
	_ = c2.services.Add(service("shop", "cart"))
	c2.slices = []*discoveryv1.EndpointSlice{memberSlice("shop", "cart", "cart-c2", 10, 1, true)}
	f.ctrl.queue.add(Key{Cluster: "c2", Namespace: "shop", Name: "cart"}, aChange)
	f.drain()
	if got := f.importClusters(); !slices.Contains(got, "c2") {
		t.Fatalf("import clusters %v: c2 never merged while c1 cannot rewrite its record", got)
	}
}

// On the merging replica, a member another replica owns has no connection
// here (Registered, not owned). Its holder rewrites an unreadable record of
// it; meanwhile the merge counts the member as the hub holds it and never
// drops it from the import.
func TestUnreadableRecordOfAMemberOwnedElsewhereIsNotDropped(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil)
	f.exportedCart("c1")
	c2 := f.exportedCart("c2")
	f.sync(cartC1.ClusterSet())
	if got := f.importClusters(); !slices.Equal(got, []string{"c1", "c2"}) {
		t.Fatalf("import clusters %v, want [c1 c2]", got)
	}
	f.breakRecord(endpoints.SliceName("shop", "cart", "c2", 0))
	c2.elsewhere, c2.synced, c2.phase = true, false, lifecycle.Registered
	f.drainQueue()
	f.resetActions()
	f.sync(cartC1.ClusterSet())
	if got := f.importClusters(); !slices.Equal(got, []string{"c1", "c2"}) {
		t.Fatalf("import clusters %v after the merge, want [c1 c2]: c2, owned by another replica, was dropped for a record its holder rewrites", got)
	}
	if w := f.writes(); len(w) != 0 {
		t.Errorf("the merge wrote %q while c2's record waits for its holder", w)
	}
}
