// Package node holds the tests that run on clusters with real nodes
// (`make test-node`): kubelets and containerd run real pods, kube-proxy
// programs Services, traffic flows. They need root; without it they skip
// and say so.
package node

import (
	"fmt"
	"os"
	"testing"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 {
		// What a crashed or killed earlier run left.
		testenv.CleanStaleNodes()
	} else {
		fmt.Fprintln(os.Stderr, "test/node: not root: the real-node tests skip (they create network namespaces and links and run containers)")
	}
	code := m.Run()
	testenv.RemoveTestImages()
	os.Exit(code)
}
