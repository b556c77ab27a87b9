package shard

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
)

type fakeMembers struct {
	mu          sync.Mutex
	names       []string
	reconsiders map[string]int
	// unsynced: the registry has not read its Secrets yet; cold: the
	// members whose connection has not synced.
	unsynced bool
	cold     map[string]bool
}

func (m *fakeMembers) SecretsSynced() bool { m.mu.Lock(); defer m.mu.Unlock(); return !m.unsynced }

func (m *fakeMembers) Names() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.names...)
}
func (m *fakeMembers) Warm(n string) bool     { m.mu.Lock(); defer m.mu.Unlock(); return !m.cold[n] }
func (m *fakeMembers) Reconsider(name string) { m.mu.Lock(); m.reconsiders[name]++; m.mu.Unlock() }

type fakeSyncer struct{}

func (fakeSyncer) Busy(string) bool        { return false }
func (fakeSyncer) OwnershipChanged(string) {}
func (fakeSyncer) Weight(string) int       { return 1 }

func eventuallyTrue(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("not %s in 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSettledWaitsForAssignmentOrTimeout: a replica knows its share once
// every registered member is assigned to a live replica, and the members
// assigned here were handed to the registry; without a leader, only once
// SettleTimeout passed since its first reconcile.
func TestSettledWaitsForAssignmentOrTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		leading bool
	}{{"leader assigns", true}, {"no leader", false}} {
		t.Run(tc.name, func(t *testing.T) {
			var offset atomic.Int64 // how far the clock is moved on
			now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
			hub := kubefake.NewClientset()
			members := &fakeMembers{names: []string{"east", "west"}, reconsiders: map[string]int{}}
			c := New(hub, members, fakeSyncer{}, Options{
				Namespace: "ns", Identity: "a",
				LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 50 * time.Millisecond,
				Leading:       func() bool { return tc.leading },
				SettleTimeout: time.Minute,
				Now:           now,
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if c.Settled() {
				t.Fatal("settled before any reconcile")
			}
			done := make(chan struct{})
			go func() { c.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()

			if !tc.leading {
				eventuallyTrue(t, "reconciled", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return !c.firstReconcile.IsZero() })
				if c.Settled() {
					t.Fatal("settled with no member assigned and the settle timeout not passed")
				}
				offset.Store(int64(time.Minute))
				if !c.Settled() {
					t.Fatal("not settled once the settle timeout passed")
				}
				return
			}
			eventuallyTrue(t, "settled", c.Settled)
			for _, n := range members.names {
				l, err := hub.CoordinationV1().Leases("ns").Get(ctx, FenceName(n), metav1.GetOptions{})
				if err != nil {
					t.Fatalf("settled, and %s has no fence: %v", n, err)
				}
				if got := l.Annotations[AnnotationAssignedTo]; got != "a" {
					t.Errorf("%s assigned to %q, want a", n, got)
				}
				if !c.Wants(n) {
					t.Errorf("settled, and %s assigned here is not wanted", n)
				}
				members.mu.Lock()
				r := members.reconsiders[n]
				members.mu.Unlock()
				if r == 0 {
					t.Errorf("settled, and the registry was not asked to connect %s", n)
				}
			}
			// A member registered later is assigned and wanted here too.
			members.mu.Lock()
			members.names = append(members.names, "north")
			members.mu.Unlock()
			c.Kick()
			eventuallyTrue(t, "settled with north", func() bool { return c.Settled() && c.Wants("north") })
		})
	}
}
