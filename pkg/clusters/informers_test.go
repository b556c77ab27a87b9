package clusters

import (
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// TestMemberInformerLogsNameTheMember: what a member's informers log, such
// as a list refused with Unauthorized, carries the member's name.
func TestMemberInformerLogsNameTheMember(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	old := memberLogger
	memberLogger = func() logr.Logger {
		return funcr.New(func(prefix, args string) {
			mu.Lock()
			lines = append(lines, prefix+" "+args)
			mu.Unlock()
		}, funcr.Options{})
	}
	defer func() { memberLogger = old }()

	kube := kubefake.NewClientset()
	kube.PrependReactor("list", "services", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewUnauthorized("token revoked")
	})
	s, err := newInformerSet("east", Clients{Kube: kube}, EventHandlers{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.run()
	defer s.shutdown()
	waitUntil(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range lines {
			if strings.Contains(l, "token revoked") && strings.Contains(l, `"cluster"="east"`) {
				return true
			}
		}
		return false
	})
}
