package endpoints

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestFitExportCutsWhatTheHubCannotHold(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	many := func(n, size int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("example.com/k%d", i)] = strings.Repeat("v", size)
		}
		return m
	}
	manyPorts := &corev1.Service{}
	for i := range 10000 {
		manyPorts.Spec.Ports = append(manyPorts.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("port-%d", i), Port: int32(i + 1)})
	}
	for _, tc := range []struct {
		name                string
		e                   Export
		labels, annotations bool // kept
		cut                 int
		refused             bool
	}{
		{"small", Export{Service: svc, ExportedLabels: many(3, 10), ExportedAnnotations: many(3, 100)}, true, true, 0, false},
		{"annotations at the limit", Export{Service: svc, ExportedLabels: many(3, 10), ExportedAnnotations: many(1, maxAnnotationsSize-32)}, true, false, 1, false},
		// Many keys with empty values: the list of keys doubles them.
		{"annotation keys", Export{Service: svc, ExportedAnnotations: many(8000, 0)}, false, false, 1, false},
		// Labels are bounded one by one; their keys are listed on the
		// import and they are in the record.
		{"labels", Export{Service: svc, ExportedLabels: many(5000, 63), ExportedAnnotations: many(1, 10)}, false, false, 2, false},
		{"ports", Export{Service: manyPorts}, false, false, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fit, record, cut, refused := FitExport(tc.e)
			if (len(fit.ExportedLabels) > 0) != tc.labels || (len(fit.ExportedAnnotations) > 0) != tc.annotations {
				t.Errorf("kept %d labels, %d annotations; want labels %v, annotations %v", len(fit.ExportedLabels), len(fit.ExportedAnnotations), tc.labels, tc.annotations)
			}
			if len(cut) != tc.cut || (refused != "") != tc.refused {
				t.Errorf("cut %q, refused %q; want %d cut, refused %v", cut, refused, tc.cut, tc.refused)
			}
			if refused != "" {
				return
			}
			if record != ExportRecord(fit) {
				t.Error("the record returned is not the fit export's")
			}
			if n := len(record); n > exportBudget {
				t.Errorf("export record of %d bytes, over %d", n, exportBudget)
			}
			imp := MergeImport("ns", "svc", []Export{fit}).Import
			n := 0
			for k, v := range imp.Annotations {
				n += len(k) + len(v)
			}
			if n > maxAnnotationsSize {
				t.Errorf("import annotations of %d bytes, over the API's %d", n, maxAnnotationsSize)
			}
		})
	}
}
