package endpoints

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// What a member behind anything but a stock API server may say of its
// Service, and the hub's API server would refuse in the objects built from
// it, goes before the merge: one member's port must not break the import
// every member shares.
func TestSanitizeServiceDropsWhatTheHubWouldRefuse(t *testing.T) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
				{Name: "Not_A_Label", Port: 81},
				{Name: "zero", Port: 0},
				{Name: "big", Port: 70000},
				{Name: "quic", Port: 443, Protocol: "HTTP3"},
				{Name: "http", Port: 8080},
				{Name: "", Port: 9090},
				{Name: "grpc", Port: 9000, AppProtocol: ptr.To("not a qualified name!")},
				{Name: "metrics", Port: 9100, Protocol: corev1.ProtocolUDP},
				{Name: "again", Port: 80}, // http's number and protocol (TCP by default)
				{Name: "dns", Port: 80, Protocol: corev1.ProtocolUDP},
			},
			SessionAffinity:       "Sticky",
			SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](1 << 30)}},
			IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv4Protocol},
			InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicy("Nearby")),
			TrafficDistribution:   ptr.To("Anywhere"),
		},
	}
	before := svc.DeepCopy()
	out, problems := SanitizeService(svc)
	var names []string
	for _, p := range out.Spec.Ports {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"http", "metrics", "dns"}) {
		t.Errorf("ports kept %v, want [http metrics dns]", names)
	}
	if out.Spec.SessionAffinity != corev1.ServiceAffinityNone || out.Spec.SessionAffinityConfig != nil || out.Spec.IPFamilies != nil ||
		out.Spec.InternalTrafficPolicy != nil || out.Spec.TrafficDistribution != nil {
		t.Errorf("unknown values kept: %+v", out.Spec)
	}
	if len(problems) != 13 || !strings.Contains(strings.Join(problems, "; "), "port Not_A_Label 81/: name is not a DNS label") ||
		!strings.Contains(strings.Join(problems, "; "), "port again 80/: number and protocol used by an earlier port") {
		t.Errorf("problems %q, want the 8 ports and 5 fields named", problems)
	}
	if fmt.Sprintf("%+v", before) != fmt.Sprintf("%+v", svc) {
		t.Error("input mutated")
	}

	// A valid Service is returned as it is; its only port may be unnamed.
	ok := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}, SessionAffinity: corev1.ServiceAffinityClientIP,
		TrafficDistribution: ptr.To(corev1.ServiceTrafficDistributionPreferClose)}}
	if got, problems := SanitizeService(ok); got != ok || problems != nil {
		t.Errorf("a valid Service: %v, %q", got == ok, problems)
	}
}

func TestSanitizeExported(t *testing.T) {
	labels := map[string]string{"tier": "web", "bad key!": "x", "team": "not a label value!"}
	got, problems := SanitizeExported(labels, false)
	if len(got) != 1 || got["tier"] != "web" || len(problems) != 2 {
		t.Errorf("labels: %v, %q; want tier only and two problems", got, problems)
	}
	annotations := map[string]string{"note": "any value, even with spaces!", "bad key!": "x"}
	got, problems = SanitizeExported(annotations, true)
	if len(got) != 1 || got["note"] == "" || len(problems) != 1 {
		t.Errorf("annotations: %v, %q; want note only", got, problems)
	}
	// Keys the daemon reads to tell whose a ServiceImport is: an export
	// that set them would take the shared import from every exporter.
	reserved := map[string]string{"tier": "web", "multicluster.kubernetes.io/service-name": "other",
		"multicluster.kubernetes.io/source-cluster": "west", "endpoint-aggregator.io/source-cluster": "west", LabelManagedBy: "someone"}
	for _, annotations := range []bool{false, true} {
		if got, problems := SanitizeExported(reserved, annotations); len(got) != 1 || got["tier"] != "web" || len(problems) != 4 {
			t.Errorf("reserved keys (annotations %v): %v, %q; want tier only and four problems", annotations, got, problems)
		}
	}
	clean := map[string]string{"tier": "web"}
	if got, problems := SanitizeExported(clean, false); len(got) != 1 || problems != nil {
		t.Errorf("clean labels changed: %v, %q", got, problems)
	}
}
