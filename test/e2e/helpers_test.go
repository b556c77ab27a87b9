package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

const (
	daemonNamespace = "endpoint-aggregator"
	appNamespace    = "shop"
	waitTimeout     = 60 * time.Second
)

// env is a hub and two members, east and west, with the daemon's namespace
// and the app namespace created everywhere it matters.
type env struct {
	hub, east, west *testenv.Cluster
	hubMCS          mcsclientset.Interface
}

func startEnv(t *testing.T) *env {
	t.Helper()
	cs := testenv.StartAllT(t,
		testenv.Spec{Name: "hub", Options: testenv.Options{CRDs: true}},
		testenv.Spec{Name: "east", Options: testenv.Options{CRDs: true}},
		testenv.Spec{Name: "west", Options: testenv.Options{CRDs: true}},
	)
	e := &env{hub: cs[0], east: cs[1], west: cs[2]}
	e.hubMCS = mcsclientset.NewForConfigOrDie(e.hub.Config)
	ctx := context.Background()
	for _, c := range cs {
		mustCreateNamespace(t, c.Client, appNamespace)
	}
	mustCreateNamespace(t, e.hub.Client, daemonNamespace)
	_ = ctx
	return e
}

func mustCreateNamespace(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	_, err := c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// register writes the registration Secret of a member into the hub.
func (e *env) register(t *testing.T, secretName, cluster string, kubeconfig []byte) {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   daemonNamespace,
			Name:        secretName,
			Labels:      map[string]string{clusters.LabelMemberCluster: "true"},
			Annotations: map[string]string{clusters.AnnotationClusterName: cluster},
		},
		Data: map[string][]byte{clusters.KubeconfigKey: kubeconfig},
	}
	if _, err := e.hub.Client.CoreV1().Secrets(daemonNamespace).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// writeCounter counts mutating requests a client sends, except Events and
// the leader election Lease: the writes of hub objects.
type writeCounter struct{ n atomic.Int64 }

func (w *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method != http.MethodGet && !strings.Contains(r.URL.Path, "/events") && !strings.Contains(r.URL.Path, "/leases") {
			w.n.Add(1)
		}
		return rt.RoundTrip(r)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// daemon is an in-process endpoint-aggregator.
type daemon struct {
	*app.Daemon
	writes *writeCounter
	cancel context.CancelFunc
	done   chan error
	owner  testing.TB
}

// startDaemon runs the daemon against the hub until the test ends or stop is
// called. It counts every non-Event write it sends to the hub.
func (e *env) startDaemon(t *testing.T, mutate func(*app.Options)) *daemon {
	return e.startDaemonFor(t, t, mutate)
}

// startDaemonFor is startDaemon whose daemon lives until owner ends, so a
// subtest can start a daemon that later steps keep using.
func (e *env) startDaemonFor(t *testing.T, owner testing.TB, mutate func(*app.Options)) *daemon {
	t.Helper()
	return startDaemonOn(t, owner, e.hub.Config, mutate)
}

// startDaemonOn starts a daemon that reaches the hub through hubCfg (a copy
// is made), until owner ends.
func startDaemonOn(t *testing.T, owner testing.TB, hubCfg *rest.Config, mutate func(*app.Options)) *daemon {
	t.Helper()
	o := app.NewOptions()
	o.Namespace = daemonNamespace
	o.ExportMode = string(easync.ExportAnnotation)
	o.MetricsBindAddress = "0"
	o.MemberSyncTimeout = 10 * time.Second
	if mutate != nil {
		mutate(o)
	}
	counter := &writeCounter{}
	cfg := rest.CopyConfig(hubCfg)
	cfg.Wrap(counter.wrap)
	d, err := app.NewDaemon(o, cfg, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	dm := &daemon{Daemon: d, writes: counter, cancel: cancel, done: make(chan error, 1), owner: owner}
	go func() { dm.done <- d.Run(ctx) }()
	owner.Cleanup(dm.stop)
	return dm
}

func (d *daemon) stop() {
	if d.cancel == nil {
		return
	}
	d.cancel()
	if err := <-d.done; err != nil {
		d.owner.Logf("daemon stopped: %v", err)
	}
	d.cancel = nil
}

// waitSettled waits until the daemon is ready and nothing has been queued or
// retrying for a second: the hub has converged on what the daemon knows.
func (d *daemon) waitSettled(t *testing.T) {
	t.Helper()
	quiet := 0
	eventually(t, waitTimeout, func() error {
		if !d.Ready() {
			quiet = 0
			return fmt.Errorf("daemon not ready")
		}
		if n := d.Controller.Pending(); n > 0 {
			quiet = 0
			return fmt.Errorf("%d keys queued or retrying", n)
		}
		if quiet++; quiet < 10 {
			return fmt.Errorf("queue empty for %d checks", quiet)
		}
		return nil
	})
}

// eventually retries f until it returns nil or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	if err := waitUntil(timeout, 100*time.Millisecond, f); err != nil {
		t.Fatal(err)
	}
}

// waitUntil is eventually polling every interval and returning the last
// error instead of failing.
func waitUntil(timeout, interval time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not true after %s: %w", timeout, err)
		}
		time.Sleep(interval)
	}
}

// exportService creates an annotated (exported) Service in a member.
func exportService(t *testing.T, c kubernetes.Interface, name string, ports ...corev1.ServicePort) *corev1.Service {
	t.Helper()
	if len(ports) == 0 {
		ports = []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: name, Annotations: map[string]string{easync.AnnotationExport: "true"}},
		Spec:       corev1.ServiceSpec{Ports: ports},
	}
	out, err := c.CoreV1().Services(appNamespace).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// endpointSlice builds a member slice of svc with n IPv4 endpoints on
