package sync

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
)

// perMemberGauges are the series a replica publishes of each member.
var perMemberGauges = []string{
	"endpoint_aggregator_cluster_endpoints",
	"endpoint_aggregator_cluster_services",
	"endpoint_aggregator_refused_member_endpoints",
	"endpoint_aggregator_refused_member_services",
}

// boundedMember gives a fixture with opts, bounded to two services per member, a
// member m1 exporting shop/cart (oldest; one endpoint refused, one port
// invalid), shop/web and shop/api (newest, refused past the bound), all
// synced into the hub.
func boundedMember(t *testing.T, opts Options) (*fixture, *fakeMember, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts.Recorder, opts.Metrics, opts.MaxMemberServices = record.NewFakeRecorder(100), NewMetrics(reg), 2
	f := newFixture(t, opts, nil, nil)
	reg.MustRegister(f.ctrl)
	m := f.member("m1")
	for i, name := range []string{"cart", "web", "api"} {
		svc := service("shop", name)
		svc.CreationTimestamp = metav1.NewTime(time.Unix(int64(1000+i), 0))
		if name == "cart" {
			svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "Bad_Name", Port: 81})
		}
		_ = m.services.Add(svc)
	}
	m.slices = []*discoveryv1.EndpointSlice{
		addressedSlice("10.1.0.1", "127.0.0.1"),
		memberSlice("shop", "web", "web-x", 100, 2, true),
		memberSlice("shop", "api", "api-x", 200, 2, true),
	}
	for _, name := range []string{"cart", "web", "api"} {
		f.sync(Key{Cluster: "m1", Namespace: "shop", Name: name})
	}
	f.drain()
	for name, want := range map[string]float64{
		"endpoint_aggregator_cluster_endpoints":        3,
		"endpoint_aggregator_cluster_services":         2,
		"endpoint_aggregator_refused_member_services":  1,
		"endpoint_aggregator_refused_member_endpoints": 0, // the first reason's series
	} {
		if got := gathered(t, reg, name, "cluster", "m1"); got != want && !(want == 0 && got >= 0) {
			t.Fatalf("%s{cluster=m1} = %v while owned, want %v", name, got, want)
		}
	}
	if got := importedServices(f)["m1"]; !slices.Equal(got, []string{"cart", "web"}) {
		t.Fatalf("m1 imported %v, want [cart web]", got)
	}
	return f, m, reg
}

// noMemberSeries fails for each per-member series reg still has of cluster.
func noMemberSeries(t *testing.T, reg *prometheus.Registry, cluster, when string) {
	t.Helper()
	for _, name := range perMemberGauges {
		if got := gathered(t, reg, name, "cluster", cluster); got != -1 {
			t.Errorf("%s, %s{cluster=%s} = %v, want no series", when, name, cluster, got)
		}
	}
}

// A replica that stops owning a member reports nothing of it, and keeps
// nothing of it: owned again, it judges the member's exports as they are.
func TestLosingAMemberDropsItsState(t *testing.T) {
	f, m, reg := boundedMember(t, Options{})

	m.elsewhere = true
	f.ctrl.OwnershipChanged("m1")
	f.drain()
	noMemberSeries(t, reg, "m1", "after the member went to another replica")
	if f.ctrl.state.has("m1") {
		t.Errorf("after the member went to another replica, the replica keeps %v of it", f.ctrl.state.keys("m1"))
	}

	// Meanwhile the member unexports cart and its owner withdraws it.
	_ = m.services.Delete(service("shop", "cart"))
	m.slices = m.slices[1:]
	f.withdrawHubObjects(Key{Cluster: "m1", Namespace: "shop", Name: "cart"})
	f.drain()

	m.elsewhere = false
	f.ctrl.OwnershipChanged("m1")
	f.drain()
	if got := importedServices(f)["m1"]; !slices.Equal(got, []string{"api", "web"}) {
		t.Errorf("owned again, m1 imported %v, want [api web]: two exports are within its bound", got)
	}
	if got := gathered(t, reg, "endpoint_aggregator_refused_member_services", "cluster", "m1"); got != 0 {
		t.Errorf("owned again, refused_member_services{m1} = %v, want 0", got)
	}
}

