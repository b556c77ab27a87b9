package clusters

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
)

// claim is one Secret or ClusterProfile claiming a cluster name.
type claim struct {
	key     string // queue key
	cluster string
	created metav1.Time
	ref     *corev1.ObjectReference
}

// claimIndex indexes registration Secrets and ClusterProfiles by the
// cluster name they claim, valid or not.
const claimIndex = "claim"

// claimIndexers are the indexes of the Secret and ClusterProfile informers.
func claimIndexers() cache.Indexers {
	return cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, claimIndex: claimedName}
}

// claimedName is the index function of claimIndex.
func claimedName(obj interface{}) ([]string, error) {
	switch o := obj.(type) {
	case *corev1.Secret:
		return []string{ClusterName(o)}, nil
	case *cpv1alpha1.ClusterProfile:
		return []string{o.Name}, nil
	}
	return nil, nil
}

func secretClaim(s *corev1.Secret) claim {
	return claim{key: s.Namespace + "/" + s.Name, cluster: ClusterName(s), created: s.CreationTimestamp, ref: secretRef(s)}
}

func profileClaim(cp *cpv1alpha1.ClusterProfile) claim {
	return claim{key: profileKeyPrefix + cp.Namespace + "/" + cp.Name, cluster: cp.Name, created: cp.CreationTimestamp, ref: profileRef(cp)}
}

// claims lists every registration Secret and watched ClusterProfile.
func (r *Registry) claims() []claim {
	var out []claim
	if all, err := r.secrets.List(labels.Everything()); err == nil {
		for _, s := range all {
			out = append(out, secretClaim(s))
		}
	}
	for _, l := range r.profiles {
		if all, err := l.List(labels.Everything()); err == nil {
			for _, cp := range all {
				out = append(out, profileClaim(cp))
			}
		}
	}
	return out
}

// claimsOf lists the registration Secrets and watched ClusterProfiles that
// claim a cluster name, from claimIndex.
func (r *Registry) claimsOf(cluster string) []claim {
	objs, err := r.secretInformer.GetIndexer().ByIndex(claimIndex, cluster)
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("looking up the registrations of cluster %q: %w", cluster, err))
	}
	for _, inf := range r.profileInformers {
		more, err := inf.GetIndexer().ByIndex(claimIndex, cluster)
		if err != nil {
			utilruntime.HandleError(fmt.Errorf("looking up the ClusterProfiles of cluster %q: %w", cluster, err))
		}
		objs = append(objs, more...)
	}
	out := make([]claim, 0, len(objs))
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Secret:
			out = append(out, secretClaim(o))
		case *cpv1alpha1.ClusterProfile:
			out = append(out, profileClaim(o))
		}
	}
	return out
}

// nameOwner returns the oldest Secret or ClusterProfile claiming a cluster
// name; the queue key breaks ties so every replica agrees.
func (r *Registry) nameOwner(cluster string) *claim {
	var owner *claim
	for _, cl := range r.claimsOf(cluster) {
		if owner == nil || cl.olderThan(owner) {
			owner = &cl
		}
	}
	return owner
}

func (a *claim) olderThan(b *claim) bool {
	if !a.created.Equal(&b.created) {
		return a.created.Before(&b.created)
	}
	return a.key < b.key
}
