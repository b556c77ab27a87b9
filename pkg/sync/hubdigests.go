package sync

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// The hub caches of our EndpointSlices and Endpoints watch their metadata
// only: the daemon never decodes the echoes of its own writes. Each object
// carries its digest in endpoints.AnnotationContent, which the cache takes
// when the metadata shows that no one but us wrote the content. An object
// whose content another manager wrote, or without a digest we can read, is
// read in full, once per event (a relist reads each such object again),
// and digested from its content; when its annotation does not describe
// that content, it is rewritten, with its managedFields reset.
//
// The read happens in the informer's transform, which holds up that
// informer's other events meanwhile (up to fullReadTimeout each): it is
// for the rare foreign write, and once per object at the first start after
// an upgrade from a release that wrote no digests.

// fullReadTimeout bounds the read of one object in full.
const fullReadTimeout = 30 * time.Second

// contentFields are, by resource, the managedFields entries of the fields
// a digest describes: a manager other than us owning one of them may have
// written content the annotation does not describe.
var contentFields = map[string][]string{
	resourceEndpointSlice: {`"f:endpoints"`, `"f:ports"`, `"f:addressType"`, `"f:` + endpoints.AnnotationContent + `"`},
	resourceEndpoints:     {`"f:subsets"`, `"f:` + endpoints.AnnotationContent + `"`},
}

// fullReader reads one of our hub objects in full.
type fullReader func(ctx context.Context, resource, namespace, name string) (runtime.Object, error)

func newFullReader(hub kubernetes.Interface) fullReader {
	return func(ctx context.Context, resource, namespace, name string) (runtime.Object, error) {
		if resource == resourceEndpoints {
			return hub.CoreV1().Endpoints(namespace).Get(ctx, name, metav1.GetOptions{})
		}
		return hub.DiscoveryV1().EndpointSlices(namespace).Get(ctx, name, metav1.GetOptions{})
	}
}

// digestMeta is the transform of the metadata cache of resource: it turns
// an object's metadata into its digest (see above).
func digestMeta(resource string, read fullReader, fullReads prometheus.Counter) cache.TransformFunc {
	fields := contentFields[resource]
	return func(obj interface{}) (interface{}, error) {
		m, ok := obj.(*metav1.PartialObjectMetadata)
		if !ok {
			return obj, nil // a digest already
		}
		ours := contentWrittenByUs(m.ManagedFields, fields)
		m.ManagedFields = nil
		if ours {
			if d, ok := digestFromMeta(resource, m.ObjectMeta); ok {
				return d, nil
			}
		}
		fullReads.Inc()
		ctx, cancel := context.WithTimeout(context.Background(), fullReadTimeout)
		defer cancel()
		full, err := read(ctx, resource, m.Namespace, m.Name)
		if err != nil {
			// Its content unknown, the digest matches no plan: the object
			// is rewritten, or deleted if it is gone.
			klog.V(2).InfoS("Could not read a hub object in full; it will be rewritten", "resource", resource, "object", klog.KObj(m), "err", err)
			return unknownDigest(resource, m.ObjectMeta), nil
		}
		return digestRead(full), nil
	}
}

// digestRead is the digest of one of our objects read in full; an object
// whose annotation does not describe its content (one written before the
// daemon annotated its objects, say) gets Hash 0, so that it is rewritten.
func digestRead(obj runtime.Object) runtime.Object {
	if m, err := metaOf(obj); err == nil {
		m.SetManagedFields(nil)
	}
	switch o := obj.(type) {
	case *discoveryv1.EndpointSlice:
		return endpoints.DigestSliceRead(o)
	case *corev1.Endpoints:
		return endpoints.DigestEndpointsRead(o)
	}
	return obj
}

// contentWrittenByUs reports whether no manager but us owns any of fields.
func contentWrittenByUs(managed []metav1.ManagedFieldsEntry, fields []string) bool {
	for _, e := range managed {
		if e.Manager == fieldManager {
			continue
		}
		owned := e.FieldsV1.GetRawString()
		for _, f := range fields {
			if strings.Contains(owned, f) {
				return false
			}
		}
	}
	return true
}

func digestFromMeta(resource string, meta metav1.ObjectMeta) (hubObject, bool) {
	if resource == resourceEndpoints {
		d, ok := endpoints.EndpointsDigestFromMeta(meta)
		return d, ok
	}
	d, ok := endpoints.SliceDigestFromMeta(meta)
	return d, ok
}

// unknownDigest is the digest of an object whose content is unknown.
func unknownDigest(resource string, meta metav1.ObjectMeta) hubObject {
	if resource == resourceEndpoints {
		return endpoints.UnknownEndpointsDigest(meta)
	}
	return endpoints.UnknownSliceDigest(meta)
}
