package sync

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/record"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// apiAnnotationsLimit is the API server's bound on an object's annotations,
// keys and values together (apimachinery's TotalAnnotationSizeLimitB).
const apiAnnotationsLimit = 256 * 1024

// An export whose exported annotations are at the API's limit, the oldest
// of its service, must not make the ServiceImport every member shares, or
// its own slices, larger than the hub accepts: its annotations are cut, the
// other members' exports are imported as if it had exported nothing extra,
// and an Event says so. So must an export whose annotations only grow past
// the limit when encoded in its export record.
func TestAnExportAtTheAnnotationLimitKeepsTheSharedImportWritable(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{"at the limit", strings.Repeat("x", apiAnnotationsLimit-32-len("example.com/blob"))},
		{"grown by escaping", strings.Repeat("&", 45*1024)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := record.NewFakeRecorder(50)
			f := newFixture(t, Options{Export: ExportPolicy{Mode: ExportServiceExport, Exclude: sets.New(DefaultExcludedNamespaces...)},
				WriteExportStatus: true, Recorder: rec}, nil, nil)
			for i, cluster := range []string{"c1", "c2"} {
				m := f.member(cluster)
				_ = m.services.Add(service("shop", "cart"))
				se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart",
					CreationTimestamp: metav1.NewTime(time.Unix(int64(1000+i), 0))}}
				if cluster == "c1" { // the oldest: the import takes its annotations
					se.Spec.ExportedAnnotations = map[string]string{"example.com/blob": tc.value}
				} else {
					se.Spec.ExportedAnnotations = map[string]string{"example.com/team": "web"}
				}
				m.exports["shop/cart"] = se
				m.slices = append(m.slices, memberSlice("shop", "cart", "cart-"+cluster, 10*i, 2, true))
			}
			f.sync(Key{Cluster: "c1", Namespace: "shop", Name: "cart"})
			f.sync(Key{Cluster: "c2", Namespace: "shop", Name: "cart"})
			f.sync(Key{Namespace: "shop", Name: "cart"})

			for what, size := range hubAnnotationSizes(t, f) {
				if size > apiAnnotationsLimit {
					t.Errorf("%s carries %d bytes of annotations; the hub refuses more than %d", what, size, apiAnnotationsLimit)
				}
			}
			imp, err := f.hubMCS.MulticlusterV1beta1().ServiceImports("shop").Get(f.ctx, "cart", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var clusters []string
			for _, c := range imp.Status.Clusters {
				clusters = append(clusters, c.Cluster)
			}
			if !slices.Equal(clusters, []string{"c1", "c2"}) {
				t.Errorf("import clusters %v, want c1 and c2", clusters)
			}
			cut := strings.Contains(tc.name, "limit")
			if _, ok := imp.Annotations["example.com/blob"]; ok == cut {
				t.Errorf("import has c1's annotation: %v, want %v", ok, !cut)
			}
			said := eventsWith(eventsWith(drainEvents(rec), ReasonInvalidExport), "exported annotations cut")
			if cut && len(said) != 1 {
				t.Errorf("Events saying the annotations were cut: %q, want one", said)
			}
			if !cut && len(said) != 0 {
				t.Errorf("annotations that fit were cut: %q", said)
			}
		})
	}
}

// hubAnnotationSizes returns the annotation size of every object in the
// fixture's hub, by kind and name.
func hubAnnotationSizes(t *testing.T, f *fixture) map[string]int {
	t.Helper()
	sizes := map[string]int{}
	add := func(kind string, m metav1.Object) {
		n := 0
		for k, v := range m.GetAnnotations() {
			n += len(k) + len(v)
		}
		sizes[fmt.Sprintf("%s %s/%s", kind, m.GetNamespace(), m.GetName())] = n
	}
	imps, err := f.hubMCS.MulticlusterV1beta1().ServiceImports("").List(f.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range imps.Items {
		add("ServiceImport", &imps.Items[i])
	}
	sls, err := f.hub.DiscoveryV1().EndpointSlices("").List(f.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range sls.Items {
		add("EndpointSlice", &sls.Items[i])
	}
	svcs, err := f.hub.CoreV1().Services("").List(f.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range svcs.Items {
		add("Service", &svcs.Items[i])
	}
	if len(sizes) == 0 {
		t.Fatal("the hub holds nothing")
	}
	return sizes
}
