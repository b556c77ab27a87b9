package sync

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func TestRequestVerbNamesWhatTheRequestDoes(t *testing.T) {
	cases := []struct {
		method, url, want string
	}{
		{"GET", "/api/v1/namespaces/shop/services/cart", requestGet},
		{"GET", "/api/v1/namespaces/shop/services", requestList},
		{"GET", "/api/v1/services", requestList},
		{"GET", "/api/v1/namespaces", requestList},
		{"GET", "/api/v1/namespaces/shop", requestGet},
		{"GET", "/api/v1/namespaces/shop/services?watch=true&resourceVersion=7", requestWatch},
		{"GET", "/apis/discovery.k8s.io/v1/endpointslices?watch=1", requestWatch},
		{"GET", "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices?labelSelector=a%3Db", requestList},
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/ea/leases/endpoint-aggregator-member-east", requestGet},
		{"GET", "/apis/multicluster.x-k8s.io/v1beta1/serviceimports", requestList},
		{"GET", "/apis/discovery.k8s.io/v1", requestGet},
		{"GET", "/api", requestGet},
		{"GET", "/version", requestGet},
		{"GET", "/k8s/clusters/c-1/api/v1/namespaces/shop/endpoints", requestList},
		{"GET", "/k8s/clusters/c-1/api/v1/namespaces/shop/endpoints/cart", requestGet},
		{"POST", "/api/v1/namespaces/shop/services", requestCreate},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/ea/leases/x", requestUpdate},
		{"PUT", "/apis/multicluster.x-k8s.io/v1alpha1/namespaces/shop/serviceexports/cart/status", requestUpdate},
		{"PATCH", "/api/v1/namespaces/shop/services/cart", requestPatch},
		{"DELETE", "/api/v1/namespaces/shop/endpoints/cart", requestDelete},
		{"DELETE", "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices?labelSelector=a%3Db", requestDeleteCollection},
		{"OPTIONS", "/api/v1/namespaces", requestOther},
	}
	for _, tc := range cases {
		req := httptest.NewRequest(tc.method, tc.url, nil)
		if got := requestVerb(req); got != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.method, tc.url, got, tc.want)
		}
	}
}

// TestHubRequestsCountEachClientsRequestsByVerb: two clients of one
// server, wrapped as hub and lease, count their own requests only.
func TestHubRequestsCountEachClientsRequestsByVerb(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && isCollection(r.URL.Path):
			_, _ = w.Write([]byte(`{"kind":"LeaseList","apiVersion":"coordination.k8s.io/v1","items":[]}`))
		default:
			_, _ = w.Write([]byte(`{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"x","namespace":"ea"}}`))
		}
	}))
	defer srv.Close()
	m := NewMetrics(nil)
	client := func(name string) kubernetes.Interface {
		cfg := &rest.Config{Host: srv.URL}
		cfg.Wrap(m.CountRequests(name))
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	hub, lease := client(ClientHub), client(ClientLease)
	ctx := t.Context()
	if _, err := hub.CoordinationV1().Leases("ea").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	leases := lease.CoordinationV1().Leases("ea")
	if _, err := leases.Get(ctx, "x", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := leases.Get(ctx, "x", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := map[[2]string]float64{
		{ClientHub, requestList}:     1,
		{ClientLease, requestGet}:    2,
		{ClientLease, requestUpdate}: 1,
	}
	for _, c := range []string{ClientHub, ClientLease} {
		for _, v := range requestVerbs {
			if got := testutil.ToFloat64(m.HubRequests.WithLabelValues(c, v)); got != want[[2]string{c, v}] {
				t.Errorf("hub_requests_total{client=%q,verb=%q} = %v, want %v", c, v, got, want[[2]string{c, v}])
			}
		}
	}
}
