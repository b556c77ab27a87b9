package clusters

import (
	"testing"

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
