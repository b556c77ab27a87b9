package sync

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// conflictedGauge reads endpoint_aggregator_conflicted_imports{reason}; -1
// when there is no such series.
func conflictedGauge(t *testing.T, reg *prometheus.Registry, reason endpoints.ConflictReason) float64 {
	t.Helper()
	return gathered(t, reg, "endpoint_aggregator_conflicted_imports", "reason", string(reason))
}

// withReason keeps the events (as FakeRecorder formats them) of one reason.
func withReason(events []string, reason string) []string {
	var out []string
	for _, e := range events {
		if strings.Contains(e, " "+reason+" ") {
			out = append(out, e)
		}
	}
	return out
}

// setPort makes a member's shop/cart export port http with number port.
func setPort(t *testing.T, m *fakeMember, port int32) {
	t.Helper()
	if err := m.services.Update(service("shop", "cart", corev1.ServicePort{Name: "http", Port: port, Protocol: corev1.ProtocolTCP})); err != nil {
		t.Fatal(err)
	}
}

// A member changing a port's number conflicts without changing the import's
// spec (the oldest export's port is used): only its Conflict condition
// changes. That too is said once, in an ExportConflict Event and the
// conflicted_imports gauge, and so is its end; syncs that find the same
// conflicts say nothing.
func TestSyncReportsEachChangeOfAnImportsConflictsOnce(t *testing.T) {
	rec := record.NewFakeRecorder(50)
	reg := prometheus.NewRegistry()
	f := newFixture(t, Options{Recorder: rec, Metrics: NewMetrics(reg)}, nil, nil)
	reg.MustRegister(f.ctrl)
	east, west := f.member("east"), f.member("west")
	eastKey, westKey := Key{Cluster: "east", Namespace: "shop", Name: "cart"}, Key{Cluster: "west", Namespace: "shop", Name: "cart"}
	key := eastKey.ClusterSet()
	setPort(t, east, 80)
	_ = west.services.Add(service("shop", "cart"))
	syncAll := func() {
		f.sync(eastKey)
		f.sync(westKey)
		f.sync(key)
	}

	syncAll()
	if events := drainEvents(rec); len(events) != 0 {
		t.Fatalf("exports that agree recorded %q", events)
	}
	if got := conflictedGauge(t, reg, endpoints.PortConflict); got != 0 {
		t.Fatalf("conflicted_imports{reason=PortConflict} = %v before any conflict, want 0", got)
	}

	// west's port 80 becomes 8081: east's export is the oldest (same
	// creation time, first by name), so the import keeps port 80.
	setPort(t, west, 8081)
	f.resetActions()
	syncAll()
	if got := f.writes(); !slices.Contains(got, "update serviceimports/status shop/cart") || slices.Contains(got, "update serviceimports shop/cart") {
		t.Fatalf("writes %q, want the import's status and not its spec", got)
	}
	events := drainEvents(rec)
	if c := withReason(events, ReasonExportConflict); len(c) != 1 || !strings.HasPrefix(c[0], corev1.EventTypeWarning) ||
		!strings.Contains(c[0], string(endpoints.PortConflict)) || !strings.Contains(c[0], "west") {
		t.Fatalf("events %q, want one Warning ExportConflict naming PortConflict and west", events)
	}
	if got := conflictedGauge(t, reg, endpoints.PortConflict); got != 1 {
		t.Errorf("conflicted_imports{reason=PortConflict} = %v, want 1", got)
	}
	if got := conflictedGauge(t, reg, endpoints.TypeConflict); got != 0 {
		t.Errorf("conflicted_imports{reason=TypeConflict} = %v, want 0", got)
	}

	// The same conflicts: nothing said again.
	syncAll()
	f.sync(key)
	if events := drainEvents(rec); len(events) != 0 {
		t.Errorf("syncs that found the same conflicts recorded %q", events)
	}

	// west agrees again.
	setPort(t, west, 80)
	syncAll()
	events = drainEvents(rec)
	if r := withReason(events, ReasonConflictResolved); len(r) != 1 || !strings.HasPrefix(r[0], corev1.EventTypeNormal) ||
		len(withReason(events, ReasonExportConflict)) != 0 {
		t.Fatalf("events %q, want one Normal ConflictResolved and no ExportConflict", events)
	}
	if got := conflictedGauge(t, reg, endpoints.PortConflict); got != 0 {
		t.Errorf("conflicted_imports{reason=PortConflict} = %v after the conflict cleared, want 0", got)
	}

	// A conflict again, then the import goes with its last export: the
	// gauge goes back to 0.
	setPort(t, west, 8081)
	syncAll()
	if c := withReason(drainEvents(rec), ReasonExportConflict); len(c) != 1 {
		t.Fatalf("ExportConflict events %q after the second conflict, want 1", c)
	}
	for _, m := range []*fakeMember{east, west} {
		_ = m.services.Delete(service("shop", "cart"))
	}
	syncAll()
	if _, err := f.ctrl.caches.imports.ServiceImports("shop").Get("cart"); err == nil {
		t.Fatal("the import outlived its exports")
	}
	if got := conflictedGauge(t, reg, endpoints.PortConflict); got != 0 {
		t.Errorf("conflicted_imports{reason=PortConflict} = %v after the import went, want 0", got)
	}
	if c := withReason(drainEvents(rec), ReasonExportConflict); len(c) != 0 {
		t.Errorf("the import's withdrawal recorded %q", c)
	}
}

