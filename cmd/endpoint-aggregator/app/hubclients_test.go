package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// TestMemberLeaseRenewalDoesNotWaitForTheHubClientsLimiter: with the hub
// client's rate limiter spent (one request of a burst of 1 at 0.01 QPS: the
// next waits 100s), a member Lease renewal through the lease client goes
// through at once, and each client's requests are counted under its name.
func TestMemberLeaseRenewalDoesNotWaitForTheHubClientsLimiter(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"endpoint-aggregator-member-east","namespace":"ea","resourceVersion":"1"}}`))
	}))
	defer srv.Close()
	o := NewOptions()
	o.HubQPS, o.HubBurst = 0.01, 1
	m := easync.NewMetrics(nil)
	hubCfg, leaseCfg, _ := o.hubClientConfigs(&rest.Config{Host: srv.URL}, m)
	hub, err := kubernetes.NewForConfig(hubCfg)
	if err != nil {
		t.Fatal(err)
	}
	leases, err := kubernetes.NewForConfig(leaseCfg)
	if err != nil {
		t.Fatal(err)
	}
	const name = easync.MemberLeasePrefix + "east"
	ctx := t.Context()
	if _, err := hub.CoordinationV1().Leases("ea").Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := hub.CoordinationV1().Leases("ea").Get(short, name, metav1.GetOptions{}); err == nil {
		t.Fatal("the hub client's second request went through: its limiter is not spent")
	}

	start := time.Now()
	api := leases.CoordinationV1().Leases("ea")
	l, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	l.Spec.RenewTime = &now
	if _, err := api.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the renewal took %v behind the hub client's limiter", took)
	}
	for _, c := range []struct {
		client, verb string
		want         float64
	}{
		{easync.ClientHub, "get", 1},
		{easync.ClientHub, "update", 0},
		{easync.ClientLease, "get", 1},
		{easync.ClientLease, "update", 1},
	} {
		if got := testutil.ToFloat64(m.HubRequests.WithLabelValues(c.client, c.verb)); got != c.want {
			t.Errorf("hub_requests_total{client=%q,verb=%q} = %v, want %v", c.client, c.verb, got, c.want)
		}
	}
	if hubCfg.UserAgent != leaseCfg.UserAgent || leaseCfg.QPS != o.MemberLeaseQPS || leaseCfg.Burst != o.MemberLeaseBurst {
		t.Errorf("lease client: user agent %q (hub's %q), QPS %v, burst %d", leaseCfg.UserAgent, hubCfg.UserAgent, leaseCfg.QPS, leaseCfg.Burst)
	}
}
