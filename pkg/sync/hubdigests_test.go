package sync

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// hubSliceAndEndpoints are a slice and a per-cluster Endpoints as the
// daemon writes them, their content annotated.
func hubSliceAndEndpoints(t *testing.T) (*discoveryv1.EndpointSlice, *corev1.Endpoints) {
	t.Helper()
	src := endpoints.Source{
		Cluster: "east",
		Service: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}},
		Slices: []*endpoints.MemberSlice{endpoints.ProjectSlice(&discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "web-a", Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
			Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{"10.1.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}, Zone: ptr.To("a")},
				{Addresses: []string{"10.1.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
			},
		})},
	}
	plan := endpoints.PlanMember("shop", "web", "east", &src, endpoints.PerClusterMirror, endpoints.MemberView{})
	if len(plan.Slices.Create) != 1 || plan.Endpoints.Create == nil {
		t.Fatalf("want one slice and an Endpoints to create, got %d slices, Endpoints %v", len(plan.Slices.Create), plan.Endpoints.Create)
	}
	return plan.Slices.Create[0], plan.Endpoints.Create
}

// writtenBy gives obj the resourceVersion and managedFields an API server
// would, each manager owning the fields listed.
func writtenBy(obj metav1.Object, owners map[string]string) {
	obj.SetResourceVersion("7")
	var managed []metav1.ManagedFieldsEntry
	for manager, fields := range owners {
		managed = append(managed, metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate,
			FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)})
	}
	obj.SetManagedFields(managed)
}

