package endpoints

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// importOf returns a ServiceImport listing clusters, with the conditions
// conflicts give it.
func importOf(conflicts []Conflict, clusters ...string) *mcsv1beta1.ServiceImport {
	imp := &mcsv1beta1.ServiceImport{}
	for _, c := range clusters {
		imp.Status.Clusters = append(imp.Status.Clusters, mcsv1beta1.ClusterStatus{Cluster: c})
	}
	imp.Status.Conditions, _ = SetConditions(nil, ImportConditions(conflicts, 1))
	return imp
}

func TestExportConditions(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}}
	ext := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName}}
	portConflict := []Conflict{{Reason: PortConflict, Clusters: []string{"west"}, Message: "port http: cluster(s) west differ from cluster east"}}
	cases := []struct {
		name string
		svc  *corev1.Service
		imp  *mcsv1beta1.ServiceImport
		want map[string]string // type -> status/reason
	}{
		{"no service", nil, importOf(nil, "east"), map[string]string{"Valid": "False/NoService", "Ready": "False/Pending"}},
		{"ExternalName", ext, nil, map[string]string{"Valid": "False/InvalidServiceType", "Ready": "False/Failed"}},
		{"valid, no import yet", svc, nil, map[string]string{"Valid": "True/Valid", "Ready": "False/Pending"}},
		{"valid, import without the cluster", svc, importOf(nil, "west"), map[string]string{"Valid": "True/Valid", "Ready": "False/Pending"}},
		{"valid, no conflict", svc, importOf(nil, "east"), map[string]string{"Valid": "True/Valid", "Ready": "True/Ready", "Conflict": "False/NoConflicts"}},
		{"valid, port conflict", svc, importOf(portConflict, "east", "west"), map[string]string{"Valid": "True/Valid", "Ready": "True/Ready", "Conflict": "True/PortConflict"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ExportConditions(tc.svc, tc.imp, "east", 3)
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
				if c.Type == ConditionConflict {
					if ic := meta.FindStatusCondition(tc.imp.Status.Conditions, ConditionConflict); c.Message != ic.Message {
						t.Errorf("Conflict message %q, want the import's %q", c.Message, ic.Message)
					}
				}
			}
		})
	}
}

func TestSetConditionsWritesOnlyOnChange(t *testing.T) {
	svc := &corev1.Service{}
	want := ExportConditions(svc, importOf(nil, "east"), "east", 1)
	first, changed := SetConditions(nil, want)
	if !changed || len(first) != 3 {
		t.Fatalf("first set: changed=%v conditions=%v", changed, first)
	}
	// Backdate the transition times as if written long ago.
	old := metav1.NewTime(time.Unix(1000, 0))
	for i := range first {
		first[i].LastTransitionTime = old
	}
	if _, changed := SetConditions(first, ExportConditions(svc, importOf(nil, "east"), "east", 1)); changed {
		t.Error("same state reported as a change")
	}
	// A conflict flips Conflict only: its time moves, the others keep theirs.
	next, changed := SetConditions(first, ExportConditions(svc, importOf([]Conflict{{Reason: TypeConflict, Message: "m"}}, "east"), "east", 1))
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
	kept, _ := SetConditions(foreign, ExportConditions(svc, importOf(nil, "east"), "east", 1))
	if meta.FindStatusCondition(kept, "Other") == nil {
		t.Error("dropped another controller's condition")
	}
}

// Several reasons are joined by commas, in reason order; none is NoConflicts.
func TestImportConditionsJoinReasons(t *testing.T) {
	conflicts := []Conflict{
		{Reason: LabelsConflict, Clusters: []string{"west"}, Message: "label x"},
		{Reason: PortConflict, Clusters: []string{"west"}, Message: "port http"},
		{Reason: TypeConflict, Clusters: []string{"west"}, Message: "type"},
	}
	c := meta.FindStatusCondition(ImportConditions(conflicts, 1), ConditionConflict)
	if c.Status != metav1.ConditionTrue || c.Reason != "LabelsConflict,PortConflict,TypeConflict" {
		t.Errorf("Conflict = %s/%s", c.Status, c.Reason)
	}
	for _, cf := range conflicts {
		if !strings.Contains(c.Message, string(cf.Reason)+": "+cf.Message) {
			t.Errorf("message %q lacks %s", c.Message, cf.Reason)
		}
	}
	if err := validReason(c.Reason); err != nil {
		t.Error(err)
	}
	none := meta.FindStatusCondition(ImportConditions(nil, 1), ConditionConflict)
	if none.Status != metav1.ConditionFalse || none.Reason != string(mcsv1beta1.ServiceExportReasonNoConflicts) {
		t.Errorf("no conflicts: %s/%s", none.Status, none.Reason)
	}
}

// validReason checks a reason against metav1.Condition's pattern.
func validReason(r string) error {
	if !regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`).MatchString(r) {
		return fmt.Errorf("reason %q does not match the API's pattern", r)
	}
	return nil
}
