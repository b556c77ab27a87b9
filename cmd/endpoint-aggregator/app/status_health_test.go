package app

import (
	"bytes"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// healthLease is a member Lease renewed renewedAgo before statusNow with
// the daemon's published view of the member.
func healthLease(cluster string, renewedAgo time.Duration, reachable, since, reason, message string) coordinationv1.Lease {
	l := memberLease(cluster, renewedAgo)
	l.Annotations = map[string]string{easync.AnnotationReachable: reachable, easync.AnnotationReachableSince: since}
	if reason != "" {
		l.Annotations[easync.AnnotationErrorReason], l.Annotations[easync.AnnotationErrorMessage] = reason, message
	}
	return l
}

// TestStatusSaysWhyEachMemberFails: LAST ERROR starts with the cause the
// daemon found, from its Events (a sync timeout after the cause keeps the
// cause) or, over them, from what it published on the member's Lease; a
// member whose Lease is still live but which the daemon published as
// unreachable (a hung member) is not CONNECTED; one it published as
// reachable again has no LAST ERROR left from its outage.
func TestStatusSaysWhyEachMemberFails(t *testing.T) {
	ago := func(d time.Duration) string { return statusNow.Add(-d).Format(time.RFC3339) }
	in := statusInput{
		Namespace: statusNS,
		Secrets: []corev1.Secret{regSecret("revoked", "", time.Hour), regSecret("refused", "", time.Hour), regSecret("frozen", "", time.Hour),
			regSecret("recovered", "", time.Hour), regSecret("rbac", "", time.Hour)},
		Events: []corev1.Event{
			secretEvent("revoked", "MemberUnauthorized", `member "revoked" is unreachable: Unauthorized, the member rejects the daemon's credentials: Unauthorized`, 20*time.Minute),
			secretEvent("revoked", clusters.ReasonSyncTimeout, `member "revoked" did not sync within 30s (Unauthorized: Unauthorized); still trying`, 19*time.Minute),
			secretEvent("refused", "MemberConnectionRefused", `member "refused" is unreachable: ConnectionRefused: dial tcp 127.0.0.1:1: connect: connection refused`, 20*time.Minute),
			secretEvent("frozen", clusters.ReasonConnected, "connected", 30*time.Minute),
			secretEvent("recovered", "MemberConnectionRefused", `member "recovered" is unreachable: ConnectionRefused`, 10*time.Minute),
		},
		Leases: []coordinationv1.Lease{
			// Renewed 5s ago, for 30s: live, and yet the daemon saw it hang.
			healthLease("frozen", 5*time.Second, "false", ago(3*time.Second), "Timeout", `probing member "frozen": context deadline exceeded`),
			healthLease("recovered", 5*time.Second, "true", ago(5*time.Minute), "", ""),
			healthLease("rbac", 5*time.Second, "true", ago(time.Hour), "Forbidden", `services is forbidden`),
		},
	}
	rows := buildMemberStatuses(statusNow, in)
	want := map[string]struct{ connected, lastError, cause string }{
		"revoked":   {statusFalse, `Unauthorized: member "revoked" is unreachable`, ""},
		"refused":   {statusFalse, `ConnectionRefused: member "refused" is unreachable`, ""},
		"frozen":    {statusFalse, `Timeout: probing member "frozen": context deadline exceeded`, "Timeout"},
		"recovered": {statusTrue, "", ""},
		"rbac":      {statusTrue, "Forbidden: services is forbidden", "Forbidden"},
	}
	for _, r := range rows {
		w := want[r.Name]
		if r.Connected != w.connected || !strings.HasPrefix(r.LastError, w.lastError) || (w.lastError == "" && r.LastError != "") || r.Cause != w.cause {
			t.Errorf("%s: connected %s, last error %q, cause %q; want %s, %q…, %q", r.Name, r.Connected, r.LastError, r.Cause, w.connected, w.lastError, w.cause)
		}
	}
	for _, r := range rows {
		if r.Name == "frozen" && (r.UnreachableSince == nil || !r.UnreachableSince.Time.Equal(statusNow.Add(-3*time.Second))) {
			t.Errorf("frozen: unreachableSince %v, want 3s before now", r.UnreachableSince)
		}
	}
	var out bytes.Buffer
	if err := printMemberStatuses(&out, "table", statusNS, rows, statusNow); err != nil {
		t.Fatal(err)
	}
	for _, cell := range []string{"Unauthorized: member", "ConnectionRefused: member", "Timeout: probing member"} {
		if !strings.Contains(out.String(), cell) {
			t.Errorf("table does not show %q:\n%s", cell, out.String())
		}
	}
}

// TestStatusShowsWhereEachNameComesFrom: the ID FROM column appears once a
// member says its own id; it says whether the About API agrees with the
// registration, and names the id a refused member claims.
func TestStatusShowsWhereEachNameComesFrom(t *testing.T) {
	ago := statusNow.Add(-time.Minute).Format(time.RFC3339)
	withID := func(l coordinationv1.Lease, id string) coordinationv1.Lease {
		l.Annotations[easync.AnnotationAboutID] = id
		return l
	}
	in := statusInput{
		Namespace: statusNS,
		Secrets:   []corev1.Secret{regSecret("east", "", time.Hour), regSecret("west", "", time.Hour), regSecret("plain", "", time.Hour)},
		Leases: []coordinationv1.Lease{
			withID(healthLease("east", 5*time.Second, "false", ago, "IdentityMismatch", `the member's ClusterProperty cluster.clusterset.k8s.io is "west"`), "west"),
			withID(healthLease("west", 5*time.Second, "true", ago, "", ""), "west"),
			healthLease("plain", 5*time.Second, "true", ago, "", ""),
		},
	}
	rows := buildMemberStatuses(statusNow, in)
	want := map[string]struct{ aboutID, source, cell string }{
		"east":  {"west", "registration", `registration; About API says west`},
		"west":  {"west", "registration, About API agrees", "registration, About API agrees"},
		"plain": {"", "registration", "registration"},
	}
	for _, r := range rows {
		w := want[r.Name]
		if r.AboutID != w.aboutID || r.IDSource != w.source || idCell(r) != w.cell {
			t.Errorf("%s: about id %q, source %q, cell %q; want %q, %q, %q", r.Name, r.AboutID, r.IDSource, idCell(r), w.aboutID, w.source, w.cell)
		}
	}
	var out bytes.Buffer
	if err := printMemberStatuses(&out, "table", statusNS, rows, statusNow); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "ID FROM") || !strings.Contains(out.String(), "About API says west") {
		t.Errorf("table:\n%s", out.String())
	}
	out.Reset()
	var plain []memberStatus
	for _, r := range rows {
		if r.Name == "plain" {
			plain = append(plain, r)
		}
	}
	if err := printMemberStatuses(&out, "table", statusNS, plain, statusNow); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "ID FROM") {
		t.Errorf("ID FROM shown although no member says its id:\n%s", out.String())
	}
}

