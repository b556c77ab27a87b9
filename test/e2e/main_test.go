package e2e

import (
	"flag"
	"os"
	"testing"

	"k8s.io/klog/v2"
)

// TestMain exposes klog's flags, so `go test ./test/e2e -args -v=2` shows
// the daemon's detailed logs.
func TestMain(m *testing.M) {
	klog.InitFlags(nil)
	flag.Parse()
	os.Exit(m.Run())
}
