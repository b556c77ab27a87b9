package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	stdsync "sync"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// Helpers of the fault-injection tests (faults_test.go).

const labelMCSSourceCluster = "multicluster.kubernetes.io/source-cluster"

// registerViaProxy registers a member whose kubeconfig reaches its apiserver
// through a fault proxy, so the test can cut the daemon off that member
// while the test's own client keeps working.
func (e *env) registerViaProxy(t *testing.T, c *testenv.Cluster) *testenv.Proxy {
	t.Helper()
	p := testenv.StartProxyT(t, c)
	kc, err := c.KubeconfigVia(p.URL())
	if err != nil {
		t.Fatal(err)
	}
	e.register(t, c.Name, c.Name, kc)
	return p
}

// deleteWatch counts DELETED events of the hub objects sourced from one
// cluster: per-cluster Services and Endpoints, and MCS EndpointSlices.
type deleteWatch struct {
	cluster string
	cancel  context.CancelFunc
	wg      stdsync.WaitGroup

	mu      stdsync.Mutex
	deleted []string
	broken  []string
}

// watchDeletes starts a deleteWatch; it runs until stop or the test ends.
// It must start after the objects to watch exist, and the hub must stay up.
func (e *env) watchDeletes(t *testing.T, cluster string) *deleteWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &deleteWatch{cluster: cluster, cancel: cancel}
	hub := e.hub.Client
	perCluster := endpoints.LabelSourceCluster + "=" + cluster
	mcs := labelMCSSourceCluster + "=" + cluster
	type resource struct {
		kind, selector string
		list           func(context.Context, metav1.ListOptions) (string, error)
		watch          func(context.Context, metav1.ListOptions) (watch.Interface, error)
	}
	for _, r := range []resource{
		{"Service", perCluster,
			func(ctx context.Context, o metav1.ListOptions) (string, error) {
				l, err := hub.CoreV1().Services("").List(ctx, o)
				return listRV(l, err)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return hub.CoreV1().Services("").Watch(ctx, o)
			}},
		{"Endpoints", perCluster,
			func(ctx context.Context, o metav1.ListOptions) (string, error) {
				l, err := hub.CoreV1().Endpoints("").List(ctx, o)
				return listRV(l, err)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return hub.CoreV1().Endpoints("").Watch(ctx, o)
			}},
		{"EndpointSlice", mcs,
			func(ctx context.Context, o metav1.ListOptions) (string, error) {
				l, err := hub.DiscoveryV1().EndpointSlices("").List(ctx, o)
				return listRV(l, err)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return hub.DiscoveryV1().EndpointSlices("").Watch(ctx, o)
			}},
	} {
		rv, err := r.list(ctx, metav1.ListOptions{LabelSelector: r.selector})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		selector := r.selector
		lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return r.watch(ctx, o)
		}}
		rw, err := watchtools.NewRetryWatcherWithContext(ctx, rv, lw)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		w.wg.Go(func() {
			defer rw.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-rw.ResultChan():
					if !ok {
						if ctx.Err() == nil {
							w.record(&w.broken, r.kind+": watch ended")
						}
						return
					}
					switch ev.Type {
					case watch.Deleted:
						name := "?"
						if m, ok := ev.Object.(metav1.Object); ok {
							name = m.GetNamespace() + "/" + m.GetName()
						}
						w.record(&w.deleted, r.kind+"/"+name)
					case watch.Error:
						w.record(&w.broken, fmt.Sprintf("%s: %v", r.kind, ev.Object))
					}
				}
			}
		})
	}
	t.Cleanup(w.stop)
	return w
}

func listRV(l metav1.ListInterface, err error) (string, error) {
	if err != nil {
		return "", err
	}
	return l.GetResourceVersion(), nil
}

func (w *deleteWatch) record(to *[]string, s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	*to = append(*to, s)
}

func (w *deleteWatch) stop() {
	w.cancel()
	w.wg.Wait()
}

// check fails the test if an object of the cluster was deleted or the watch
// broke (then deletes may have gone unseen).
func (w *deleteWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.broken) > 0 {
		t.Errorf("watch of %s's hub objects broke, deletes may be missed: %v", w.cluster, w.broken)
	}
	if len(w.deleted) > 0 {
		t.Errorf("%d hub objects of %s were deleted, want none: %v", len(w.deleted), w.cluster, w.deleted)
	}
}