// TestStatusSaysServiceExportNotServed: the SERVICEEXPORT column appears
// once a member is read other than as v1beta1; a member serving no
// ServiceExport is connected, with no error, and the column says so.
func TestStatusSaysServiceExportNotServed(t *testing.T) {
	ago := statusNow.Add(-time.Minute).Format(time.RFC3339)
	serving := func(l coordinationv1.Lease, v string) coordinationv1.Lease {
		l.Annotations[easync.AnnotationServiceExportVersion] = v
		return l
	}
	in := statusInput{
		Namespace: statusNS,
		Secrets:   []corev1.Secret{regSecret("current", "", time.Hour), regSecret("old", "", time.Hour), regSecret("bare", "", time.Hour)},
		Leases: []coordinationv1.Lease{
			serving(healthLease("current", 5*time.Second, "true", ago, "", ""), "v1beta1"),
			serving(healthLease("old", 5*time.Second, "true", ago, "", ""), "v1alpha1"),
			serving(healthLease("bare", 5*time.Second, "true", ago, "", ""), "none"),
		},
	}
	rows := buildMemberStatuses(statusNow, in)
	want := map[string]string{"current": "v1beta1", "old": "v1alpha1", "bare": "ServiceExport not served"}
	for _, r := range rows {
		if got := exportCell(r.ServiceExport); got != want[r.Name] || r.LastError != "" || r.Connected != statusTrue {
			t.Errorf("%s: serviceexport %q, connected %s, last error %q; want %q, True, none", r.Name, got, r.Connected, r.LastError, want[r.Name])
		}
	}
	var out bytes.Buffer
	if err := printMemberStatuses(&out, "table", statusNS, rows, statusNow); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "SERVICEEXPORT") || !strings.Contains(out.String(), "ServiceExport not served") {
		t.Errorf("table:\n%s", out.String())
	}
	for _, r := range rows {
		if r.Name == "current" {
			out.Reset()
			if err := printMemberStatuses(&out, "table", statusNS, []memberStatus{r}, statusNow); err != nil {
				t.Fatal(err)
			}
		}
	}
	if strings.Contains(out.String(), "SERVICEEXPORT") {
		t.Errorf("SERVICEEXPORT shown although every member serves v1beta1:\n%s", out.String())
	}
}

