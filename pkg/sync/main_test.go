package sync

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	// The mcs-api fake clientset predates streaming lists: it never sends the
	// initial-events bookmark, so informers on it must use plain list+watch.
	_ = os.Setenv("KUBE_FEATURE_WatchListClient", "false")
	os.Exit(m.Run())
}