// 10.<octet>.x.y, as the member's EndpointSlice controller would.
func endpointSlice(svc, name string, octet, n int, ready bool) *discoveryv1.EndpointSlice {
	return endpointSliceAt(svc, name, octet, 0, n, ready)
}

// endpointSliceAt is endpointSlice with addresses starting at offset.
func endpointSliceAt(svc, name string, octet, offset, n int, ready bool) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc,
			discoveryv1.LabelManagedBy:   "test",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for i := offset; i < offset+n; i++ {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", octet, i/250, i%250+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(false)},
			NodeName:   ptr.To(fmt.Sprintf("node-%d", i%3)),
			Zone:       ptr.To("zone-a"),
		})
	}
	return s
}

// setSlices replaces a member's slices of svc with the given ones; it
// returns the error, so goroutines can call it.
func setSlices(ctx context.Context, c kubernetes.Interface, svc string, slices ...*discoveryv1.EndpointSlice) error {
	api := c.DiscoveryV1().EndpointSlices(appNamespace)
	keep := map[string]bool{}
	for _, s := range slices {
		keep[s.Name] = true
		live, err := api.Get(ctx, s.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = api.Create(ctx, s, metav1.CreateOptions{})
		case err == nil:
			s.ResourceVersion = live.ResourceVersion
			_, err = api.Update(ctx, s, metav1.UpdateOptions{})
		}
		if err != nil {
			return err
		}
	}
	list, err := api.List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		return err
	}
	for _, s := range list.Items {
		if !keep[s.Name] {
			if err := api.Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	return nil
}

// applySlices is setSlices failing the test on error.
func applySlices(t *testing.T, c kubernetes.Interface, svc string, slices ...*discoveryv1.EndpointSlice) {
	t.Helper()
	if err := setSlices(context.Background(), c, svc, slices...); err != nil {
		t.Fatal(err)
	}
}

// hubState is what the hub holds for one service, read from its API.
type hubState struct {
	// slice endpoints per source cluster: ready and total.
	ready, total map[string]int
	// perCluster lists the clusters with a <svc>-<cluster> Service and Endpoints.
	perClusterServices, perClusterEndpoints map[string]bool
	importClusters                          []string
	derived                                 *corev1.Service
}

func (e *env) hubState(t *testing.T, svc string) hubState {
	t.Helper()
	ctx := context.Background()
	st := hubState{ready: map[string]int{}, total: map[string]int{}, perClusterServices: map[string]bool{}, perClusterEndpoints: map[string]bool{}}
	slices, err := e.hub.Client.DiscoveryV1().EndpointSlices(appNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: "multicluster.kubernetes.io/service-name=" + svc + "," + discoveryv1.LabelManagedBy + "=" + endpoints.SliceManagedByValue,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slices.Items {
		c := s.Labels["multicluster.kubernetes.io/source-cluster"]
		for _, ep := range s.Endpoints {
			st.total[c]++
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				st.ready[c]++
			}
		}
		if len(s.Endpoints) > endpoints.MaxEndpointsPerSlice {
			t.Errorf("hub slice %s has %d endpoints", s.Name, len(s.Endpoints))
		}
	}
	sel := endpoints.LabelServiceName + "=" + svc
	svcs, err := e.hub.Client.CoreV1().Services(appNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs.Items {
		st.perClusterServices[s.Labels[endpoints.LabelSourceCluster]] = true
	}
	eps, err := e.hub.Client.CoreV1().Endpoints(appNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range eps.Items {
		st.perClusterEndpoints[ep.Labels[endpoints.LabelSourceCluster]] = true
	}
	imp, err := e.hubMCS.MulticlusterV1beta1().ServiceImports(appNamespace).Get(ctx, svc, metav1.GetOptions{})
	if err == nil {
		for _, c := range imp.Status.Clusters {
			st.importClusters = append(st.importClusters, c.Cluster)
		}
	}
	derived, err := e.hub.Client.CoreV1().Services(appNamespace).Get(ctx, endpoints.DerivedServiceName(appNamespace, svc), metav1.GetOptions{})
	if err == nil {
		st.derived = derived
	}
	return st
}

// hubObject is one of our hub objects, as ourObjects reports it.
type hubObject struct {
	cluster         string
	resourceVersion string
}

// ourObjects lists every hub object the daemon manages, keyed by
// "kind/namespace/name", with its source cluster and resourceVersion.
func (e *env) ourObjects(t *testing.T) map[string]hubObject {
	t.Helper()
	ctx := context.Background()
	out := map[string]hubObject{}
	ours := metav1.ListOptions{LabelSelector: endpoints.LabelManagedBy + "=" + endpoints.ManagedByValue}
	svcs, err := e.hub.Client.CoreV1().Services("").List(ctx, ours)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range svcs.Items {
		out["Service/"+o.Namespace+"/"+o.Name] = hubObject{o.Labels[endpoints.LabelSourceCluster], o.ResourceVersion}
	}
	eps, err := e.hub.Client.CoreV1().Endpoints("").List(ctx, ours)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range eps.Items {
		out["Endpoints/"+o.Namespace+"/"+o.Name] = hubObject{o.Labels[endpoints.LabelSourceCluster], o.ResourceVersion}
	}
	slices, err := e.hub.Client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=" + endpoints.SliceManagedByValue})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range slices.Items {
		out["EndpointSlice/"+o.Namespace+"/"+o.Name] = hubObject{o.Labels["multicluster.kubernetes.io/source-cluster"], o.ResourceVersion}
	}
	imps, err := e.hubMCS.MulticlusterV1beta1().ServiceImports("").List(ctx, ours)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range imps.Items {
		out["ServiceImport/"+o.Namespace+"/"+o.Name] = hubObject{"", o.ResourceVersion}
	}
	return out
}