// importEvent is an Event on the ServiceImport shop/svc, ago before
// statusNow.
func importEvent(svc, reason, message string, ago time.Duration) corev1.Event {
	return corev1.Event{
		InvolvedObject: corev1.ObjectReference{Kind: "ServiceImport", Namespace: "shop", Name: svc},
		Reason:         reason, Message: message, LastTimestamp: metav1.NewTime(statusNow.Add(-ago)),
	}
}

// A member's failing sync is the newest SyncFailed of a service with no
// SyncRecovered after it, per cluster and service, and not stale.
func TestFailingSyncsTakesTheNewestWordPerClusterAndService(t *testing.T) {
	got := failingSyncs([]corev1.Event{
		importEvent("cart", easync.ReasonSyncFailed, "cluster east: writing its hub objects of shop/cart fails, retrying: old", 9*time.Minute),
		importEvent("cart", easync.ReasonSyncFailed, "cluster east: writing its hub objects of shop/cart fails, retrying: new", 8*time.Minute),
		// east's web recovered later than cart failed: cart still fails.
		importEvent("web", easync.ReasonSyncFailed, "cluster east: writing its hub objects of shop/web fails, retrying: w", 7*time.Minute),
		importEvent("web", easync.ReasonSyncRecovered, "cluster east: writing its hub objects of shop/web succeeds again", 6*time.Minute),
		importEvent("cart", easync.ReasonSyncFailed, "cluster west: writing its hub objects of shop/cart fails, retrying: x", 5*time.Minute),
		importEvent("cart", easync.ReasonSyncRecovered, "cluster west: writing its hub objects of shop/cart succeeds again", 4*time.Minute),
		// Left by a daemon that restarted: the failure would have been said again.
		importEvent("cart", easync.ReasonSyncFailed, "cluster south: writing its hub objects of shop/cart fails, retrying: z", syncFailureStale+time.Minute),
		importEvent("cart", easync.ReasonSyncFailed, "merging shop/cart fails, retrying: y", time.Minute),
		importEvent("cart", "EndpointsRefused", "cluster north: 1 endpoint(s) of its export refused", time.Minute),
	}, statusNow)
	if len(got) != 1 || got["east"] != "cluster east: writing its hub objects of shop/cart fails, retrying: new" {
		t.Errorf("failing syncs %q, want east's cart only", got)
	}
}

// status shows a member whose hub objects the hub refuses in LAST ERROR,
// unless the member itself fails: that comes first.
func TestStatusShowsAFailingSyncAsTheLastError(t *testing.T) {
	in := statusInput{
		Secrets: []corev1.Secret{regSecret("east", "", time.Hour), regSecret("west", "", time.Hour)},
		Events: []corev1.Event{
			secretEvent("east", clusters.ReasonConnected, "connected", 50*time.Minute),
			secretEvent("west", clusters.ReasonClientFailed, "west's kubeconfig is broken", 50*time.Minute),
		},
		ImportEvents: []corev1.Event{
			importEvent("cart", easync.ReasonSyncFailed, `cluster east: writing its hub objects of shop/cart fails, retrying: Service "cart-east" is invalid`, time.Minute),
			importEvent("cart", easync.ReasonSyncFailed, "cluster west: writing its hub objects of shop/cart fails, retrying: x", time.Minute),
		},
	}
	rows := buildMemberStatuses(statusNow, in)
	if len(rows) != 2 {
		t.Fatalf("rows %+v", rows)
	}
	if want := `SyncFailed: writing its hub objects of shop/cart fails, retrying: Service "cart-east" is invalid`; rows[0].LastError != want {
		t.Errorf("east's last error %q, want %q", rows[0].LastError, want)
	}
	if rows[1].LastError != "west's kubeconfig is broken" {
		t.Errorf("west's last error %q, want its own failure", rows[1].LastError)
	}
}

// status names the hub's Nodes without a zone, where the hub is a member:
// they cannot prefer its endpoints.
func TestUnzonedNodesNote(t *testing.T) {
	node := func(name, zone string) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if zone != "" {
			n.Labels = map[string]string{corev1.LabelTopologyZone: zone}
		}
		return n
	}
	if got := unzonedNodesNote([]corev1.Node{node("a", "z1"), node("b", "z2")}); got != "" {
		t.Errorf("every Node zoned: %q", got)
	}
	got := unzonedNodesNote([]corev1.Node{node("c", ""), node("a", "z1"), node("b", "")})
	if !strings.Contains(got, "2 hub Node(s)") || !strings.Contains(got, "(b, c)") {
		t.Errorf("note %q", got)
	}
}
