package endpoints

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestExportConditions(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}}
	ext := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName}}
	portConflict := []Conflict{{Reason: PortConflict, Clusters: []string{"west"}, Message: "port http: cluster(s) west differ from cluster east"}}
	cases := []struct {
		name      string
		svc       *corev1.Service
		conflicts []Conflict
		want      map[string]string // type -> status/reason
	}{
		{"no service", nil, nil, map[string]string{"Valid": "False/NoService", "Ready": "False/Pending"}},
		{"ExternalName", ext, nil, map[string]string{"Valid": "False/InvalidServiceType", "Ready": "False/Failed"}},
		{"valid, no conflict", svc, nil, map[string]string{"Valid": "True/Valid", "Ready": "True/Ready", "Conflict": "False/NoConflicts"}},
		{"valid, port conflict", svc, portConflict, map[string]string{"Valid": "True/Valid", "Ready": "True/Ready", "Conflict": "True/PortConflict"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ExportConditions(tc.svc, tc.conflicts, 3)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d conditions, want %d: %v", len(got), len(tc.want), got)
			}
			for _, c := range got {
				if w := tc.want[c.Type]; w != string(c.Status)+"/"+c.Reason {
					t.Errorf("%s = %s/%s, want %s", c.Type, c.Status, c.Reason, w)
				}
				if c.ObservedGeneration != 3 {
					t.Errorf("%s observedGeneration = %d", c.Type, c.ObservedGeneration)
				}
			}
		})
	}
}

func TestSetConditionsWritesOnlyOnChange(t *testing.T) {
	svc := &corev1.Service{}
	want := ExportConditions(svc, nil, 1)
	first, changed := SetConditions(nil, want)
	if !changed || len(first) != 3 {
		t.Fatalf("first set: changed=%v conditions=%v", changed, first)
	}
	// Backdate the transition times as if written long ago.
	old := metav1.NewTime(time.Unix(1000, 0))
	for i := range first {
		first[i].LastTransitionTime = old
	}
	if _, changed := SetConditions(first, ExportConditions(svc, nil, 1)); changed {
		t.Error("same state reported as a change")
	}
	// A conflict flips Conflict only: its time moves, the others keep theirs.
	next, changed := SetConditions(first, ExportConditions(svc, []Conflict{{Reason: TypeConflict, Message: "m"}}, 1))
	if !changed {
		t.Fatal("conflict not reported as a change")
	}
	if c := meta.FindStatusCondition(next, "Valid"); !c.LastTransitionTime.Equal(&old) {
		t.Error("Valid's transition time moved though its status did not")
	}
	if c := meta.FindStatusCondition(next, ConditionConflict); c.LastTransitionTime.Equal(&old) || c.Reason != string(TypeConflict) {
		t.Errorf("Conflict = %+v", c)
	}
	// Other controllers' conditions are kept.
	foreign := append(first, metav1.Condition{Type: "Other", Status: metav1.ConditionTrue, Reason: "X", LastTransitionTime: old})
	kept, _ := SetConditions(foreign, ExportConditions(svc, nil, 1))
	if meta.FindStatusCondition(kept, "Other") == nil {
		t.Error("dropped another controller's condition")
	}
}
