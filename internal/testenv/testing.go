package testenv

import (
	"testing"
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