// A member unregistered leaves no series and no state behind, whether
// this replica withdraws its objects (it merges) or not.
func TestARemovedMemberLeavesNoState(t *testing.T) {
	for _, merging := range []bool{true, false} {
		t.Run(fmt.Sprint("merging=", merging), func(t *testing.T) {
			f, _, reg := boundedMember(t, Options{Sharding: &mergingSwitch{on: merging}})
			delete(f.members.members, "m1")
			f.ctrl.ClusterRemoved("m1")
			f.drain()
			noMemberSeries(t, reg, "m1", "after the member was removed")
			if f.ctrl.state.has("m1") {
				t.Errorf("after the member was removed, the replica keeps %v of it", f.ctrl.state.keys("m1"))
			}
		})
	}
}

// withdrawHubObjects deletes the per-cluster objects and MCS slices of a
// member key from the hub, as the replica owning it would.
func (f *fixture) withdrawHubObjects(key Key) {
	f.t.Helper()
	name := key.Name + "-" + key.Cluster
	_ = f.hub.CoreV1().Services(key.Namespace).Delete(f.ctx, name, metav1.DeleteOptions{})
	_ = f.hub.CoreV1().Endpoints(key.Namespace).Delete(f.ctx, name, metav1.DeleteOptions{})
	list, err := f.hub.DiscoveryV1().EndpointSlices(key.Namespace).List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, s := range list.Items {
		if k, ok := hubKey(&s); ok && k == key {
			_ = f.hub.DiscoveryV1().EndpointSlices(key.Namespace).Delete(f.ctx, s.Name, metav1.DeleteOptions{})
		}
	}
	f.settle()
}

// A replica that takes a member over judges its exports against all of
// them, not against those it has synced so far: synced newest first, the
// export refused past the bound is never imported, nor said admitted.
func TestANewHolderNeverAdmitsARefusedExport(t *testing.T) {
	f, m, _ := boundedMember(t, Options{})
	rec := f.ctrl.recorder.(*record.FakeRecorder)
	m.elsewhere = true
	f.ctrl.OwnershipChanged("m1")
	f.drain()
	drainEvents(rec)

	m.elsewhere = false
	f.resetActions()
	for _, name := range []string{"api", "web", "cart"} {
		f.sync(Key{Cluster: "m1", Namespace: "shop", Name: name})
		if got := importedServices(f)["m1"]; slices.Contains(got, "api") {
			t.Fatalf("after syncing %s, the new holder imports the refused export api: %v", name, got)
		}
	}
	f.ctrl.OwnershipChanged("m1")
	f.drain()
	if got := importedServices(f)["m1"]; !slices.Equal(got, []string{"cart", "web"}) {
		t.Errorf("the new holder imports %v, want [cart web]", got)
	}
	for _, e := range drainEvents(rec) {
		if strings.Contains(e, ReasonExportAdmitted) {
			t.Errorf("the new holder recorded %q", e)
		}
	}
	if w := f.writes(); len(w) != 0 {
		t.Errorf("the new holder wrote %q to a hub already in line", w)
	}
}

// So does a replica whose member comes back after the unreachable policy
// withdrew it.
func TestARecoveredMemberNeverAdmitsARefusedExport(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	f, m, _ := boundedMember(t, Options{UnreachableWithdraw: time.Minute, Clock: asyncClock{clk}})
	m.downSince = clk.Now().Add(-2 * time.Minute)
	f.ctrl.ClusterHealthChanged("m1", false)
	f.drain()
	if got := importedServices(f)["m1"]; len(got) != 0 {
		t.Fatalf("withdrawn, m1 imported %v", got)
	}

	m.downSince = time.Time{}
	f.ctrl.ClusterHealthChanged("m1", true)
	for _, name := range []string{"api", "web", "cart"} {
		f.sync(Key{Cluster: "m1", Namespace: "shop", Name: name})
		if got := importedServices(f)["m1"]; slices.Contains(got, "api") {
			t.Fatalf("after syncing %s, the recovered member imports the refused export api: %v", name, got)
		}
	}
	f.drain()
	if got := importedServices(f)["m1"]; !slices.Equal(got, []string{"cart", "web"}) {
		t.Errorf("recovered, m1 imported %v, want [cart web]", got)
	}
}
