package testenv

import (
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// RequireAssets returns AssetsDir, or fails the test with the reason the
// binaries are missing. It never skips: the binaries can always be built
// (`make tools`), and a skipped end-to-end test would prove nothing.
func RequireAssets(t testing.TB) string {
	t.Helper()
	dir, err := AssetsDir()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return dir
}

// StartT starts a cluster for a test and registers its Stop with t.Cleanup.
// Any error fails the test.
// Like t.Fatal, it must be called from the test's goroutine.
func StartT(t testing.TB, name string, opts Options) *Cluster {
	t.Helper()
	RequireAssets(t)
	c, err := Start(name, opts)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return c
}

// StartAllT is StartAll for a test: the clusters start concurrently, any
// error fails the test, and
// t.Cleanup stops them all.
func StartAllT(t testing.TB, specs ...Spec) []*Cluster {
	t.Helper()
	RequireAssets(t)
	clusters, err := StartAll(specs...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := StopAll(clusters...); err != nil {
			t.Errorf("%v", err)
		}
	})
	return clusters
}

// MergedKubeconfig writes one kubeconfig (in a t.TempDir()) with a context
// per cluster, named like the cluster; the current context is the first's.
func MergedKubeconfig(t testing.TB, cs ...*Cluster) string {
	t.Helper()
	merged := clientcmdapi.NewConfig()
	for _, c := range cs {
		kc, err := clientcmd.Load(c.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := kc.Contexts[c.Name]; !ok {
			t.Fatalf("kubeconfig of %s has no context %s", c.Name, c.Name)
		}
		for k, v := range kc.Clusters {
			merged.Clusters[k] = v
		}
		for k, v := range kc.AuthInfos {
			merged.AuthInfos[k] = v
		}
		for k, v := range kc.Contexts {
			merged.Contexts[k] = v
		}
	}
	merged.CurrentContext = cs[0].Name
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*merged, path); err != nil {
		t.Fatal(err)
	}
	return path
}