// clusterObjects is the subset of ourObjects sourced from one cluster.
func (e *env) clusterObjects(t *testing.T, cluster string) map[string]hubObject {
	t.Helper()
	out := map[string]hubObject{}
	for k, o := range e.ourObjects(t) {
		if o.cluster == cluster {
			out[k] = o
		}
	}
	return out
}

// memberAddresses returns the sorted endpoint addresses of a member service.
func memberAddresses(t *testing.T, c kubernetes.Interface, svc string) []string {
	t.Helper()
	list, err := c.DiscoveryV1().EndpointSlices(appNamespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + svc,
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		for _, ep := range s.Endpoints {
			out = append(out, ep.Addresses...)
		}
	}
	sort.Strings(out)
	return out
}

// sliceSet checks that the hub holds exactly one MCS slice set for svc from
// cluster: every address of want exactly once, nothing else, every slice
// non-empty and within the size limit. It returns the number of slices.
func (e *env) sliceSet(t *testing.T, svc, cluster string, want []string) (int, error) {
	t.Helper()
	list, err := e.hub.Client.DiscoveryV1().EndpointSlices(appNamespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: "multicluster.kubernetes.io/service-name=" + svc + "," + labelMCSSourceCluster + "=" + cluster + "," +
			discoveryv1.LabelManagedBy + "=" + endpoints.SliceManagedByValue,
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range list.Items {
		if len(s.Endpoints) == 0 && len(want) > 0 {
			return 0, fmt.Errorf("hub slice %s of %s/%s is empty", s.Name, svc, cluster)
		}
		if len(s.Endpoints) > endpoints.MaxEndpointsPerSlice {
			return 0, fmt.Errorf("hub slice %s of %s/%s has %d endpoints", s.Name, svc, cluster, len(s.Endpoints))
		}
		for _, ep := range s.Endpoints {
			got = append(got, ep.Addresses...)
		}
	}
	sort.Strings(got)
	if len(got) != len(want) || strings.Join(got, ",") != strings.Join(want, ",") {
		return 0, fmt.Errorf("hub slices of %s from %s: %d slices with %d addresses (%d distinct), member has %d",
			svc, cluster, len(list.Items), len(got), countDistinct(got), len(want))
	}
	return len(list.Items), nil
}

func countDistinct(s []string) int {
	m := map[string]bool{}
	for _, v := range s {
		m[v] = true
	}
	return len(m)
}

// slicesOf builds n endpoints of svc on 10.<octet>.x.y in slices of at most
// 100, named <svc>-<prefix>-<i>, the first notReady of them not ready.
func slicesOf(svc, prefix string, octet, n, notReady int) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for i := 0; i*100 < n; i++ {
		s := endpointSliceAt(svc, fmt.Sprintf("%s-%s-%d", svc, prefix, i+1), octet, i*100, min(100, n-i*100), true)
		out = append(out, markNotReady(s, notReady-i*100))
	}
	return out
}

// markNotReady makes the first n endpoints of s not ready (and not serving).
func markNotReady(s *discoveryv1.EndpointSlice, n int) *discoveryv1.EndpointSlice {
	for j := range s.Endpoints[:max(0, min(n, len(s.Endpoints)))] {
		s.Endpoints[j].Conditions.Ready = ptr.To(false)
		s.Endpoints[j].Conditions.Serving = ptr.To(false)
	}
	return s
}

// startDaemonViaProxy is startDaemon with the daemon's hub connection going
// through a fault proxy. Blocking the proxy before restarting the hub's
// apiserver closes the daemon's watches, which kube-apiserver's graceful
// shutdown would otherwise wait for (up to --request-timeout, longer than
// testenv waits); to the daemon it is the same outage.
func (e *env) startDaemonViaProxy(t *testing.T, mutate func(*app.Options)) (*daemon, *testenv.Proxy) {
	t.Helper()
	p := testenv.StartProxyT(t, e.hub)
	cfg := rest.CopyConfig(e.hub.Config)
	cfg.Host = p.URL()
	return startDaemonOn(t, t, cfg, mutate), p
}
