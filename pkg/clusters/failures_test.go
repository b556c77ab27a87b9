package clusters

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

// failingMember is a fake member whose probe (get version) and Service list
// fail with the given errors while fail is set; nil errors succeed.
func failingMember(probeErr, listErr error, fail *atomic.Bool) *kubefake.Clientset {
	kube := kubefake.NewClientset()
	kube.PrependReactor("get", "version", func(k8stesting.Action) (bool, runtime.Object, error) {
		if probeErr != nil && fail.Load() {
			return true, nil, probeErr
		}
		return false, nil, nil
	})
	kube.PrependReactor("list", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		if listErr != nil && fail.Load() {
			return true, nil, listErr
		}
		return false, nil, nil
	})
	return kube
}

// TestRegistryReportsTheCauseOfEachMemberFailure: a member whose token was
// revoked, one whose server refuses connections, and one whose identity
// lost its RBAC (its probe passes, its lists fail) each get an Event whose
// reason names the cause, a sync timeout that says it, a lifecycle Cause,
// and an endpoint_aggregator_member_cluster_error series with the cause; a
// bad Secret counts in endpoint_aggregator_rejected_registrations, and as
// a member failing for an invalid registration. When
// the revoked member answers again its error series goes.
func TestRegistryReportsTheCauseOfEachMemberFailure(t *testing.T) {
	_, refused := net.Dial("tcp", closedAddr(t))
	if refused == nil {
		t.Fatal("dialing a closed port succeeded")
	}
	unauthorized := apierrors.NewUnauthorized("token revoked")
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "", errors.New("no RBAC"))
	var failRevoked, failOthers atomic.Bool
	failRevoked.Store(true)
	failOthers.Store(true)
	members := map[string]*kubefake.Clientset{
		"https://revoked.test": failingMember(unauthorized, unauthorized, &failRevoked),
		"https://refused.test": failingMember(refused, refused, &failOthers),
		"https://rbac.test":    failingMember(nil, forbidden, &failOthers),
	}
	kubeconfig := func(server string) string {
		return strings.Replace(tokenKubeconfig, "https://127.0.0.1:6443", server, 1)
	}
	r, _, _, rec := startRegistryWith(t, Options{
		SyncTimeout:   time.Second,
		ProbeInterval: 20 * time.Millisecond,
		ProbeTimeout:  time.Second,
		NewClients: func(cfg *rest.Config) (Clients, error) {
			return Clients{Kube: members[cfg.Host]}, nil
		},
	},
		secret("revoked", "", kubeconfig("https://revoked.test"), time.Hour),
		secret("refused", "", kubeconfig("https://refused.test"), time.Hour),
		secret("rbac", "", kubeconfig("https://rbac.test"), time.Hour),
		secret("garbage", "", "{not yaml: [", time.Hour),
	)

	var got []string
	wantEvents := []string{
		`Warning MemberUnauthorized member "revoked" is unreachable: Unauthorized`,
		`Warning MemberConnectionRefused member "refused" is unreachable: ConnectionRefused`,
		`Warning MemberForbidden member "rbac" cannot be listed or watched: Forbidden`,
		`Warning MemberSyncTimeout member "revoked" did not sync within 1s (Unauthorized: `,
		`Warning MemberSyncTimeout member "rbac" did not sync within 1s (Forbidden: `,
	}
	waitUntil(t, func() bool {
		got = append(got, events(rec)...)
		all := strings.Join(got, "\n")
		for _, w := range wantEvents {
			if !strings.Contains(all, w) {
				return false
			}
		}
		return true
	})
	for _, e := range got {
		if strings.Contains(e, ReasonUnreachable) {
			t.Errorf("Event %q: a classified failure must not use the unclassified reason", e)
		}
	}
	for cluster, cause := range map[string]ErrorClass{"revoked": ClassUnauthorized, "refused": ClassConnectionRefused, "rbac": ClassForbidden} {
		if st, _ := r.Lookup(cluster); st.Cause != string(cause) {
			t.Errorf("%s: lifecycle Cause %q, want %q (state %+v)", cluster, st.Cause, cause, st)
		}
	}

	const want = `
# HELP endpoint_aggregator_member_cluster_error 1 for each member that fails now, with the cause (unauthorized, forbidden, tls_error, connection_refused, timeout, dns_error, not_api_server, resource_not_found, unhealthy, invalid_registration, identity_mismatch, over_bounds, other): why its health probe fails, or why its informers cannot list or watch. No series while it does not fail.
# TYPE endpoint_aggregator_member_cluster_error gauge
endpoint_aggregator_member_cluster_error{cluster="garbage",reason="invalid_registration"} 1
endpoint_aggregator_member_cluster_error{cluster="rbac",reason="forbidden"} 1
endpoint_aggregator_member_cluster_error{cluster="refused",reason="connection_refused"} 1
endpoint_aggregator_member_cluster_error{cluster="revoked",reason="unauthorized"} 1
`
	if err := testutil.CollectAndCompare(r, strings.NewReader(want), "endpoint_aggregator_member_cluster_error"); err != nil {
		t.Error(err)
	}
	if rejected := gaugeValue(t, r, "endpoint_aggregator_rejected_registrations", "reason", "invalid_kubeconfig"); rejected != 1 {
		t.Errorf("endpoint_aggregator_rejected_registrations{reason=invalid_kubeconfig} = %v, want 1", rejected)
	}

	// The token works again: the probe recovers, the informers sync, and
	// revoked's error series goes.
	failRevoked.Store(false)
	waitUntil(t, func() bool { st, _ := r.Lookup("revoked"); return st.Cause == "" && st.Phase.String() == "Synced" })
	if n := testutil.CollectAndCount(r, "endpoint_aggregator_member_cluster_error"); n != 3 {
		t.Errorf("%d member error series after revoked recovered, want 3", n)
	}
}

