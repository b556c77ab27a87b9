package sync

import (
	"cmp"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// The hub resources the daemon writes, as they name its objects and label
// its metrics.
const (
	resourceService       = "services"
	resourceEndpoints     = "endpoints"
	resourceEndpointSlice = "endpointslices"
	resourceServiceImport = "serviceimports"
	resourceNamespace     = "namespaces"
)

// fieldManager names the daemon in managedFields. Releases before the
// content annotation (hubdigests.go) wrote as legacyFieldManager: they keep
// an annotation they do not know as it was, so the content of an object
// one of them wrote, in a rolling upgrade or after a rollback, is read in
// full rather than taken from an annotation that may be stale.
const fieldManager = "endpoint-aggregator.io"

// legacyFieldManager is the field manager of earlier releases.
const legacyFieldManager = "endpoint-aggregator"

// Key names one unit of work. With a Cluster it is one member service; with an
// empty Cluster it is the clusterset service merged from every member.
type Key struct {
	Cluster   string
	Namespace string
	Name      string
}

// ClusterSet returns the clusterset key of k's service.
func (k Key) ClusterSet() Key { return Key{Namespace: k.Namespace, Name: k.Name} }

// IsClusterSet reports whether k is a clusterset key.
func (k Key) IsClusterSet() bool { return k.Cluster == "" }

func (k Key) String() string {
	if k.IsClusterSet() {
		return "clusterset/" + k.Namespace + "/" + k.Name
	}
	return k.Cluster + "/" + k.Namespace + "/" + k.Name
}

// ownerOf maps one of our hub objects of resource to the key that owns it:
// per-cluster objects and MCS slices to their member service's key, the
// derived Service and the ServiceImport to the clusterset key. ok is false
// for objects no key owns.
func ownerOf(resource string, obj metav1.Object) (Key, bool) {
	if resource == resourceServiceImport {
		return Key{Namespace: obj.GetNamespace(), Name: obj.GetName()}, true
	}
	return hubKey(obj)
}

// hubKey maps one of our hub objects to the key that owns it. ok is false for
// objects no key owns (not ours, or missing labels).
func hubKey(obj metav1.Object) (Key, bool) {
	l := obj.GetLabels()
	ns := obj.GetNamespace()
	switch {
	case l[endpoints.LabelSourceCluster] != "" && l[endpoints.LabelServiceName] != "":
		// Per-cluster Service or Endpoints.
		return Key{Cluster: l[endpoints.LabelSourceCluster], Namespace: ns, Name: l[endpoints.LabelServiceName]}, true
	case l[mcsv1beta1.LabelSourceCluster] != "" && l[mcsv1beta1.LabelServiceName] != "":
		// MCS EndpointSlice.
		return Key{Cluster: l[mcsv1beta1.LabelSourceCluster], Namespace: ns, Name: l[mcsv1beta1.LabelServiceName]}, true
	case l[mcsv1beta1.LabelServiceName] != "":
		// Derived Service.
		return Key{Namespace: ns, Name: l[mcsv1beta1.LabelServiceName]}, true
	}
	return Key{}, false
}

// hubObject is a typed hub object: a pointer to an API struct.
type hubObject interface {
	metav1.Object
	runtime.Object
}

// ownedBy reports whether a hub object is ours and belongs to key.
func ownedBy(obj metav1.Object, key Key) bool {
	if obj.GetLabels()[endpoints.LabelManagedBy] != endpoints.ManagedByValue {
		return false
	}
	if k, ok := hubKey(obj); ok {
		return k == key
	}
	// A ServiceImport carries no source labels: its name is the key's.
	return key.IsClusterSet() && obj.GetName() == key.Name && obj.GetNamespace() == key.Namespace
}

// sliceSource is the source key of one of our slices, "" for other kinds.
func sliceSource(resource string, obj hubObject) string {
	if resource != resourceEndpointSlice {
		return ""
	}
	if k, ok := hubKey(obj); ok && !k.IsClusterSet() {
		return sourceKey(k)
	}
	return ""
}

func sourceKey(k Key) string { return k.Namespace + "/" + k.Name + "/" + k.Cluster }

// compareKeys orders keys by cluster, namespace and name.
func compareKeys(a, b Key) int {
	return cmp.Or(strings.Compare(a.Cluster, b.Cluster), strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

// serviceKey is the byService index key of the sources of k's service.
func serviceKey(k Key) string { return k.Namespace + "/" + k.Name }

// metaOf is the metadata of an informer's object, or of the last state of
// one deleted unseen.
func metaOf(obj interface{}) (metav1.Object, error) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("not an object: %T", obj)
	}
	return m, nil
}
