package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/shard"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

var statusNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const statusNS = "endpoint-aggregator"

func regSecret(name, cluster string, age time.Duration) corev1.Secret {
	s := corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Namespace: statusNS, Name: name, UID: types.UID("uid-" + name),
		Labels:            map[string]string{clusters.LabelMemberCluster: "true"},
		CreationTimestamp: metav1.NewTime(statusNow.Add(-age)),
	}}
	if cluster != "" {
		s.Annotations = map[string]string{clusters.AnnotationClusterName: cluster}
	}
	return s
}

var eventSeq int

// secretEvent is an Event about Secret secret, ago before statusNow.
func secretEvent(secret, reason, message string, ago time.Duration) corev1.Event {
	eventSeq++
	typ := corev1.EventTypeNormal
	switch reason {
	case clusters.ReasonConnected, clusters.ReasonRotated, clusters.ReasonMemberRemoved, clusters.ReasonReachable:
	default:
		typ = corev1.EventTypeWarning
	}
	return corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: statusNS, Name: fmt.Sprintf("%s.%d", secret, eventSeq), ResourceVersion: fmt.Sprint(100 + eventSeq)},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Secret", APIVersion: "v1", Namespace: statusNS, Name: secret, UID: types.UID("uid-" + secret),
		},
		Reason: reason, Message: message, Type: typ,
		FirstTimestamp: metav1.NewTime(statusNow.Add(-ago)),
		LastTimestamp:  metav1.NewTime(statusNow.Add(-ago)),
	}
}

func testServiceImport(ns, name string, clusterNames ...string) mcsv1beta1.ServiceImport {
	imp := mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, c := range clusterNames {
		imp.Status.Clusters = append(imp.Status.Clusters, mcsv1beta1.ClusterStatus{Cluster: c})
	}
	return imp
}

func perClusterService(ns, svc, cluster string) corev1.Service {
	return corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc + "-" + cluster, Labels: map[string]string{
		endpoints.LabelManagedBy: endpoints.ManagedByValue, endpoints.LabelServiceName: svc, endpoints.LabelSourceCluster: cluster,
	}}}
}

func hubSlice(cluster string, ready, notReady int) discoveryv1.EndpointSlice {
	s := discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
		discoveryv1.LabelManagedBy: endpoints.SliceManagedByValue, mcsv1beta1.LabelSourceCluster: cluster,
	}}}
	for i := 0; i < ready+notReady; i++ {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(i < ready)}})
	}
	return s
}

func memberLease(cluster string, renewedAgo time.Duration) coordinationv1.Lease {
	return coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: statusNS, Name: easync.MemberLeasePrefix + cluster},
		Spec: coordinationv1.LeaseSpec{
			RenewTime:            &metav1.MicroTime{Time: statusNow.Add(-renewedAgo)},
			LeaseDurationSeconds: ptr.To[int32](30),
		},
	}
}

// statusRow is the comparable part of a memberStatus.
type statusRow struct {
	Name, Secret, Connected, Synced string
	Services, Endpoints, Ready      int
	LastError                       string
}

func statusRowsOf(ms []memberStatus) []statusRow {
	var out []statusRow
	for _, m := range ms {
		out = append(out, statusRow{m.Name, m.Secret, m.Connected, m.Synced, m.Services, m.Endpoints, m.ReadyEndpoints, m.LastError})
	}
	return out
}