// The metadata cache takes the digest from the annotation when only we
// wrote the content, and reads the object whole otherwise: the two agree.
func TestDigestMetaReadsInFullOnlyWhatAnotherManagerWrote(t *testing.T) {
	slice, eps := hubSliceAndEndpoints(t)
	const ours = `{"f:metadata":{"f:annotations":{"f:endpoint-aggregator.io/content":{}}},"f:endpoints":{},"f:ports":{},"f:addressType":{}}`
	const oursEndpoints = `{"f:metadata":{"f:annotations":{"f:endpoint-aggregator.io/content":{}}},"f:subsets":{}}`
	cases := []struct {
		name     string
		resource string
		obj      runtime.Object
		owners   map[string]string
		strip    bool // the content annotation removed
		edit     bool // the content changed, the annotation left as it was
		readErr  error
		wantRead bool
		wantHash bool // a known hash: the content's
	}{
		{name: "slice written by us", resource: resourceEndpointSlice, obj: slice, owners: map[string]string{fieldManager: ours}, wantHash: true},
		{name: "slice labelled by another", resource: resourceEndpointSlice, obj: slice,
			owners: map[string]string{fieldManager: ours, "kubectl-label": `{"f:metadata":{"f:labels":{"f:team":{}}}}`}, wantHash: true},
		{name: "slice endpoints written by another", resource: resourceEndpointSlice, obj: slice,
			owners: map[string]string{fieldManager: ours, "kubectl-edit": `{"f:endpoints":{}}`}, wantRead: true, wantHash: true},
		{name: "slice written by an earlier release", resource: resourceEndpointSlice, obj: slice,
			owners: map[string]string{legacyFieldManager: ours}, wantRead: true, wantHash: true},
		{name: "slice endpoints changed by another, our annotation left", resource: resourceEndpointSlice, obj: slice,
			owners: map[string]string{fieldManager: ours, legacyFieldManager: `{"f:endpoints":{}}`}, edit: true, wantRead: true},
		{name: "slice annotation written by another", resource: resourceEndpointSlice, obj: slice,
			owners: map[string]string{"kubectl-edit": `{"f:metadata":{"f:annotations":{"f:endpoint-aggregator.io/content":{}}}}`}, wantRead: true, wantHash: true},
		// Read in full and rewritten, to annotate it, in place.
		{name: "slice without a digest", resource: resourceEndpointSlice, obj: slice, owners: map[string]string{fieldManager: ours}, strip: true, wantRead: true},
		{name: "slice unreadable", resource: resourceEndpointSlice, obj: slice, owners: map[string]string{"velero": ours}, readErr: errors.New("timeout"), wantRead: true},
		{name: "Endpoints written by us", resource: resourceEndpoints, obj: eps, owners: map[string]string{fieldManager: oursEndpoints}, wantHash: true},
		{name: "Endpoints subsets written by another", resource: resourceEndpoints, obj: eps,
			owners: map[string]string{"kubectl-edit": `{"f:subsets":{}}`}, wantRead: true, wantHash: true},
		{name: "Endpoints subsets changed by another, our annotation left", resource: resourceEndpoints, obj: eps,
			owners: map[string]string{"kubectl-edit": `{"f:subsets":{}}`}, edit: true, wantRead: true},
		{name: "Endpoints without a digest", resource: resourceEndpoints, obj: eps, owners: map[string]string{fieldManager: oursEndpoints}, strip: true, wantRead: true},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			obj := tt.obj.DeepCopyObject()
			m := obj.(metav1.Object)
			writtenBy(m, tt.owners)
			if tt.edit {
				switch o := obj.(type) {
				case *discoveryv1.EndpointSlice:
					o.Endpoints = o.Endpoints[1:]
				case *corev1.Endpoints:
					o.Subsets[0].Addresses = nil
				}
			}
			if tt.strip {
				annotations := m.GetAnnotations()
				delete(annotations, endpoints.AnnotationContent)
				m.SetAnnotations(annotations)
			}
			reads := prometheus.NewCounter(prometheus.CounterOpts{Name: "reads"})
			read := func(_ context.Context, resource, namespace, name string) (runtime.Object, error) {
				if resource != tt.resource || namespace != m.GetNamespace() || name != m.GetName() {
					t.Errorf("read %s %s/%s", resource, namespace, name)
				}
				return obj.DeepCopyObject(), tt.readErr
			}
			got, err := digestMeta(tt.resource, read, reads)(metaOnly(obj))
			if err != nil {
				t.Fatal(err)
			}
			if n := testutil.ToFloat64(reads); (n == 1) != tt.wantRead || n > 1 {
				t.Errorf("read in full %v times, want a read: %v", n, tt.wantRead)
			}
			// The digest of the content as it is, whatever its annotation.
			var want runtime.Object
			switch o := obj.DeepCopyObject().(type) {
			case *discoveryv1.EndpointSlice:
				want = endpoints.DigestSlice(o)
			case *corev1.Endpoints:
				want = endpoints.DigestEndpoints(o)
			}
			switch d := got.(type) {
			case *endpoints.SliceDigest:
				w := want.(*endpoints.SliceDigest)
				if tt.wantHash != (d.Hash == w.Hash) || !tt.wantHash && d.Hash != 0 {
					t.Errorf("hash %x, the content's %x, want it known: %v", d.Hash, w.Hash, tt.wantHash)
				}
				if tt.readErr == nil && (d.Group != w.Group || d.AddressType != w.AddressType || d.Unzoned != w.Unzoned ||
					!apiequality.Semantic.DeepEqual(d.AddressKeys, w.AddressKeys)) {
					t.Errorf("digest %+v, the content's %+v", d, w)
				}
			case *endpoints.EndpointsDigest:
				w := want.(*endpoints.EndpointsDigest)
				if tt.wantHash != (d.Hash == w.Hash) || !tt.wantHash && d.Hash != 0 {
					t.Errorf("hash %x, the content's %x, want it known: %v", d.Hash, w.Hash, tt.wantHash)
				}
			default:
				t.Fatalf("cached %T", got)
			}
			gm := got.(metav1.Object)
			if gm.GetManagedFields() != nil || gm.GetResourceVersion() != "7" || gm.GetName() != m.GetName() {
				t.Errorf("metadata %+v", gm)
			}
			if _, ok := gm.GetAnnotations()[endpoints.AnnotationContent]; ok {
				t.Error("the digest keeps the content annotation")
			}
		})
	}
}
