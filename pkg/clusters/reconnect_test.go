package clusters

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
)

var errRefused = errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")

// flakyMember is a fake member API server that can be cut off: going down
// (setDown) ends its open watches, and while down its lists, watches and
// health probe fail as a refused connection does. While probeDown, only
// its probe fails (an API server too slow to answer it, whose watches
// hold). While gated, lists and watches wait for the gate to open.
type flakyMember struct {
	*kubefake.Clientset
	down         atomic.Bool
	probeDown    atomic.Bool
	mu           sync.Mutex
	watches      []watch.Interface
	gate         atomic.Pointer[chan struct{}]
	gated        atomic.Int64 // calls that waited at the gate
	failedLists  atomic.Int64
	failedWatch  atomic.Int64
	failedProbes atomic.Int64
	probes       atomic.Int64
	// failOneProbe fails the next probe only.
	failOneProbe atomic.Bool
}

func newFlakyMember(objs ...runtime.Object) *flakyMember {
	m := &flakyMember{Clientset: kubefake.NewClientset(objs...)}
	m.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		switch {
		case a.GetVerb() == "get" && a.GetResource().Resource == "version":
			m.probes.Add(1)
			if m.down.Load() || m.probeDown.Load() || m.failOneProbe.CompareAndSwap(true, false) {
				m.failedProbes.Add(1)
				return true, nil, errRefused
			}
		case a.GetVerb() == "list":
			if m.down.Load() {
				m.failedLists.Add(1)
				return true, nil, errRefused
			}
			m.wait()
		}
		return false, nil, nil
	})
	m.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		if m.down.Load() {
			m.failedWatch.Add(1)
			return true, nil, errRefused
		}
		m.wait()
		var opts metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := m.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		if err != nil {
			return true, nil, err
		}
		m.mu.Lock()
		m.watches = append(m.watches, w)
		m.mu.Unlock()
		return true, w, nil
	})
	return m
}

// outage cuts the member off until its informers have noticed: a list or
// watch they started again was refused.
func (m *flakyMember) outage(t *testing.T) {
	t.Helper()
	refused := func() int64 { return m.failedLists.Load() + m.failedWatch.Load() }
	before := refused()
	m.setDown(true)
	waitUntil(t, func() bool { return refused() > before })
}

// setDown cuts the member off (ending its open watches, as a lost
// connection does), or lets it answer again.
func (m *flakyMember) setDown(down bool) {
	m.down.Store(down)
	if !down {
		return
	}
	m.mu.Lock()
	open := m.watches
	m.watches = nil
	m.mu.Unlock()
	for _, w := range open {
		w.Stop()
	}
}

func (m *flakyMember) wait() {
	if g := m.gate.Load(); g != nil {
		m.gated.Add(1)
		<-*g
	}
}

// startFlakyRegistry registers one member, east, served by m, probed every
// 10ms.
func startFlakyRegistry(t *testing.T, m *flakyMember, syncTimeout time.Duration) (*Registry, *recordingHandler) {
	t.Helper()
	r, _, h, _ := startRegistryWith(t, Options{
		SyncTimeout:   syncTimeout,
		ProbeInterval: 10 * time.Millisecond,
		NewClients:    func(*rest.Config) (Clients, error) { return Clients{Kube: m}, nil },
	}, secret("east", "", tokenKubeconfig, time.Hour))
	waitUntil(t, func() bool { return r.Get("east") != nil })
	return r, h
}

func synced(r *Registry) func() bool {
	return func() bool { c := r.Get("east"); return c != nil && c.HasSynced() }
}

// A member unreachable when the daemon starts: its informers fail their
// first list and client-go backs them off. When the probe sees the member
// answer, the informers are replaced by a fresh set that lists at once; the
// member is the same Cluster and is reported synced once.
func TestClusterUnreachableAtStartRestartsItsInformersWhenItAnswers(t *testing.T) {
	for _, tc := range []struct {
		name        string
		syncTimeout time.Duration
	}{
		{"within its sync timeout", time.Hour},
		{"past its sync timeout", 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFlakyMember(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart"}})
			m.setDown(true)
			r, h := startFlakyRegistry(t, m, tc.syncTimeout)
			c := r.Get("east")
			first := c.informers.Load()
			waitUntil(t, func() bool { return m.failedLists.Load() >= 2 && m.failedProbes.Load() >= probeFailureThreshold })
			if tc.syncTimeout < time.Hour {
				waitUntil(t, func() bool { _, timedOut, _ := h.calls(); return len(timedOut) == 1 })
				if !c.SyncTimedOut() {
					t.Error("SyncTimedOut() = false after the sync timeout passed")
				}
			}
			if c.HasSynced() {
				t.Fatal("synced while unreachable")
			}

			m.setDown(false)
			waitUntil(t, synced(r))
			// ClusterSynced follows HasSynced.
			waitUntil(t, func() bool { got, _ := h.snapshot(); return len(got) > 0 })
			if r.Get("east") != c {
				t.Error("the member's Cluster was replaced; only its informers should be")
			}
			if c.informers.Load() == first {
				t.Error("the member synced on its first informers, which were backing off; want a fresh set")
			}
			select {
			case <-first.ctx.Done():
			default:
				t.Error("the first informer set was not stopped")
			}
			if svcs, _ := c.ServiceLister().List(labels.Everything()); len(svcs) != 1 {
				t.Errorf("listed %d Services, want 1", len(svcs))
			}
			if c.SyncTimedOut() {
				t.Error("SyncTimedOut() = true after syncing")
			}
			syncedCalls, timedOut, health := h.calls()
			if !slices.Equal(syncedCalls, []string{"east"}) {
				t.Errorf("ClusterSynced calls %v, want one for east", syncedCalls)
			}
			wantTimedOut := []string(nil)
			if tc.syncTimeout < time.Hour {
				wantTimedOut = []string{"east"}
			}
			if !slices.Equal(timedOut, wantTimedOut) {
				t.Errorf("ClusterSyncTimedOut calls %v, want %v", timedOut, wantTimedOut)
			}
			// Health is reported before the first sync too, so that the
			// unreachable policy applies: down, then answering.
			if !slices.Equal(health, []string{"east=false", "east=true"}) {
				t.Errorf("ClusterHealthChanged calls %v, want [east=false east=true]", health)
			}
		})
	}
}

