package sync

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/addresses"
)

func serviceCIDR(name string, cidrs ...string) *networkingv1.ServiceCIDR {
	return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
}

// hubAddresses lists the addresses of the hub's MCS slices and per-cluster
// Endpoints of shop/cart from cluster c1, sorted.
func hubAddresses(f *fixture) (slicesOut, endpointsOut []string) {
	f.t.Helper()
	list, err := f.hub.DiscoveryV1().EndpointSlices("shop").List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, s := range list.Items {
		for _, ep := range s.Endpoints {
			slicesOut = append(slicesOut, ep.Addresses...)
		}
	}
	if eps, err := f.hub.CoreV1().Endpoints("shop").Get(f.ctx, "cart-c1", metav1.GetOptions{}); err == nil {
		for _, ss := range eps.Subsets {
			for _, a := range append(ss.Addresses, ss.NotReadyAddresses...) {
				endpointsOut = append(endpointsOut, a.IP)
			}
		}
	}
	slices.Sort(slicesOut)
	slices.Sort(endpointsOut)
	return slicesOut, endpointsOut
}

func addressedSlice(addrs ...string) *discoveryv1.EndpointSlice {
	s := memberSlice("shop", "cart", "cart-abc", 0, 0, true)
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

func refusedGauge(t *testing.T, reg *prometheus.Registry, cluster string, reason addresses.Reason) float64 {
	t.Helper()
	return gathered(t, reg, "endpoint_aggregator_refused_member_endpoints", "cluster", cluster, "reason", reason.String())
}

// gathered reads the gauge or counter name with the label values kv (name,
// value, ...) from reg; -1 when there is no such series.
func gathered(t *testing.T, reg *prometheus.Registry, name string, kv ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(kv); i += 2 {
				if labels[kv[i]] != kv[i+1] {
					continue series
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// eventsWith returns the events that contain s.
func eventsWith(events []string, s string) []string {
	var out []string
	for _, e := range events {
		if strings.Contains(e, s) {
			out = append(out, e)
		}
	}
	return out
}

func drainEvents(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// The daemon refuses, itself, member endpoints that must never become hub
// routing: the hub's own ClusterIPs (from its ServiceCIDRs, as they change)
// and special addresses. The rest of the slice arrives; the gauge counts
// what is refused by reason; an Event says it when it changes.
func TestSyncRefusesSpecialAndHubServiceAddresses(t *testing.T) {
	rec := record.NewFakeRecorder(20)
	reg := prometheus.NewRegistry()
	f := newFixture(t, Options{WatchServiceCIDRs: true, Recorder: rec, Metrics: NewMetrics(reg),
		Addresses: addresses.Policy{Denied: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}}},
		[]runtime.Object{serviceCIDR("kubernetes", "10.96.0.0/12")}, nil)
	reg.MustRegister(f.ctrl)
	m := f.member("c1")
	_ = m.services.Add(service("shop", "cart"))
	m.slices = []*discoveryv1.EndpointSlice{addressedSlice("10.1.0.1", "10.96.0.1", "127.0.0.1", "255.255.255.255", "10.9.0.5", "10.1.0.2")}

	f.sync(cartC1)
	gotSlices, gotEndpoints := hubAddresses(f)
	want := []string{"10.1.0.1", "10.1.0.2"}
	if !slices.Equal(gotSlices, want) || !slices.Equal(gotEndpoints, want) {
		t.Fatalf("hub holds slices %v, Endpoints %v; want %v in both", gotSlices, gotEndpoints, want)
	}
	for reason, n := range map[addresses.Reason]float64{addresses.HubServiceRange: 1, addresses.Special: 2, addresses.DeniedRange: 1, addresses.NotAllowedRange: 0} {
		if got := refusedGauge(t, reg, "c1", reason); got != n {
			t.Errorf("refused_member_endpoints{reason=%s} = %v, want %v", reason, got, n)
		}
	}
	events := drainEvents(rec)
	if len(events) != 1 || !strings.Contains(events[0], ReasonEndpointsRefused) || !strings.Contains(events[0], "10.96.0.1 (inside the hub's Service range 10.96.0.0/12)") {
		t.Fatalf("events %q, want one EndpointsRefused naming 10.96.0.1 and the hub's range", events)
	}

	// Nothing changed: no Event again.
	f.sync(cartC1)
	if events := drainEvents(rec); len(events) != 0 {
		t.Errorf("an unchanged sync recorded %q", events)
	}

	// The hub's Service ranges grow: the member is resynced, and what is
	// now a hub ClusterIP goes.
	if _, err := f.hub.NetworkingV1().ServiceCIDRs().Create(f.ctx, serviceCIDR("extra", "10.1.0.0/31"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for f.ctrl.queue.wq.Len() > 0 { // what the syncs above queued
		k, _ := f.ctrl.queue.wq.Get()
		f.ctrl.queue.wq.Done(k)
	}
	if _, err := f.hub.NetworkingV1().ServiceCIDRs().Create(f.ctx, serviceCIDR("extra2", "10.200.0.0/16"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	queued := false
	for deadline := time.Now().Add(5 * time.Second); !queued && time.Now().Before(deadline); {
		if f.ctrl.queue.wq.Len() == 0 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		k, _ := f.ctrl.queue.wq.Get()
		f.ctrl.queue.wq.Done(k)
		queued = k == cartC1
	}
	if !queued {
		t.Fatal("a ServiceCIDR change did not queue the member's key")
	}
	f.sync(cartC1)
	if gotSlices, _ := hubAddresses(f); !slices.Equal(gotSlices, []string{"10.1.0.2"}) {
		t.Errorf("after the hub's ranges grew, slices hold %v, want [10.1.0.2]", gotSlices)
	}
	if got := refusedGauge(t, reg, "c1", addresses.HubServiceRange); got != 2 {
		t.Errorf("refused hub_service_range = %v, want 2", got)
	}

	// The member mends its ways: the series go, and an Event says so.
	m.slices = []*discoveryv1.EndpointSlice{addressedSlice("10.2.0.1")}
	drainEvents(rec)
	f.sync(cartC1)
	if got := refusedGauge(t, reg, "c1", addresses.Special); got != -1 {
		t.Errorf("refused series left after nothing is refused: %v", got)
	}
	if events := drainEvents(rec); len(events) != 1 || !strings.Contains(events[0], ReasonEndpointsAccepted) {
		t.Errorf("events %q, want one EndpointsAccepted", events)
	}
	if n := testutil.CollectAndCount(f.ctrl, "endpoint_aggregator_refused_member_endpoints"); n != 0 {
		t.Errorf("%d refused series left", n)
	}
}

// A registration pins its member to its own ranges, within the daemon's.
func TestSyncHoldsAMemberToItsRegistrationsRanges(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFixture(t, Options{Metrics: NewMetrics(reg), Addresses: addresses.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}}, nil, nil)
	reg.MustRegister(f.ctrl)
	m := f.member("c1")
	m.allowed = []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("192.168.0.0/16")}
	_ = m.services.Add(service("shop", "cart"))
	m.slices = []*discoveryv1.EndpointSlice{addressedSlice("10.1.0.1", "10.2.0.1", "192.168.0.1")}

	f.sync(cartC1)
	if got, _ := hubAddresses(f); !slices.Equal(got, []string{"10.1.0.1"}) {
		t.Errorf("hub slices hold %v, want only 10.1.0.1 (inside both lists)", got)
	}
	if got := refusedGauge(t, reg, "c1", addresses.NotAllowedRange); got != 2 {
		t.Errorf("refused not_allowed_range = %v, want 2", got)
	}
}

// A member Service with ports the hub would refuse is imported without
// them, and an Event says so once, not at every sync.
func TestSyncDropsAMembersInvalidPortsAndSaysSoOnce(t *testing.T) {
	rec := record.NewFakeRecorder(20)
	f := newFixture(t, Options{Recorder: rec}, nil, nil)
	m := f.member("c1")
	svc := service("shop", "cart")
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "Bad_Name", Port: 81}, corev1.ServicePort{Name: "zero", Port: 0})
	_ = m.services.Add(svc)
	m.slices = []*discoveryv1.EndpointSlice{addressedSlice("10.1.0.1")}

	f.sync(cartC1)
	f.sync(cartC1.ClusterSet())
	imp, err := f.hubMCS.MulticlusterV1beta1().ServiceImports("shop").Get(f.ctx, "cart", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(imp.Spec.Ports) != 1 || imp.Spec.Ports[0].Name != "http" {
		t.Errorf("import ports %+v, want http only", imp.Spec.Ports)
	}
	if pc, err := f.hub.CoreV1().Services("shop").Get(f.ctx, "cart-c1", metav1.GetOptions{}); err != nil || len(pc.Spec.Ports) != 1 {
		t.Errorf("per-cluster Service %v, %v; want one port", pc, err)
	}
	invalid := eventsWith(drainEvents(rec), ReasonInvalidExport)
	if len(invalid) != 1 || !strings.Contains(invalid[0], "Bad_Name") || !strings.Contains(invalid[0], "port number out of range") {
		t.Fatalf("InvalidExport Events %q, want one naming both ports", invalid)
	}
	f.sync(cartC1)
	if events := drainEvents(rec); slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, ReasonInvalidExport) }) {
		t.Errorf("an unchanged sync said it again: %q", events)
	}
}
