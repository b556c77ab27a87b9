package clusters

import (
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// nopHandler ignores the registry's callbacks.
type nopHandler struct{}

func (nopHandler) EventHandlers(string) (cache.ResourceEventHandler, cache.ResourceEventHandler, cache.ResourceEventHandler) {
	return nil, nil, nil
}
func (nopHandler) ClusterSynced(string)              {}
func (nopHandler) ClusterSyncTimedOut(string)        {}
func (nopHandler) ClusterRemoved(string)             {}
func (nopHandler) ClusterHealthChanged(string, bool) {}

// BenchmarkRegister times the sync of one registration Secret whose member
// is not registered yet, with n registration Secrets in the hub cache: what
// each registration costs a cold start. The Secrets are put straight into the
// informer's store and member clients are fakes. Between iterations, untimed,
// the new member's connection is stopped and the registry forgets it.
func BenchmarkRegister(b *testing.B) {
	klog.SetLogger(logr.Discard())
	defer klog.ClearLogger()
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("registrations=%d", n), func(b *testing.B) {
			r := NewRegistry(kubefake.NewClientset(), &record.FakeRecorder{}, nopHandler{}, Options{
				Namespace: ns,
				NewClients: func(*rest.Config) (Clients, error) {
					return Clients{Kube: kubefake.NewClientset()}, nil
				},
			})
			defer r.queue.ShutDown()
			keys := make([]string, n)
			for i := range n {
				s := secret(fmt.Sprintf("s%05d", i), fmt.Sprintf("m%05d", i), tokenKubeconfig, 0)
				if err := r.secretInformer.GetIndexer().Add(s); err != nil {
					b.Fatal(err)
				}
				keys[i] = ns + "/" + s.Name
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				key := keys[i%n]
				if err := r.sync(key); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				r.forget(b, key)
				b.StartTimer()
			}
		})
	}
}

// forget drops, without the Events and callbacks of remove, the member a
// registration registered, and stops its connection.
func (r *Registry) forget(b *testing.B, key string) {
	r.mu.Lock()
	cluster, ok := r.bySecret[key]
	m := r.members[cluster]
	delete(r.bySecret, key)
	delete(r.members, cluster)
	r.mu.Unlock()
	if !ok || m == nil || m.active == nil {
		b.Fatalf("%s registered no connected member", key)
	}
	m.shutdown()
}
