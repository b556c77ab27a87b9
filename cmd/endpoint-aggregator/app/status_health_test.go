package app

import (
	"bytes"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

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