// A synced member that stops answering and answers again gets a fresh
// informer set, make-before-break: until the fresh set has synced, the old
// one keeps serving the last-known state and the member stays synced; then
// the fresh set replaces it and the handler syncs the member again.
func TestClusterAnsweringAgainAfterAnOutageSwapsInFreshInformers(t *testing.T) {
	m := newFlakyMember(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart"}})
	r, h := startFlakyRegistry(t, m, time.Hour)
	waitUntil(t, synced(r))
	waitUntil(t, func() bool { got, _ := h.snapshot(); return len(got) == 1 })
	c := r.Get("east")
	old := c.informers.Load()

	m.outage(t)
	waitUntil(t, func() bool { _, _, health := h.calls(); return slices.Equal(health, []string{"east=false"}) })
	if _, down := c.UnreachableSince(); !down {
		t.Error("UnreachableSince() reports the member reachable while its probe fails")
	}

	gate := make(chan struct{})
	m.gate.Store(&gate)
	m.setDown(false)
	// The fresh set is listing, held at the gate.
	waitUntil(t, func() bool { return m.gated.Load() > 0 })
	if !c.HasSynced() || c.informers.Load() != old {
		t.Error("the old informers were dropped before the fresh ones synced")
	}
	if svcs, _ := c.ServiceLister().List(labels.Everything()); len(svcs) != 1 {
		t.Errorf("while the fresh informers list, the member lists %d Services, want its last-known 1", len(svcs))
	}
	if got, _ := h.snapshot(); len(got) != 1 {
		t.Errorf("ClusterSynced calls %v before the fresh informers synced, want only the first", got)
	}

	m.gate.Store(nil)
	close(gate)
	waitUntil(t, func() bool { got, _ := h.snapshot(); return len(got) == 2 })
	if c.informers.Load() == old {
		t.Error("the member was synced again before its fresh informers replaced the old")
	}
	select {
	case <-old.ctx.Done():
	default:
		t.Error("the old informer set was not stopped after the swap")
	}
	if r.Get("east") != c || !c.HasSynced() {
		t.Error("the member's Cluster was replaced or stopped being synced")
	}
	if svcs, _ := c.ServiceLister().List(labels.Everything()); len(svcs) != 1 {
		t.Errorf("after the swap the member lists %d Services, want 1", len(svcs))
	}
	waitUntil(t, func() bool { _, _, health := h.calls(); return len(health) == 2 })
	if _, _, health := h.calls(); !slices.Equal(health, []string{"east=false", "east=true"}) {
		t.Errorf("ClusterHealthChanged calls %v", health)
	}
	if _, removed := h.snapshot(); len(removed) != 0 {
		t.Errorf("ClusterRemoved %v during a reconnect", removed)
	}
}

// A member whose probe recovers at start while its informers are still
// listing, not failing (a probe that timed out under the load of a cold
// start), keeps those informers: replacing them would only list again.
func TestClusterKeepsInformersThatAreStillListingWhenItAnswersAgain(t *testing.T) {
	m := newFlakyMember(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart"}})
	gate := make(chan struct{})
	m.gate.Store(&gate)
	c, err := newCluster("east", "h", "", Clients{Kube: m}, EventHandlers{}, ReadBounds{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.shutdown()
	first := c.informers.Load()
	done := make(chan bool)
	go func() { done <- c.start(time.Hour, func() {}, func() {}) }()
	waitUntil(t, func() bool { return m.gated.Load() > 0 })
	// What the probe does when the member answers after failing (the
	// fake holds its probe while a list waits at the gate).
	c.askReconnect()
	waitUntil(t, func() bool { return len(c.reconnect) == 0 })
	m.gate.Store(nil)
	close(gate)
	if !<-done {
		t.Fatal("the member did not sync")
	}
	if c.informers.Load() != first {
		t.Error("informers that were listing, not failing, were replaced when the member answered again")
	}
	if svcs, _ := c.ServiceLister().List(labels.Everything()); len(svcs) != 1 {
		t.Errorf("listed %d Services, want 1", len(svcs))
	}
}

// A synced member reconnects once per outage, each time on a goroutine
// that ends after the swap: two outages in a row give two fresh sets.
func TestClusterReconnectsAfterEachOutage(t *testing.T) {
	m := newFlakyMember(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart"}})
	r, h := startFlakyRegistry(t, m, time.Hour)
	waitUntil(t, synced(r))
	c := r.Get("east")
	for i := 1; i <= 2; i++ {
		before := c.informers.Load()
		m.outage(t)
		waitUntil(t, func() bool { _, _, health := h.calls(); return len(health) == 2*i-1 })
		m.setDown(false)
		waitUntil(t, func() bool { got, _ := h.snapshot(); return len(got) == 1+i })
		if c.informers.Load() == before {
			t.Fatalf("outage %d: the member was synced again on its old informers", i)
		}
		waitUntil(t, func() bool { return !c.informerLoop.Load() })
	}
	if svcs, _ := c.ServiceLister().List(labels.Everything()); len(svcs) != 1 {
		t.Errorf("listed %d Services, want 1", len(svcs))
	}
}

// A synced member's informers whose watches held are not replaced by a
// relist, neither after one failed probe (no outage) nor after an outage of
// the probe alone (an API server too slow to answer it, under load): they
// missed no event, and a relist would only add to the load.
func TestClusterKeepsInformersWhoseWatchesHeld(t *testing.T) {
	for _, tc := range []struct {
		name   string
		outage func(*testing.T, *flakyMember, *recordingHandler)
		flips  []string // health changes reported
	}{
		{"one slow probe", func(t *testing.T, m *flakyMember, _ *recordingHandler) {
			m.failOneProbe.Store(true)
			waitUntil(t, func() bool { return m.failedProbes.Load() == 1 })
		}, nil},
		{"an outage of the probe alone", func(t *testing.T, m *flakyMember, h *recordingHandler) {
			m.probeDown.Store(true)
			waitUntil(t, func() bool { _, _, health := h.calls(); return len(health) == 1 })
			m.probeDown.Store(false)
			waitUntil(t, func() bool { _, _, health := h.calls(); return len(health) == 2 })
		}, []string{"east=false", "east=true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFlakyMember(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart"}})
			r, h := startFlakyRegistry(t, m, time.Hour)
			waitUntil(t, synced(r))
			c := r.Get("east")
			before := c.informers.Load()
			tc.outage(t, m, h)
			probed := m.probes.Load()
			waitUntil(t, func() bool { return m.probes.Load() >= probed+5 })
			if c.informers.Load() != before || c.informerLoop.Load() {
				t.Error("the member's informers were replaced")
			}
			if _, _, health := h.calls(); !slices.Equal(health, tc.flips) {
				t.Errorf("health changes %v, want %v", health, tc.flips)
			}
			if got, _ := h.snapshot(); len(got) != 1 {
				t.Errorf("ClusterSynced calls %v, want only the first", got)
			}
			// The informers still follow the member.
			if _, err := m.CoreV1().Services("shop").Create(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "till"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, func() bool { svcs, _ := c.ServiceLister().List(labels.Everything()); return len(svcs) == 2 })
		})
	}
}

// Run stops the members only after its worker has stopped: a Secret being
// processed at shutdown still has its member stopped, and no member starts
// after Run returned.
func TestRegistryRunStopsMembersTheWorkerStartsDuringShutdown(t *testing.T) {
	hub := kubefake.NewClientset()
	entered, release := make(chan struct{}), make(chan struct{})
	r := NewRegistry(hub, record.NewFakeRecorder(100), &recordingHandler{}, Options{
		Namespace:   ns,
		SyncTimeout: time.Hour,
		NewClients: func(*rest.Config) (Clients, error) {
			close(entered)
			<-release
			return Clients{Kube: kubefake.NewClientset()}, nil
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	waitUntil(t, r.SecretsSynced)
	if _, err := hub.CoreV1().Secrets(ns).Create(ctx, secret("late", "", tokenKubeconfig, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	<-entered // the worker is building the member's clients
	cancel()
	// Let the worker go on once Run returned, or after a while if Run
	// (rightly) waits for it.
	go func() {
		select {
		case <-done:
		case <-time.After(200 * time.Millisecond):
		}
		close(release)
	}()
	<-done
	c := r.Get("late")
	if c == nil {
		t.Fatal("Run returned before its worker finished registering the member")
	}
	select {
	case <-c.stop:
	default:
		t.Error("a member the worker started during shutdown is still running after Run returned")
	}
}