// mergingSwitch is sharding where this replica merges while on is set.
type mergingSwitch struct{ on bool }

func (m *mergingSwitch) Merging() (bool, time.Time) { return m.on, time.Time{} }
func (m *mergingSwitch) Free(string) bool           { return true }

// With sharing replicas, the merging replica reports the conflicts; one
// that stops merging publishes no conflicted_imports series, so that the
// replicas' series add up to the leader's.
func TestConflictedImportsComeFromTheMergingReplicaOnly(t *testing.T) {
	rec := record.NewFakeRecorder(50)
	reg := prometheus.NewRegistry()
	sh := &mergingSwitch{on: true}
	f := newFixture(t, Options{Recorder: rec, Metrics: NewMetrics(reg), Sharding: sh}, nil, nil)
	reg.MustRegister(f.ctrl)
	east, west := f.member("east"), f.member("west")
	setPort(t, east, 80)
	_ = west.services.Add(service("shop", "cart", corev1.ServicePort{Name: "http", Port: 8081, Protocol: corev1.ProtocolTCP}))
	eastKey, westKey := Key{Cluster: "east", Namespace: "shop", Name: "cart"}, Key{Cluster: "west", Namespace: "shop", Name: "cart"}
	f.sync(eastKey)
	f.sync(westKey)
	f.sync(eastKey.ClusterSet())
	if c := withReason(drainEvents(rec), ReasonExportConflict); len(c) != 1 {
		t.Fatalf("ExportConflict events %q, want 1", c)
	}
	if got := conflictedGauge(t, reg, endpoints.PortConflict); got != 1 {
		t.Fatalf("conflicted_imports{reason=PortConflict} = %v on the merging replica, want 1", got)
	}
	sh.on = false
	if got := conflictedGauge(t, reg, endpoints.PortConflict); got != -1 {
		t.Errorf("conflicted_imports{reason=PortConflict} = %v on a replica that does not merge, want no series", got)
	}
	// A sync there waits for the merge; it reports nothing.
	f.sync(eastKey.ClusterSet())
	if events := drainEvents(rec); len(events) != 0 {
		t.Errorf("a replica that does not merge recorded %q", events)
	}
	if f.ctrl.state.has("") {
		t.Errorf("a replica that does not merge keeps %v", f.ctrl.state.keys(""))
	}
}
