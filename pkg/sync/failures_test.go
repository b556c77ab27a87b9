package sync

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
)

// A key's failure is said loud when new, when its message changes, and
// again after failureRepeat; a sync that succeeds resets it.
func TestFailuresAreSaidLoudOncePerCause(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newFailureLog(func() time.Time { return now })
	k := Key{Cluster: "c1", Namespace: "shop", Name: "cart"}
	refused := errors.New(`EndpointSlice "x" is invalid: metadata.annotations: Too long`)
	steps := []struct {
		advance time.Duration
		err     error
		forget  bool
		loud    bool
	}{
		{0, refused, false, true},
		{time.Second, refused, false, false},
		{time.Minute, refused, false, false},
		{0, errors.New("conflict"), false, true},
		{0, refused, false, true},
		{failureRepeat, refused, false, true},
		{time.Second, refused, true, true}, // synced in between: new again
	}
	for i, s := range steps {
		now = now.Add(s.advance)
		if s.forget {
			l.forget(k)
		}
		if got := l.loud(k, s.err); got != s.loud {
			t.Errorf("step %d (%v): loud %v, want %v", i, s.err, got, s.loud)
		}
	}
	if l.loud(Key{Cluster: "c2", Namespace: "shop", Name: "cart"}, refused) != true {
		t.Error("another key's first failure was not said")
	}
}

// A write the hub refuses is never silent: the failing sync raises one
// SyncFailed Event with the hub's answer on the service's ServiceImport,
// counts in hub_write_refusals_total by resource, verb and reason, and once
// the hub accepts the write a SyncRecovered Event follows.
func TestAWriteTheHubRefusesIsSaidOnceWithTheHubsAnswer(t *testing.T) {
	rec := record.NewFakeRecorder(50)
	reg := prometheus.NewRegistry()
	f := newFixture(t, Options{Recorder: rec, Metrics: NewMetrics(reg)}, nil, nil)
	m := f.member("c1")
	_ = m.services.Add(service("shop", "cart"))
	m.slices = []*discoveryv1.EndpointSlice{addressedSlice("10.1.0.1")}
	refuse := true
	f.hub.PrependReactor("create", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !refuse {
			return false, nil, nil
		}
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: "discovery.k8s.io", Kind: "EndpointSlice"}, "x",
			field.ErrorList{field.TooLong(field.NewPath("metadata", "annotations"), "", 262144)})
	})
	f.ctrl.queue.wq.Add(cartC1)
	for range 3 {
		f.ctrl.processNext(f.ctx)
		f.ctrl.queue.wq.Forget(cartC1) // no backoff: the next round is at once
		if f.ctrl.queue.wq.Len() == 0 {
			f.ctrl.queue.wq.Add(cartC1)
		}
	}
	failed := eventsWith(drainEvents(rec), ReasonSyncFailed)
	if len(failed) != 1 || !strings.Contains(failed[0], "cluster c1: writing its hub objects of shop/cart fails") || !strings.Contains(failed[0], "Too long") {
		t.Errorf("SyncFailed Events %q, want one with the hub's answer", failed)
	}
	if n := gathered(t, reg, "endpoint_aggregator_hub_write_refusals_total", "reason", "Invalid"); n < 2 {
		t.Errorf("hub_write_refusals_total{reason=Invalid} = %v, want at least 2 (one per failed sync)", n)
	}
	refuse = false
	f.drain()
	if events := drainEvents(rec); !slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, ReasonSyncRecovered) }) {
		t.Errorf("no SyncRecovered Event after the hub accepted the write: %q", events)
	}
}