// gaugeValue returns the value of the series of metric name whose label is
// value; -1 when there is none.
func gaugeValue(t *testing.T, c prometheus.Collector, name, label, value string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// A watch that ends in the normal course (410 Gone, EOF) is no failure of
// the member: no Event, no error series.
func TestWatchEndingNormallyIsNoFailure(t *testing.T) {
	c, err := newCluster("east", "h", "", Clients{Kube: kubefake.NewClientset()}, EventHandlers{}, ReadBounds{})
	if err != nil {
		t.Fatal(err)
	}
	var told []Failure
	c.onWatchFailure = func(f Failure) { told = append(told, f) }
	//nolint:staticcheck // NewGone: a plain 410, as older servers send it
	for _, err := range []error{apierrors.NewResourceExpired("too old resource version"), apierrors.NewGone("gone"), io.EOF, io.ErrUnexpectedEOF} {
		c.watchFailed(err)
	}
	if f := c.Failure(); f != nil || len(told) != 0 {
		t.Errorf("failure %+v, told %+v; want none", f, told)
	}
	c.watchFailed(apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "", errors.New("no RBAC")))
	if f := c.Failure(); f == nil || f.Class != ClassForbidden || len(told) != 1 {
		t.Errorf("failure %+v, told %+v; want Forbidden, once", f, told)
	}
}

// While a member is down, its cause changes only after the new one is seen
// as often in a row as a flip to unreachable needs, and each change is
// reported once; a cause that flaps every probe is not reported each time.
func TestProbeReportsAChangedCauseOnceItHolds(t *testing.T) {
	kube := kubefake.NewClientset()
	var mu stdsync.Mutex
	script := []error{}
	kube.PrependReactor("get", "version", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if len(script) == 0 {
			return true, nil, context.DeadlineExceeded
		}
		err := script[0]
		script = script[1:]
		return true, nil, err
	})
	_, refused := net.Dial("tcp", closedAddr(t))
	timeout := context.DeadlineExceeded
	// Down (refused ×2), flapping (timeout, refused, timeout, refused),
	// then timing out for good.
	script = []error{refused, refused, timeout, refused, timeout, refused, timeout, timeout}
	c, err := newCluster("east", "h", "", Clients{Kube: kube}, EventHandlers{}, ReadBounds{})
	if err != nil {
		t.Fatal(err)
	}
	var reported []ErrorClass
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.probeLoop(time.Millisecond, time.Second, func(healthy bool) {
			mu.Lock()
			defer mu.Unlock()
			if f := c.Failure(); !healthy && f != nil {
				reported = append(reported, f.Class)
			}
		})
	}()
	waitUntil(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(script) == 0 })
	time.Sleep(20 * time.Millisecond)
	c.shutdown()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if want := []ErrorClass{ClassConnectionRefused, ClassTimeout}; !slices.Equal(reported, want) {
		t.Errorf("reported causes %v, want %v", reported, want)
	}
}
