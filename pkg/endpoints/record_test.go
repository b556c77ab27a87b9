package endpoints

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// An export read back from its record merges exactly as the export itself,
// whatever properties it sets.
func TestExportRecordRoundTripMergesTheSame(t *testing.T) {
	variants := map[string]func(*Export){
		"plain":    nil,
		"headless": func(e *Export) { e.Service.Spec.ClusterIP = corev1.ClusterIPNone },
		"affinity": func(e *Export) {
			e.Service.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			e.Service.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
		},
		"policies": func(e *Export) {
			e.Service.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
			e.Service.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferClose)
			e.Service.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
		},
		"exported metadata": func(e *Export) {
			e.ExportedLabels = map[string]string{"tier": "front", "team": "shop"}
			e.ExportedAnnotations = map[string]string{"owner": "payments"}
		},
		"unnamed port": func(e *Export) { e.Service.Spec.Ports = []corev1.ServicePort{{Port: 53, Protocol: corev1.ProtocolUDP}} },
	}
	for name, mutate := range variants {
		t.Run(name, func(t *testing.T) {
			e := testExport("east", 3, mutate)
			other := testExport("west", 1, nil)
			rec := ExportRecord(e)
			back, err := ParseExportRecord("east", testNamespace, testService, rec)
			if err != nil {
				t.Fatal(err)
			}
			if again := ExportRecord(back); again != rec {
				t.Errorf("record changed on a round trip:\n%s\n%s", rec, again)
			}
			want := MergeImport(testNamespace, testService, []Export{e, other})
			got := MergeImport(testNamespace, testService, []Export{back, other})
			if !reflect.DeepEqual(got, want) {
				t.Errorf("merge from the record = %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestParseExportRecordRejectsBrokenRecords(t *testing.T) {
	for _, rec := range []string{"", "{", `{"type":"LoadBalancer"}`, `{"ports":"http"}`} {
		if _, err := ParseExportRecord("east", testNamespace, testService, rec); err == nil {
			t.Errorf("ParseExportRecord(%q) accepted it", rec)
		}
	}
}

// Every hub slice of a source carries its record, the placeholder too, and
// a changed record rewrites each of them without moving an endpoint.
func TestPlanSlicesCarriesTheRecord(t *testing.T) {
	src := testSource(memberSlice("web-a", discoveryv1.AddressTypeIPv4, httpPorts, readyEndpoints(0, 150)...))
	src.Record = "r1"
	state := syncState(t, src, nil)
	for _, s := range state {
		if s.Annotations[AnnotationExportRecord] != "r1" {
			t.Errorf("slice %s has annotations %v", s.Name, s.Annotations)
		}
	}
	if got, ok := SourceRecord(testNamespace, testService, testCluster, digests(state)); !ok || got != "r1" {
		t.Errorf("SourceRecord = %q, %v", got, ok)
	}
	src.Record = "r2"
	plan := PlanSlices(src, Locality{}, digests(state))
	if len(plan.Update) != len(state) || len(plan.Create)+len(plan.Delete) != 0 {
		t.Fatalf("record change: %s, want every slice updated", describe(plan))
	}
	if !reflect.DeepEqual(firstAddresses(plan.Update), firstAddresses(state)) {
		t.Error("a record change moved endpoints")
	}
	for _, s := range plan.Update {
		if s.Annotations[AnnotationExportRecord] != "r2" {
			t.Errorf("updated slice %s has annotations %v", s.Name, s.Annotations)
		}
	}

	empty := testSource()
	empty.Record = "r3"
	plan = PlanSlices(empty, Locality{}, nil)
	if len(plan.Create) != 1 || len(plan.Create[0].Endpoints) != 0 || plan.Create[0].Annotations[AnnotationExportRecord] != "r3" ||
		plan.Create[0].AddressType != discoveryv1.AddressTypeIPv4 {
		t.Errorf("placeholder: %s %+v", describe(plan), plan.Create)
	}
	if _, ok := SourceRecord(testNamespace, testService, testCluster, nil); ok {
		t.Error("SourceRecord found a record without slices")
	}
}
