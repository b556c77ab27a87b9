package app

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/daemonconfig"
)

// A failed publication is retried until it lands; the daemon does not give
// up on it, nor wait for it.
func TestPublishConfigRetriesUntilWritten(t *testing.T) {
	hub := fake.NewClientset()
	failures := 1
	hub.PrependReactor("create", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures > 0 {
			failures--
			return true, nil, errors.New("hub unavailable")
		}
		return false, nil, nil
	})
	d := &Daemon{opts: NewOptions(), hub: hub}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d.publishConfig(ctx)
	if failures != 0 {
		t.Fatal("the failing create was never tried")
	}
	if ctx.Err() != nil {
		t.Fatal("publishConfig returned only when its context ended")
	}
	cm, err := hub.CoreV1().ConfigMaps(d.opts.Namespace).Get(ctx, daemonconfig.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the configuration was not published: %v", err)
	}
	if got := cm.Data["export-mode"]; got != d.opts.ExportMode {
		t.Errorf("published export-mode %q, want %q", got, d.opts.ExportMode)
	}
}
