package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
)

// clusterKubeconfig is a self-contained kubeconfig for one cluster. Every
// cluster's uses the same cluster and user names, as independently made
// kubeconfigs often do, so a naive merge would let the last one win.
func clusterKubeconfig(t *testing.T, name, server, token string) []byte {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["cluster"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: []byte("ca of " + name)}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "admin"}
	kc.CurrentContext = name
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestMergedKubeconfigHasAContextPerClusterWithItsOwnServerAndCredentials(t *testing.T) {
	servers := map[string]string{"hub": "https://127.0.0.1:6001", "east": "https://127.0.0.1:6002", "west": "https://127.0.0.1:6003"}
	var in []namedKubeconfig
	for _, name := range []string{"hub", "east", "west"} {
		in = append(in, namedKubeconfig{name: name, data: clusterKubeconfig(t, name, servers[name], "token-"+name)})
	}
	data, err := mergeKubeconfigs(in)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*mustLoad(t, data), path); err != nil {
		t.Fatal(err)
	}
	kc := mustLoad(t, data)
	if len(kc.Contexts) != 3 {
		t.Errorf("merged kubeconfig has contexts %v, want exactly hub, east and west", sortedKeys(kc.Contexts))
	}
	if kc.CurrentContext != "hub" {
		t.Errorf("current context %q, want hub (the CLI's and kubectl's default)", kc.CurrentContext)
	}
	for name, server := range servers {
		// Resolve each context as the CLI does: --kubeconfig FILE --context NAME.
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: name}).ClientConfig()
		if err != nil {
			t.Errorf("context %s: %v", name, err)
			continue
		}
		if cfg.Host != server {
			t.Errorf("context %s: server %s, want %s", name, cfg.Host, server)
		}
		if cfg.BearerToken != "token-"+name {
			t.Errorf("context %s: token %q, want %q", name, cfg.BearerToken, "token-"+name)
		}
		if string(cfg.CAData) != "ca of "+name {
			t.Errorf("context %s: CA %q, want %q", name, cfg.CAData, "ca of "+name)
		}
	}
}

func TestMergeKubeconfigsRefusesWhatItCannotMerge(t *testing.T) {
	good := clusterKubeconfig(t, "hub", "https://127.0.0.1:6001", "t")
	for _, tc := range []struct {
		name string
		in   []namedKubeconfig
		want string
	}{
		{"nothing", nil, "no kubeconfigs"},
		{"a name twice", []namedKubeconfig{{"hub", good}, {"hub", good}}, `two kubeconfigs named "hub"`},
		{"not a kubeconfig", []namedKubeconfig{{"hub", []byte("{{")}}, "kubeconfig of hub"},
		{"no context", []namedKubeconfig{{"hub", []byte("apiVersion: v1\nkind: Config\n")}}, `no context ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mergeKubeconfigs(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestHintsNameTheMergedKubeconfigAndTheCLICommands(t *testing.T) {
	var b bytes.Buffer
	hints{kubeconfig: "/tmp/demo/kubeconfig", cli: "bin/endpoint-aggregator", kubectl: "kubectl",
		daemonLog: "/tmp/demo/endpoint-aggregator.log", metricsURL: "http://127.0.0.1:1/metrics"}.print(&b)
	out := b.String()
	for _, want := range []string{
		"export KUBECONFIG=/tmp/demo/kubeconfig\n",
		"  bin/endpoint-aggregator status --kubeconfig /tmp/demo/kubeconfig --hub-context hub\n",
		"  bin/endpoint-aggregator explain shop/cart --kubeconfig /tmp/demo/kubeconfig --hub-context hub\n",
		"  kubectl --kubeconfig /tmp/demo/kubeconfig --context hub get serviceimports,svc,endpointslices -n shop\n",
		"  kubectl --kubeconfig /tmp/demo/kubeconfig --context east get svc,endpointslices -n shop\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("hints lack %q:\n%s", want, out)
		}
	}
}

func TestCLIPathIsRelativeToTheRepositoryWhenInsideIt(t *testing.T) {
	sep := string(filepath.Separator)
	for _, tc := range []struct{ binary, dir, want string }{
		{"/repo/bin/endpoint-aggregator", "/repo", "bin" + sep + "endpoint-aggregator"},
		{"/repo/endpoint-aggregator", "/repo", "." + sep + "endpoint-aggregator"},
		{"/elsewhere/endpoint-aggregator", "/repo", "/elsewhere/endpoint-aggregator"},
		{"/repo2/bin/endpoint-aggregator", "/repo", "/repo2/bin/endpoint-aggregator"},
	} {
		if got := cliPath(filepath.FromSlash(tc.binary), filepath.FromSlash(tc.dir)); got != filepath.FromSlash(tc.want) {
			t.Errorf("cliPath(%s, %s) = %s, want %s", tc.binary, tc.dir, got, tc.want)
		}
	}
}

func mustLoad(t *testing.T, data []byte) *clientcmdapi.Config {
	t.Helper()
	kc, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// apiServer is a TLS server that answers a namespace list as an API server
// would, and the kubeconfig of a cluster named name that reaches it.
func apiServer(t *testing.T, name string) (*testenv.Cluster, []byte) {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/namespaces" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"NamespaceList","apiVersion":"v1","metadata":{},"items":[]}`)
	}))
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: srv.URL, CertificateAuthorityData: ca}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = name
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return &testenv.Cluster{Name: name, Config: &rest.Config{Host: srv.URL}}, data
}

func TestCheckContextsReachesEveryClusterThroughTheMergedKubeconfig(t *testing.T) {
	var clusters []*testenv.Cluster
	var in []namedKubeconfig
	for _, name := range []string{"hub", "east", "west"} {
		c, data := apiServer(t, name)
		clusters = append(clusters, c)
		in = append(in, namedKubeconfig{name: name, data: data})
	}
	merged, err := mergeKubeconfigs(in)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, merged, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := checkContexts(context.Background(), path, clusters); err != nil {
		t.Fatalf("checkContexts: %v", err)
	}

	// A context that leads to another cluster's server is caught.
	swapped := []*testenv.Cluster{{Name: "hub", Config: clusters[1].Config}}
	if err := checkContexts(context.Background(), path, swapped); err == nil || !strings.Contains(err.Error(), "context hub: server") {
		t.Errorf("checkContexts with hub's context leading elsewhere: %v, want a server mismatch", err)
	}
}
