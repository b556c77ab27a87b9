package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// TestAnExportAtTheAPILimitsDoesNotBlockItsPeers is the report of issue
// 37 on real API servers: east, the oldest export of web, exports 256 KiB
// less 32 bytes of annotations, which its own API server accepts on the
// ServiceExport's spec, and west exports web honestly; east also exports
// amp, whose 45 KiB of '&' would grow sixfold if escaped in the export
// record. The hub's API server must accept every write of the daemon (409
// and 404 aside), the import of web must list both clusters without east's
// annotation, with an InvalidExport Event saying it was cut, and amp must
// be imported with its annotation whole.
func TestAnExportAtTheAPILimitsDoesNotBlockItsPeers(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	east, west := mcsMember(e.east), mcsMember(e.west)
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	rejected := &hubRejections{}
	e.startDaemonRecording(t, rejected, func(o *app.Options) { o.ExportMode = string(easync.ExportServiceExport) })

	exportWith := func(m member, name string, annotations map[string]string) {
		t.Helper()
		m.service(t, name, nil)
		se := &mcsv1beta1.ServiceExport{
			ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: name},
			Spec:       mcsv1beta1.ServiceExportSpec{ExportedAnnotations: annotations},
		}
		if _, err := m.mcs.MulticlusterV1beta1().ServiceExports(appNamespace).Create(context.Background(), se, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: creating the ServiceExport %s: %v", m.name, name, err)
		}
		applySlices(t, m.kube, name, endpointSlice(name, name+"-1", map[string]int{"east": 1, "west": 2}[m.name], 2, true))
	}
	blob := strings.Repeat("x", 256*1024-32-len("example.com/blob"))
	exportWith(east, "web", map[string]string{"example.com/blob": blob})
	time.Sleep(1100 * time.Millisecond) // creation times have a one-second resolution: east is the oldest
	exportWith(west, "web", map[string]string{"example.com/team": "web"})
	exportWith(east, "amp", map[string]string{"example.com/amp": strings.Repeat("&", 45*1024)})

	imported := func(name string, clusters ...string) {
		t.Helper()
		eventually(t, waitTimeout, func() error {
			imp, err := e.serviceImport(t, name)
			if err != nil {
				return err
			}
			var got []string
			for _, c := range imp.Status.Clusters {
				got = append(got, c.Cluster)
			}
			if !slices.Equal(got, clusters) {
				return fmt.Errorf("import %s lists %v, want %v", name, got, clusters)
			}
			return nil
		})
	}
	imported("web", "east", "west")
	imported("amp", "east")
	if imp, err := e.serviceImport(t, "web"); err != nil {
		t.Fatal(err)
	} else if _, ok := imp.Annotations["example.com/blob"]; ok {
		t.Error("the import of web carries east's annotation at the limit")
	}
	if imp, err := e.serviceImport(t, "amp"); err != nil {
		t.Fatal(err)
	} else if len(imp.Annotations["example.com/amp"]) != 45*1024 {
		t.Errorf("the import of amp carries %d bytes of its annotation, want %d", len(imp.Annotations["example.com/amp"]), 45*1024)
	}
	eventually(t, waitTimeout, func() error {
		if ev := eventsAbout(t, e, appNamespace, "ServiceImport", "web"); !strings.Contains(ev, easync.ReasonInvalidExport+": cluster east") || !strings.Contains(ev, "exported annotations cut") {
			return fmt.Errorf("no InvalidExport Event saying east's annotations were cut; Events:\n%s", ev)
		}
		return nil
	})
	if got := rejected.all(); len(got) > 0 {
		t.Errorf("the hub refused writes of the daemon:%s", rejected)
	}
}