func TestBuildMemberStatuses(t *testing.T) {
	sameSecond := statusNow.Add(-time.Minute)
	tie1 := secretEvent("tie", clusters.ReasonSyncTimeout, "tie timeout", 0)
	tie2 := secretEvent("tie", clusters.ReasonConnected, "tie connected", 0)
	// Same second; the later write (higher resourceVersion) wins, whatever
	// the list order.
	tie1.LastTimestamp, tie2.LastTimestamp = metav1.NewTime(sameSecond), metav1.NewTime(sameSecond)
	tie1.ResourceVersion, tie2.ResourceVersion = "900", "901"

	stale := secretEvent("recreated", clusters.ReasonDuplicateName, "about the Secret before", 2*time.Hour)
	stale.InvolvedObject.UID = "uid-of-an-older-secret"

	in := statusInput{
		Namespace: statusNS,
		Secrets: []corev1.Secret{
			regSecret("east", "", 48*time.Hour),
			regSecret("member-west", "west", time.Hour),
			regSecret("bad", "", time.Minute),
			regSecret("rotating", "", time.Hour),
			regSecret("east-again", "east", time.Minute),
			regSecret("tie", "", time.Hour),
			regSecret("recreated", "", time.Hour),
			regSecret("quiet", "", 3*time.Hour),
			regSecret("leased", "", 3*time.Hour),
			regSecret("flaky", "", time.Hour),
			regSecret("lost", "", time.Hour),
		},
		Events: []corev1.Event{
			// Listed newest first on purpose: order comes from the times.
			secretEvent("east", clusters.ReasonConnected, "member \"east\" connected", 10*time.Minute),
			secretEvent("east", clusters.ReasonSyncTimeout, "east did not sync", 20*time.Minute),
			secretEvent("member-west", clusters.ReasonSyncTimeout, "member \"west\" did not sync within 30s", time.Minute),
			secretEvent("bad", clusters.ReasonInvalidConfig, "kubeconfig does not parse", time.Minute),
			secretEvent("rotating", clusters.ReasonConnected, "connected", 30*time.Minute),
			secretEvent("rotating", clusters.ReasonRefusedConfig, "kubeconfig refused: exec; keeping the previous connection", time.Minute),
			secretEvent("east-again", clusters.ReasonDuplicateName, "cluster name \"east\" is already registered", time.Minute),
			tie1, tie2,
			stale,
			secretEvent("flaky", clusters.ReasonConnected, "connected", 30*time.Minute),
			secretEvent("flaky", clusters.ReasonUnreachable, "does not answer", 20*time.Minute),
			secretEvent("flaky", clusters.ReasonReachable, "answers again", 10*time.Minute),
			secretEvent("lost", clusters.ReasonConnected, "connected", 30*time.Minute),
			secretEvent("lost", clusters.ReasonUnreachable, "does not answer", 20*time.Minute),
			// An Event about a Secret of another namespace.
			func() corev1.Event {
				e := secretEvent("quiet", clusters.ReasonSyncTimeout, "elsewhere", time.Minute)
				e.InvolvedObject.Namespace = "other"
				return e
			}(),
		},
		Leases: []coordinationv1.Lease{
			memberLease("leased", 5*time.Second),
			memberLease("west", 5*time.Minute), // stale
			{ObjectMeta: metav1.ObjectMeta{Name: "endpoint-aggregator"}},
		},
		ServiceImports: []mcsv1beta1.ServiceImport{
			testServiceImport("shop", "cart", "east", "west"),
			testServiceImport("shop", "db", "east"),
		},
		Services: []corev1.Service{
			perClusterService("shop", "cart", "east"), // also imported: counted once
			perClusterService("web", "front", "east"), // per-cluster only
			perClusterService("shop", "cart", "hub"),
		},
		EndpointSlices: []discoveryv1.EndpointSlice{
			hubSlice("east", 3, 0),
			hubSlice("east", 1, 1),
			hubSlice("west", 0, 2),
			hubSlice("hub", 1, 0),
			func() discoveryv1.EndpointSlice {
				s := hubSlice("east", 7, 0)
				s.Labels[discoveryv1.LabelManagedBy] = "someone-else"
				return s
			}(),
		},
	}
	got := statusRowsOf(buildMemberStatuses(statusNow, in))
	want := []statusRow{
		{"bad", "bad", statusFalse, statusFalse, 0, 0, 0, "kubeconfig does not parse"},
		{"east", "east", statusTrue, statusTrue, 3, 5, 4, ""},
		{"east", "east-again", statusFalse, statusFalse, 3, 5, 4, "cluster name \"east\" is already registered"},
		{"flaky", "flaky", statusTrue, statusTrue, 0, 0, 0, ""},
		{"hub", "", statusUnknown, statusUnknown, 1, 1, 1, ""},
		{"leased", "leased", statusTrue, statusTrue, 0, 0, 0, ""},
		{"lost", "lost", statusFalse, statusTrue, 0, 0, 0, "does not answer"},
		{"quiet", "quiet", statusUnknown, statusUnknown, 0, 0, 0, ""},
		{"recreated", "recreated", statusUnknown, statusUnknown, 0, 0, 0, ""},
		{"rotating", "rotating", statusTrue, statusTrue, 0, 0, 0, "kubeconfig refused: exec; keeping the previous connection"},
		{"tie", "tie", statusTrue, statusTrue, 0, 0, 0, ""},
		{"west", "member-west", statusFalse, statusFalse, 1, 2, 0, "member \"west\" did not sync within 30s"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rows:\n%s\nwant:\n%s", fmtStatusRows(got), fmtStatusRows(want))
	}

	// The tie is decided by resourceVersion, not by list order.
	in.Events[7], in.Events[8] = in.Events[8], in.Events[7]
	for _, r := range statusRowsOf(buildMemberStatuses(statusNow, in)) {
		if r.Secret == "tie" && r.Connected != statusTrue {
			t.Errorf("tie after reordering: %+v", r)
		}
	}
}

func TestBuildMemberStatusesLeaseDecidesConnected(t *testing.T) {
	in := statusInput{
		Secrets: []corev1.Secret{regSecret("east", "", time.Hour)},
		Events:  []corev1.Event{secretEvent("east", clusters.ReasonConnected, "connected", 50*time.Minute)},
		Leases:  []coordinationv1.Lease{memberLease("east", time.Minute)}, // duration 30s: expired
	}
	r := buildMemberStatuses(statusNow, in)
	if len(r) != 1 || r[0].Connected != statusFalse || r[0].Synced != statusTrue || r[0].LeaseRenewTime == nil {
		t.Errorf("stale lease: %+v", r)
	}
	in.Leases = []coordinationv1.Lease{memberLease("east", 10*time.Second)}
	if r := buildMemberStatuses(statusNow, in); r[0].Connected != statusTrue {
		t.Errorf("fresh lease: %+v", r)
	}
	// Without leaseDurationSeconds the default applies.
	l := memberLease("east", easync.DefaultMemberLeaseDuration-time.Second)
	l.Spec.LeaseDurationSeconds = nil
	in.Leases = []coordinationv1.Lease{l}
	if r := buildMemberStatuses(statusNow, in); r[0].Connected != statusTrue {
		t.Errorf("lease without duration: %+v", r)
	}
}

func TestBuildMemberStatusesEmpty(t *testing.T) {
	if r := buildMemberStatuses(statusNow, statusInput{}); len(r) != 0 {
		t.Errorf("rows %+v", r)
	}
	var out bytes.Buffer
	if err := printMemberStatuses(&out, "json", statusNS, nil, statusNow); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"members": []`) {
		t.Errorf("empty JSON: %s", out.String())
	}
}

func TestPrintMemberStatuses(t *testing.T) {
	long := strings.Repeat("x", 100)
	rows := []memberStatus{
		{Name: "east", Secret: "east", Connected: statusTrue, Synced: statusTrue, Services: 3, Endpoints: 5, ReadyEndpoints: 4,
			CreationTimestamp: &metav1.Time{Time: statusNow.Add(-49 * time.Hour)}},
		{Name: "west", Secret: "member-west", Connected: statusFalse, Synced: statusFalse, LastError: "did not\nsync " + long,
			CreationTimestamp: &metav1.Time{Time: statusNow.Add(-90 * time.Second)},
			LastEvent:         &statusEvent{Type: "Warning", Reason: clusters.ReasonSyncTimeout, Message: "did not sync", Time: metav1.NewTime(statusNow)}},
		{Name: "hub", Connected: statusUnknown, Synced: statusUnknown, Services: 1},
	}
	var out bytes.Buffer
	if err := printMemberStatuses(&out, "table", statusNS, rows, statusNow); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	fields := func(i int) string { return strings.Join(strings.Fields(lines[i]), " ") }
	if len(lines) != 4 {
		t.Fatalf("table:\n%s", out.String())
	}
	for i, want := range []string{
		"NAME SECRET CONNECTED SYNCED SERVICES ENDPOINTS CONFLICT LAST ERROR AGE",
		"east east True True 3 5 <none> <none> 2d1h",
		"west member-west False False 0 0 <none> did not sync " + long[:80-len("did not sync ")-3] + "... 90s",
		"hub <none> Unknown Unknown 1 0 <none> <none> <unknown>",
	} {
		if got := fields(i); got != want {
			t.Errorf("line %d:\n got %q\nwant %q", i, got, want)
		}
	}
	if !strings.HasPrefix(lines[1], "east   east ") {
		t.Errorf("columns not aligned:\n%s", out.String())
	}

	out.Reset()
	if err := printMemberStatuses(&out, "json", statusNS, rows, statusNow); err != nil {
		t.Fatal(err)
	}
	var report statusReport
	if err := json.Unmarshal(out.Bytes(), &report); err != nil {
		t.Fatal(err)
	}
	if report.Namespace != statusNS || len(report.Members) != 3 || report.Members[1].LastError != rows[1].LastError || report.Members[0].ReadyEndpoints != 4 ||
		report.Members[1].LastEvent == nil || report.Members[1].LastEvent.Reason != clusters.ReasonSyncTimeout {
		t.Errorf("JSON:\n%s", out.String())
	}
	if strings.Contains(out.String(), `"secret": ""`) {
		t.Errorf("empty secret not omitted:\n%s", out.String())
	}

	out.Reset()
	if err := printMemberStatuses(&out, "yaml", statusNS, rows, statusNow); err != nil {
		t.Fatal(err)
	}
	var fromYAML statusReport
	if err := yaml.UnmarshalStrict(out.Bytes(), &fromYAML); err != nil || len(fromYAML.Members) != 3 || fromYAML.Members[2].Name != "hub" {
		t.Errorf("YAML (err %v):\n%s", err, out.String())
	}

	if err := printMemberStatuses(&out, "wide", statusNS, rows, statusNow); err == nil {
		t.Error("unknown format accepted")
	}
}

func fmtStatusRows(rs []statusRow) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "  %+v\n", r)
	}
	return b.String()
}

// With sharing replicas, OWNER names each member's fence holder, marks a
// handover and a holder whose peer Lease lapsed; without fences the table
// has no OWNER column.
func TestStatusShowsOwners(t *testing.T) {
	lease := func(name string, labels, annotations map[string]string, holder string, renewedAgo time.Duration) coordinationv1.Lease {
		renewed := metav1.NewMicroTime(statusNow.Add(-renewedAgo))
		return coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: statusNS, Name: name, Labels: labels, Annotations: annotations},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &renewed},
		}
	}
	fence := func(cluster, holder, assigned string) coordinationv1.Lease {
		return lease(shard.FenceName(cluster), map[string]string{shard.LabelRole: shard.RoleFence, shard.LabelFenceCluster: cluster},
			map[string]string{shard.AnnotationAssignedTo: assigned}, holder, time.Hour)
	}
	peer := func(id string, renewedAgo time.Duration) coordinationv1.Lease {
		return lease(shard.PeerName(id), map[string]string{shard.LabelRole: shard.RolePeer}, nil, id, renewedAgo)
	}
	in := statusInput{
		Secrets: []corev1.Secret{regSecret("east", "", time.Hour), regSecret("west", "", time.Hour), regSecret("north", "", time.Hour), regSecret("south", "", time.Hour)},
		Leases: []coordinationv1.Lease{
			fence("east", "pod-a", "pod-a"), fence("west", "pod-a", "pod-b"), fence("north", "pod-c", "pod-b"), fence("south", "", "pod-b"),
			peer("pod-a", time.Second), peer("pod-b", time.Second), peer("pod-c", time.Minute),
		},
	}
	rows := buildMemberStatuses(statusNow, in)
	want := map[string]string{"east": "pod-a", "west": "pod-a (to pod-b)", "north": "pod-c (lapsed)", "south": "<none> (to pod-b)"}
	for _, r := range rows {
		if got := r.cell(); got != want[r.Name] {
			t.Errorf("%s: OWNER %q, want %q", r.Name, got, want[r.Name])
		}
	}
	var buf bytes.Buffer
	if err := printMemberStatuses(&buf, "table", statusNS, rows, statusNow); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "OWNER") || !strings.Contains(buf.String(), "pod-c (lapsed)") {
		t.Errorf("table:\n%s\nwant an OWNER column with the owners", buf.String())
	}
	buf.Reset()
	if err := printMemberStatuses(&buf, "table", statusNS, buildMemberStatuses(statusNow, statusInput{Secrets: in.Secrets}), statusNow); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "OWNER") {
		t.Errorf("table without fences:\n%s\nwant no OWNER column", buf.String())
	}
}

// TestStatusExplainsAnEmptyNamespace: a mistyped -n is an error that says
// whether the namespace exists and where registrations are.
func TestStatusExplainsAnEmptyNamespace(t *testing.T) {
	reg := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "east", Namespace: "endpoint-aggregator",
		Labels: map[string]string{clusters.LabelMemberCluster: clusters.MemberClusterValue}}}
	ns := func(name string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	for _, tc := range []struct {
		name       string
		objs       []runtime.Object
		ns         string
		missing    bool
		wantInHint string
	}{
		{"mistyped namespace", []runtime.Object{ns("endpoint-aggregator"), reg}, "endpoint-agregator", true, "pass -n endpoint-aggregator"},
		{"empty namespace", []runtime.Object{ns("endpoint-aggregator"), ns("other"), reg}, "other", false, "pass -n endpoint-aggregator"},
		{"nothing registered", []runtime.Object{ns("endpoint-aggregator")}, "endpoint-aggregator", false, "endpoint-aggregator register"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hub := &cliClients{context: "hub", kube: fake.NewClientset(tc.objs...)}
			err := noRegistrations(context.Background(), hub, tc.ns)
			if err == nil || errors.Is(err, errNoNamespace) != tc.missing || !strings.Contains(err.Error(), tc.wantInHint) {
				t.Errorf("noRegistrations(%s) = %v; want namespace missing %t and a hint with %q", tc.ns, err, tc.missing, tc.wantInHint)
			}
		})
	}
}

// CONFLICT counts, per member, the daemon's ServiceImports of its exports
// with Conflict=True and names them with their reasons; -o json has the
// condition's message too.
func TestStatusShowsConflicts(t *testing.T) {
	conflicted := func(imp mcsv1beta1.ServiceImport, status metav1.ConditionStatus, reason, message string) mcsv1beta1.ServiceImport {
		imp.Status.Conditions = []metav1.Condition{{Type: endpoints.ConditionConflict, Status: status, Reason: reason, Message: message}}
		return imp
	}
	portMsg := `port "http": cluster(s) west differ from cluster east, whose value is used (oldest export wins)`
	in := statusInput{
		Secrets: []corev1.Secret{regSecret("east", "", time.Hour), regSecret("west", "", time.Hour), regSecret("north", "", time.Hour)},
		ServiceImports: []mcsv1beta1.ServiceImport{
			conflicted(testServiceImport("shop", "web", "west", "north"), metav1.ConditionTrue, "LabelsConflict", "label \"tier\": ..."),
			conflicted(testServiceImport("shop", "cart", "east", "west"), metav1.ConditionTrue, "PortConflict", portMsg),
			conflicted(testServiceImport("shop", "orders", "east", "west", "north"), metav1.ConditionFalse, "NoConflicts", "all exports agree"),
			testServiceImport("shop", "legacy", "north"), // no conditions yet
		},
	}
	rows := buildMemberStatuses(statusNow, in)
	want := map[string][]string{"east": {"shop/cart"}, "west": {"shop/cart", "shop/web"}, "north": {"shop/web"}}
	for _, r := range rows {
		var got []string
		for _, c := range r.Conflicts {
			got = append(got, c.Import)
		}
		if !reflect.DeepEqual(got, want[r.Name]) {
			t.Errorf("%s: conflicts %v, want %v", r.Name, got, want[r.Name])
		}
	}

	var out bytes.Buffer
	if err := printMemberStatuses(&out, "table", statusNS, rows, statusNow); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	header := strings.Fields(lines[0])
	col := slices.Index(header, "CONFLICT")
	if col < 0 {
		t.Fatalf("no CONFLICT column:\n%s", out.String())
	}
	start := strings.Index(lines[0], "CONFLICT")
	cells := map[string]string{}
	for _, l := range lines[1:] {
		rest := l[start:]
		end := strings.Index(rest, "   ") // the column padding
		cells[strings.Fields(l)[0]] = rest[:end]
	}
	for name, cell := range map[string]string{
		"east":  "1: shop/cart (PortConflict)",
		"west":  "2: shop/cart (PortConflict), shop/web (LabelsConflict)",
		"north": "1: shop/web (LabelsConflict)",
	} {
		if cells[name] != cell {
			t.Errorf("%s: CONFLICT %q, want %q\n%s", name, cells[name], cell, out.String())
		}
	}

	out.Reset()
	if err := printMemberStatuses(&out, "json", statusNS, rows, statusNow); err != nil {
		t.Fatal(err)
	}
	var report statusReport
	if err := json.Unmarshal(out.Bytes(), &report); err != nil {
		t.Fatal(err)
	}
	if c := report.Members[0].Conflicts; report.Members[0].Name != "east" || len(c) != 1 ||
		c[0] != (statusConflict{Import: "shop/cart", Reason: "PortConflict", Message: portMsg}) {
		t.Errorf("JSON:\n%s", out.String())
	}
	if strings.Count(out.String(), `"conflicts"`) != 3 {
		t.Errorf("JSON lists conflicts for a member without any, or omits some:\n%s", out.String())
	}
}
