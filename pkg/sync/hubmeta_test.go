package sync

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
)

// metadataOf serves a typed client's EndpointSlices and Endpoints as an
// API server serves metadata-only requests: the fakes have no metadata
// view of their own.
func metadataOf(hub kubernetes.Interface) metadata.Interface { return typedMetadata{hub: hub} }

type typedMetadata struct{ hub kubernetes.Interface }

func (m typedMetadata) Resource(gvr schema.GroupVersionResource) metadata.Getter {
	return typedMetaResource{hub: m.hub, resource: gvr.Resource}
}

type typedMetaResource struct {
	hub                 kubernetes.Interface
	resource, namespace string
}

var errNotServed = errors.New("not served by the test's metadata view")

func (r typedMetaResource) Namespace(ns string) metadata.ResourceInterface {
	r.namespace = ns
	return r
}

func (r typedMetaResource) List(ctx context.Context, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	out := &metav1.PartialObjectMetadataList{}
	var items []runtime.Object
	switch r.resource {
	case resourceEndpointSlice:
		l, err := r.hub.DiscoveryV1().EndpointSlices(r.namespace).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		out.ResourceVersion = l.ResourceVersion
		for i := range l.Items {
			items = append(items, &l.Items[i])
		}
	case resourceEndpoints:
		l, err := r.hub.CoreV1().Endpoints(r.namespace).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		out.ResourceVersion = l.ResourceVersion
		for i := range l.Items {
			items = append(items, &l.Items[i])
		}
	default:
		return nil, errNotServed
	}
	for _, o := range items {
		out.Items = append(out.Items, *metaOnly(o))
	}
	return out, nil
}

func (r typedMetaResource) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	var w watch.Interface
	var err error
	switch r.resource {
	case resourceEndpointSlice:
		w, err = r.hub.DiscoveryV1().EndpointSlices(r.namespace).Watch(ctx, opts)
	case resourceEndpoints:
		w, err = r.hub.CoreV1().Endpoints(r.namespace).Watch(ctx, opts)
	default:
		return nil, errNotServed
	}
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
		if ev.Type != watch.Error && ev.Type != watch.Bookmark {
			ev.Object = metaOnly(ev.Object)
		}
		return ev, true
	}), nil
}

// metaOnly is the metadata of a typed object, as the API server sends it.
func metaOnly(o runtime.Object) *metav1.PartialObjectMetadata {
	out := &metav1.PartialObjectMetadata{}
	switch t := o.(type) {
	case *discoveryv1.EndpointSlice:
		out.TypeMeta = metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"}
		t.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	case *corev1.Endpoints:
		out.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Endpoints"}
		t.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	}
	return out
}

func (r typedMetaResource) Get(context.Context, string, metav1.GetOptions, ...string) (*metav1.PartialObjectMetadata, error) {
	return nil, errNotServed
}

func (r typedMetaResource) Delete(context.Context, string, metav1.DeleteOptions, ...string) error {
	return errNotServed
}

func (r typedMetaResource) DeleteCollection(context.Context, metav1.DeleteOptions, metav1.ListOptions) error {
	return errNotServed
}

func (r typedMetaResource) Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*metav1.PartialObjectMetadata, error) {
	return nil, errNotServed
}
