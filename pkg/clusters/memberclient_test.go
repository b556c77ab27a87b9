package clusters

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
)

// TestMemberClientsServeWhatMembersUse builds what a member's informers and
// probe use from the slim client; a call to another group would panic.
func TestMemberClientsServeWhatMembersUse(t *testing.T) {
	c, err := newMemberClients(&rest.Config{Host: "https://127.0.0.1:1"}, true)
	if err != nil {
		t.Fatal(err)
	}
	kf := informers.NewSharedInformerFactory(c.Kube, 0)
	if kf.Core().V1().Services().Informer() == nil || kf.Discovery().V1().EndpointSlices().Informer() == nil {
		t.Fatal("no informer")
	}
	if c.Kube.Discovery().RESTClient() == nil {
		t.Error("the probe's REST client is nil")
	}
	if c.MCS == nil {
		t.Error("no MCS client with ServiceExports watched")
	}
	if got, want := c.Kube.CoreV1().RESTClient().Get().URL().Path, "/api/v1"; got != want {
		t.Errorf("core path %q, want %q", got, want)
	}
	if got, want := c.Kube.DiscoveryV1().RESTClient().Get().URL().Path, "/apis/discovery.k8s.io/v1"; got != want {
		t.Errorf("discovery path %q, want %q", got, want)
	}
}

func TestConfigureMemberCompression(t *testing.T) {
	for _, tc := range []struct {
		daemonDisables, kubeconfigDisables, wantDisabled bool
	}{
		{daemonDisables: false, kubeconfigDisables: false, wantDisabled: false},
		{daemonDisables: false, kubeconfigDisables: true, wantDisabled: true},
		{daemonDisables: true, kubeconfigDisables: false, wantDisabled: true},
	} {
		r := &Registry{opts: Options{DisableCompression: tc.daemonDisables, QPS: 5, Burst: 10, UserAgent: "ua"}}
		cfg := &rest.Config{DisableCompression: tc.kubeconfigDisables}
		r.configure(cfg, "east", nil)
		if cfg.DisableCompression != tc.wantDisabled || cfg.QPS != 5 || cfg.Burst != 10 || cfg.UserAgent != "ua" {
			t.Errorf("daemon disables %v, kubeconfig disables %v: got %+v", tc.daemonDisables, tc.kubeconfigDisables, cfg)
		}
	}
}

// TestMemberClientsAskForProtobufAndTakeJSON: the built-in kinds are asked
// for in protobuf, a server that answers JSON is still understood, and the
// MCS client, whose kinds have no protobuf form, asks for JSON.
func TestMemberClientsAskForProtobufAndTakeJSON(t *testing.T) {
	accepts := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accepts <- r.URL.Path + " " + r.Header.Get("Accept")
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasPrefix(r.URL.Path, "/apis/discovery.k8s.io/"):
			_, _ = w.Write([]byte(`{"kind":"EndpointSliceList","apiVersion":"discovery.k8s.io/v1","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"web-1","namespace":"shop"},"addressType":"IPv4","endpoints":[{"addresses":["10.0.0.1"]}]}]}`))
		default:
			_, _ = w.Write([]byte(`{"kind":"ServiceExportList","apiVersion":"multicluster.x-k8s.io/v1beta1","metadata":{},"items":[]}`))
		}
	}))
	defer srv.Close()
	c, err := newMemberClients(&rest.Config{Host: srv.URL}, true)
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.Kube.DiscoveryV1().EndpointSlices("shop").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("a JSON answer to a protobuf client: %v", err)
	}
	if len(list.Items) != 1 || list.Items[0].Endpoints[0].Addresses[0] != "10.0.0.1" {
		t.Errorf("decoded %+v", list.Items)
	}
	if got := <-accepts; !strings.HasPrefix(got, "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices application/vnd.kubernetes.protobuf,") {
		t.Errorf("the EndpointSlice list asked %q, want protobuf first", got)
	}
	if _, err := c.MCS.MulticlusterV1beta1().ServiceExports("shop").List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := <-accepts; strings.Contains(got, "protobuf") {
		t.Errorf("the ServiceExport list asked %q, want JSON", got)
	}
}
