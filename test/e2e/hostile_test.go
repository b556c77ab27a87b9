package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"runtime"
	"slices"
	"sort"
	"strings"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

const (
	// hostileBulkServices is how many plain Services the hostile member
	// exports besides its special cases: the "thousands of services" scale.
	// It may be lowered to keep the test within ~90 s on 2 cores, but not
	// below 1000.
	hostileBulkServices = 1500
	// hostileCreators bounds the concurrent creates against east.
	hostileCreators = 16
	// hostileHeapLimit is a generous bound on the test process's live heap
	// (the daemon and the test's clients): far above what the fixture needs,
	// far below what an unbounded copy of hostile input would take.
	hostileHeapLimit = 1 << 30
)

// TestHostileMemberIsBoundedAndProducesOnlyValidHubObjects lets member east
// send everything its API server accepts but a well-behaved member never
// sends, at scale, while member west behaves:
//
//   - 1500 exported Services at once (created by a bounded pool of
//     concurrent clients), all with 63-character names that differ only in
//     their last characters, so every per-cluster name is shortened and
//     only its hash tells them apart;
//   - names at each length limit: a 58-character Service (its
//     <svc>-<cluster> name is exactly 63), a 59-character one, a
//     63-character one exported from west too, and a 63-character Service
//     in a 63-character namespace;
//   - EndpointSlices the API accepts but the hub must not get: endpoints
//     with an invalid zone, ports out of range (70000 and 0), several
//     addresses per endpoint, FQDN slices (some with addresses that look
//     like IPs), duplicate endpoints within and across the slices of one
//     service, a slice without the kubernetes.io/service-name label, a slice
//     of a Service that does not exist, one port unnamed next to a named one;
//   - two slices of 1000 endpoints each (the API's maximum), and a Service
//     with annotations just under the 256 KiB limit;
//   - a Service whose only port is unnamed where west names its port, and a
//     headless Service without ports.
//
// While the daemon works through it, west changes a Service; that change
// must reach the hub (its latency is logged). Afterwards every hub write must
// have been accepted by the hub's API server (a 409 from a lagging cache
// aside), and the hub must hold exactly the valid part of the input: no
// invalid endpoint (each one refused is counted, once, in the gauge
// refused_member_endpoints{reason="invalid"}), no FQDN endpoint (FQDN
// slices are skipped whole, uncounted), each duplicate once, nothing from
// the unlabelled slice, one distinct per-cluster name of at most 63
// characters per member Service.
// The daemon must still be ready, with a bounded heap (logged).
func TestHostileMemberIsBoundedAndProducesOnlyValidHubObjects(t *testing.T) {
	t.Parallel()
	start := time.Now()
	e := startEnv(t)
	ctx := context.Background()
	longNS := "hostile-" + strings.Repeat("n", 55) // 63 characters
	mustCreateNamespace(t, e.east.Client, longNS)
	mustCreateNamespace(t, e.hub.Client, longNS)
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)

	rejected := &hubRejections{}
	d := e.startDaemonRecording(t, rejected, func(o *app.Options) {
		// The defaults (50 QPS to the hub) would take minutes over the
		// ~8000 hub writes this fixture needs; hostile input, not
		// throughput, is under test.
		o.HubQPS, o.HubBurst = 1000, 2000
	})
	envReady := time.Since(start)

	// West, the well-behaved member: cart (changed later), a long name
	// that east exports too, and mixed whose only port is named.
	name63 := "edge-" + strings.Repeat("c", 58)
	exportService(t, e.west.Client, "cart")
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-west-1", 50, 3, true))
	exportService(t, e.west.Client, name63)
	applySlices(t, e.west.Client, name63, endpointSlice(name63, "long-west-1", 51, 2, true))
	exportService(t, e.west.Client, "mixed", corev1.ServicePort{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP})
	waitFor(t, e, "cart", map[string]int{"west": 3}, map[string]int{"west": 3})

	// East, the hostile member: first the special cases, then the bulk.
	fx := newHostileFixture(longNS, name63)
	for _, s := range fx.services {
		if _, err := e.east.Client.CoreV1().Services(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating east Service %s/%s: %v", s.Namespace, s.Name, err)
		}
	}
	for _, s := range fx.slices {
		if _, err := e.east.Client.DiscoveryV1().EndpointSlices(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating east EndpointSlice %s/%s: %v", s.Namespace, s.Name, err)
		}
	}

	var created atomic.Int64
	stormStart := time.Now()
	stormDone := make(chan error, 1)
	go func() { stormDone <- createConcurrently(ctx, e.east.Client, hostileCreators, fx.bulk, &created) }()

	// Meanwhile, west changes cart.
	for deadline := time.Now().Add(waitTimeout); created.Load() < int64(len(fx.bulk)/2) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	backlog, createdThen := d.Controller.Pending(), created.Load()
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-west-1", 50, 5, true))
	changed := time.Now()
	if err := waitUntil(waitTimeout, 100*time.Millisecond, func() error {
		if st := e.hubState(t, "cart"); st.total["west"] != 5 {
			return fmt.Errorf("hub has %d endpoints of west's cart, want 5", st.total["west"])
		}
		return nil
	}); err != nil {
		t.Errorf("west's change did not reach the hub during east's storm: %v", err)
	}
	t.Logf("west's change reached the hub in %s (made when east had created %d of %d bulk Services and the daemon had %d keys pending)",
		time.Since(changed).Round(10*time.Millisecond), createdThen, len(fx.bulk), backlog)

	if err := <-stormDone; err != nil {
		t.Fatalf("creating east's Services: %v", err)
	}
	stormCreated := time.Since(stormStart)

	// Converged: the hub holds a per-cluster Service and an import of every
	// exported Service, and the daemon's queue stayed empty for a while.
	// Keys retrying after a refused write wait outside the queue: the
	// checks below report them.
	wantEast := len(fx.services) + len(fx.bulk) - fx.notExported
	wantImports := wantEast + 1 // and west's cart
	quiet := 0
	// Two minutes when this test runs alone; the margin is for the other
	// tests' clusters on the same cores.
	if err := waitUntil(4*waitTimeout, 500*time.Millisecond, func() error {
		if n := d.Controller.Queued(); n > 0 {
			quiet = 0
			return fmt.Errorf("%v keys queued", n)
		}
		if n := e.countPerClusterServices(t, "east"); n != wantEast {
			quiet = 0
			return fmt.Errorf("hub has %d per-cluster Services of east, want %d", n, wantEast)
		}
		if n := e.countImports(t); n != wantImports {
			quiet = 0
			return fmt.Errorf("hub has %d ServiceImports, want %d", n, wantImports)
		}
		if quiet++; quiet < 4 {
			return fmt.Errorf("queue empty for %d checks", quiet)
		}
		return nil
	}); err != nil {
		t.Errorf("the hub did not converge on east's Services: %v", err)
	}
	converged := time.Since(stormStart)
	if err := waitUntil(10*time.Second, 100*time.Millisecond, func() error {
		if n := d.Controller.Pending(); n > 0 {
			return fmt.Errorf("%d keys queued, in flight or retrying", n)
		}
		return nil
	}); err != nil {
		t.Errorf("after the hub converged: %v", err)
	}

	t.Run("every hub write was accepted by the hub's API server", func(t *testing.T) {
		if r := rejected.all(); len(r) > 0 {
			t.Errorf("the hub refused writes of the daemon (count, request, status, message):\n%s", strings.Join(r, "\n"))
		}
		if n := labelledCounter(t, d, "endpoint_aggregator_hub_writes_total", "result", "error"); n != 0 {
			t.Errorf("hub_writes_total{result=\"error\"} = %v, want 0", n)
		}
	})

	t.Run("per-cluster names are valid, at most 63 characters and one per member Service", func(t *testing.T) {
		want := map[string]bool{} // cluster/namespace/service
		for _, s := range append(slices.Clone(fx.services), fx.bulk...) {
			if s.Annotations[easync.AnnotationExport] == "true" {
				want["east/"+s.Namespace+"/"+s.Name] = true
			}
		}
		for _, svc := range []string{"cart", name63, "mixed"} {
			want["west/"+appNamespace+"/"+svc] = true
		}
		for _, kind := range []string{"Service", "Endpoints"} {
			got := e.perClusterObjects(t, kind)
			for src, o := range got {
				if !want[src] {
					t.Errorf("%s %s/%s for %s, which is not exported", kind, o.Namespace, o.Name, src)
				}
				checkPerClusterName(t, kind, src, o)
			}
			for src := range want {
				if _, ok := got[src]; !ok {
					t.Errorf("no per-cluster %s for %s", kind, src)
				}
			}
		}
	})

	t.Run("hub slices hold only valid endpoints, each once", func(t *testing.T) {
		all := e.mcsSlices(t)
		for _, s := range all.bad {
			t.Error(s)
		}
		addrs := func(svc, cluster string) []string { return all.addresses[appNamespace+"/"+svc+"/"+cluster] }
		check := func(svc, cluster string, want []string) {
			t.Helper()
			got := addrs(svc, cluster)
			sort.Strings(got)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Errorf("hub slices of %s from %s: %d addresses (%d distinct), want %d: got %s, want %s",
					svc, cluster, len(got), countDistinct(got), len(want), abbrev(got), abbrev(want))
			}
		}
		check("big", "east", fx.bigAddresses)
		check("invalid", "east", fx.invalidKept)
		check("dup", "east", fx.dupAddresses)
		check("fqdn", "east", nil)
		check("lonely", "east", nil)
		check("ghost", "east", nil)
		check("cart", "west", rangeAddresses(50, 0, 5))
		for _, a := range fx.neverOnHub {
			if where, ok := all.where[a]; ok {
				t.Errorf("address %s, which the hub must not get, is in %s", a, where)
			}
		}
		if n := all.ready[appNamespace+"/dup/east"]; n != 10 {
			t.Errorf("hub slices of dup hold %d ready endpoints, want 10 (an address ready in either slice is ready)", n)
		}
		t.Logf("hub: %d MCS EndpointSlices with %d endpoints", all.slices, all.endpoints)
	})

	t.Run("per-cluster Endpoints hold the valid addresses, at most 1000", func(t *testing.T) {
		for _, c := range []struct {
			svc             string
			ready, notReady int
			truncated       bool
		}{
			{"big", endpoints.MaxEndpointsAddresses, 0, true},
			{"invalid", len(fx.invalidKept), 0, false},
			{"dup", 10, 5, false},
			{"fqdn", 0, 0, false},
			{"lonely", 0, 0, false},
		} {
			name, _ := endpoints.PerClusterName(c.svc, "east")
			ep, err := e.hub.Client.CoreV1().Endpoints(appNamespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Errorf("per-cluster Endpoints of %s: %v", c.svc, err)
				continue
			}
			ready, notReady := 0, 0
			for _, s := range ep.Subsets {
				ready += len(s.Addresses)
				notReady += len(s.NotReadyAddresses)
				for _, a := range append(slices.Clone(s.Addresses), s.NotReadyAddresses...) {
					if slices.Contains(fx.neverOnHub, a.IP) {
						t.Errorf("Endpoints %s holds %s, which the hub must not get", name, a.IP)
					}
				}
			}
			truncated := ep.Annotations[endpoints.AnnotationOverCapacity] == endpoints.OverCapacityTruncated
			if ready != c.ready || notReady != c.notReady || truncated != c.truncated {
				t.Errorf("Endpoints %s: %d ready, %d not ready, truncated %v; want %d, %d, %v",
					name, ready, notReady, truncated, c.ready, c.notReady, c.truncated)
			}
		}
		// The gauge counts what is refused now, each endpoint once.
		if n := gaugeSum(t, d, "endpoint_aggregator_refused_member_endpoints", map[string]string{"cluster": "east", "reason": "invalid"}); n != float64(fx.invalidDropped) {
			t.Errorf("refused_member_endpoints{cluster=east,reason=invalid} = %v, want the %d invalid endpoints east sent", n, fx.invalidDropped)
		}
		if n := gaugeSum(t, d, "endpoint_aggregator_refused_member_endpoints", map[string]string{"cluster": "west", "reason": "invalid"}); n != 0 {
			t.Errorf("refused_member_endpoints{cluster=west,reason=invalid} = %v, want 0", n)
		}
	})

	t.Run("every import has its derived Service and no hostile annotation", func(t *testing.T) {
		imports, err := e.hubMCS.MulticlusterV1beta1().ServiceImports("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svcs, err := e.hub.Client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hubServices := map[string]*corev1.Service{}
		for i := range svcs.Items {
			s := &svcs.Items[i]
			hubServices[s.Namespace+"/"+s.Name] = s
			if n := annotationBytes(s.Annotations); n > 4096 {
				t.Errorf("hub Service %s/%s carries %d bytes of annotations", s.Namespace, s.Name, n)
			}
		}
		found := map[string]bool{}
		for _, imp := range imports.Items {
			found[imp.Namespace+"/"+imp.Name] = true
			if n := annotationBytes(imp.Annotations); n > 4096 {
				t.Errorf("ServiceImport %s/%s carries %d bytes of annotations", imp.Namespace, imp.Name, n)
			}
			if _, ok := hubServices[imp.Namespace+"/"+endpoints.DerivedServiceName(imp.Namespace, imp.Name)]; !ok {
				t.Errorf("ServiceImport %s/%s has no derived Service", imp.Namespace, imp.Name)
			}
		}
		for _, ns := range []string{appNamespace, longNS} {
			for _, svc := range []string{"fat", "big", "fqdn", "invalid", "dup", "lonely", "multiport", "mixed", "portless", fx.name58, fx.name59, name63} {
				if ns == longNS && svc != name63 {
					continue
				}
				if !found[ns+"/"+svc] {
					t.Errorf("no ServiceImport %s/%s", ns, svc)
				}
			}
		}
		for _, imp := range imports.Items {
			if imp.Namespace != appNamespace || (imp.Name != "mixed" && imp.Name != name63) {
				continue
			}
			var got []string
			for _, c := range imp.Status.Clusters {
				got = append(got, c.Cluster)
			}
			if !slices.Equal(got, []string{"east", "west"}) {
				t.Errorf("ServiceImport %s lists clusters %v, want [east west]", imp.Name, got)
			}
		}
		if found[appNamespace+"/ghost"] {
			t.Error("a ServiceImport exists for ghost, a slice without a Service")
		}
		if len(imports.Items) != wantImports {
			t.Errorf("%d ServiceImports, want %d", len(imports.Items), wantImports)
		}
		t.Logf("hub: %d ServiceImports, %d Services", len(imports.Items), len(svcs.Items))
	})

	t.Run("the daemon is ready, west is synced and the heap is bounded", func(t *testing.T) {
		select {
		case err := <-d.done:
			d.done <- err // for stop
			t.Fatalf("daemon exited: %v", err)
		default:
		}
		if !d.Ready() {
			t.Error("daemon not ready")
		}
		if v := gaugeValue(t, d, "endpoint_aggregator_member_cluster_synced", "cluster", "west"); v != 1 {
			t.Errorf("member_cluster_synced{cluster=west} = %v, want 1", v)
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		t.Logf("test process (daemon, its caches and the test's clients) after GC: heap in use %d MiB, heap objects %d, from the OS %d MiB",
			ms.HeapInuse>>20, ms.HeapObjects, ms.Sys>>20)
		if ms.HeapInuse > hostileHeapLimit {
			t.Errorf("heap in use %d MiB, want at most %d MiB", ms.HeapInuse>>20, hostileHeapLimit>>20)
		}
	})

	t.Logf("environment up in %s; east created %d Services in %s; hub converged %s after east started; %s in all",
		envReady.Round(100*time.Millisecond), len(fx.bulk)+len(fx.services), stormCreated.Round(100*time.Millisecond),
		converged.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
	t.Logf("hub writes: %s; syncs: %s; daemon hub requests (non-GET): %d",
		labelledCounters(t, d, "endpoint_aggregator_hub_writes_total", "result"),
		labelledCounters(t, d, "endpoint_aggregator_syncs_total", "result"), d.writes.n.Load())
}

// hostileFixture is what east, the hostile member, holds.
type hostileFixture struct {
	// services are the special cases, created first; bulk the rest.
	services, bulk []*corev1.Service
	slices         []*discoveryv1.EndpointSlice
	// notExported counts services that are not exported.
	notExported int

	name58, name59 string

	// bigAddresses are the 2000 addresses of big's two full slices.
	bigAddresses []string
	// invalidKept are the addresses of invalid the hub must get, and
	// invalidDropped the number of its endpoints it must not.
	invalidKept    []string
	invalidDropped int
	// dupAddresses are dup's distinct addresses.
	dupAddresses []string
	// neverOnHub are addresses that must appear in no hub object.
	neverOnHub []string
}

func newHostileFixture(longNS, name63 string) *hostileFixture {
	fx := &hostileFixture{
		name58: "edge-" + strings.Repeat("a", 53),
		name59: "edge-" + strings.Repeat("b", 54),
	}
	web := corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}
	svc := func(ns, name string, headless bool, ports ...corev1.ServicePort) *corev1.Service {
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{easync.AnnotationExport: "true"}},
			Spec:       corev1.ServiceSpec{Ports: ports},
		}
		if headless {
			s.Spec.ClusterIP = corev1.ClusterIPNone
		}
		fx.services = append(fx.services, s)
		return s
	}
	slice := func(s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
		fx.slices = append(fx.slices, s)
		return s
	}
	inNS := func(ns string, s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
		s.Namespace = ns
		return s
	}

	// Names at the length limits, each with two endpoints.
	for i, n := range []string{fx.name58, fx.name59, name63} {
		svc(appNamespace, n, false, web)
		slice(endpointSlice(n, fmt.Sprintf("edge-%d", i), 60+i, 2, true))
	}
	svc(longNS, name63, false, web)
	slice(inNS(longNS, endpointSlice(name63, "edge-long-ns", 63, 2, true)))

	// Annotations just under the 256 KiB limit on the whole object's
	// annotations.
	fat := svc(appNamespace, "fat", false, web)
	fat.Annotations["example.com/blob"] = strings.Repeat("x", 256*1024-1024)

	// Two slices of 1000 endpoints: 2000 addresses, more than a per-cluster
	// Endpoints holds.
	svc(appNamespace, "big", false, web)
	slice(endpointSliceAt("big", "big-1", 200, 0, 1000, true))
	slice(endpointSliceAt("big", "big-2", 200, 1000, 1000, true))
	fx.bigAddresses = rangeAddresses(200, 0, 2000)

	// FQDN slices, some of whose names look like IPs.
	svc(appNamespace, "fqdn", false, web)
	fq := slice(endpointSlice("fqdn", "fqdn-names", 213, 100, true))
	fq.AddressType = discoveryv1.AddressTypeFQDN
	for i := range fq.Endpoints {
		fq.Endpoints[i].Addresses = []string{fmt.Sprintf("pod-%d.fqdn.example.com", i)}
	}
	fqIP := slice(endpointSlice("fqdn", "fqdn-ips", 213, 20, true))
	fqIP.AddressType = discoveryv1.AddressTypeFQDN
	fx.neverOnHub = append(fx.neverOnHub, rangeAddresses(213, 0, 20)...)

	// invalid: endpoints and ports the member's API server accepts and the
	// daemon must drop, and endpoints with several addresses (the first
	// one stands for the endpoint).
	svc(appNamespace, "invalid", false, web)
	zones := slice(endpointSlice("invalid", "invalid-zone", 210, 10, true))
	for i := range 5 {
		zones.Endpoints[i].Zone = ptr.To("Zone A!")
		fx.neverOnHub = append(fx.neverOnHub, zones.Endpoints[i].Addresses[0])
	}
	fx.invalidKept = rangeAddresses(210, 5, 5)
	for i, port := range []int32{70000, 0} {
		s := slice(endpointSliceAt("invalid", fmt.Sprintf("invalid-port-%d", port), 211, i*10, 4, true))
		s.Ports[0].Port = ptr.To(port)
		for _, ep := range s.Endpoints {
			fx.neverOnHub = append(fx.neverOnHub, ep.Addresses[0])
		}
	}
	fx.invalidDropped = 5 + 4 + 4
	multi := slice(endpointSlice("invalid", "invalid-multi", 212, 3, true))
	for i := range multi.Endpoints {
		second := fmt.Sprintf("10.212.9.%d", i+1)
		multi.Endpoints[i].Addresses = append(multi.Endpoints[i].Addresses, second)
		fx.neverOnHub = append(fx.neverOnHub, second)
	}
	fx.invalidKept = append(fx.invalidKept, rangeAddresses(212, 0, 3)...)

	// dup: addresses 6-10 in both slices (ready in one, not in the
	// other), address 15 twice in one slice.
	svc(appNamespace, "dup", false, web)
	slice(endpointSliceAt("dup", "dup-a", 214, 0, 10, true))
	b := slice(endpointSliceAt("dup", "dup-b", 214, 5, 10, false))
	b.Endpoints = append(b.Endpoints, *b.Endpoints[len(b.Endpoints)-1].DeepCopy())
	fx.dupAddresses = rangeAddresses(214, 0, 15)

	// lonely's only slice lacks the service-name label; ghost has a slice
	// but no Service.
	svc(appNamespace, "lonely", false, web)
	orphan := slice(endpointSlice("lonely", "lonely-orphan", 215, 5, true))
	delete(orphan.Labels, discoveryv1.LabelServiceName)
	slice(endpointSlice("ghost", "ghost-1", 216, 5, true))
	fx.neverOnHub = append(fx.neverOnHub, rangeAddresses(215, 0, 5)...)
	fx.neverOnHub = append(fx.neverOnHub, rangeAddresses(216, 0, 5)...)

	// multiport: a slice with an unnamed port next to a named one.
	svc(appNamespace, "multiport", false, web, corev1.ServicePort{Name: "metrics", Port: 9090, Protocol: corev1.ProtocolTCP})
	mp := slice(endpointSlice("multiport", "multiport-1", 217, 3, true))
	mp.Ports = []discoveryv1.EndpointPort{
		{Name: ptr.To(""), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)},
		{Name: ptr.To("metrics"), Port: ptr.To[int32](9090), Protocol: ptr.To(corev1.ProtocolTCP)},
	}

	// mixed: east's only port is unnamed, west's is named http.
	svc(appNamespace, "mixed", false, corev1.ServicePort{Port: 80, Protocol: corev1.ProtocolTCP})
	mixed := slice(endpointSlice("mixed", "mixed-1", 218, 2, true))
	mixed.Ports[0].Name = ptr.To("")

	// portless: headless without ports, its slice without ports.
	svc(appNamespace, "portless", true)
	pl := slice(endpointSlice("portless", "portless-1", 219, 2, true))
	pl.Ports = nil

	// An unexported Service is not aggregated.
	quiet := svc(appNamespace, "quiet", false, web)
	delete(quiet.Annotations, easync.AnnotationExport)
	fx.notExported++

	// The bulk: headless (the hub's service range has 253 addresses),
	// names of 63 characters sharing their first 58.
	for i := range hostileBulkServices {
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:   appNamespace,
				Name:        "bulk-" + strings.Repeat("x", 53) + fmt.Sprintf("-%04d", i),
				Annotations: map[string]string{easync.AnnotationExport: "true"},
			},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{web}},
		}
		fx.bulk = append(fx.bulk, s)
	}
	return fx
}

// rangeAddresses returns the addresses endpointSliceAt gives endpoints
// offset to offset+n-1 of octet.
func rangeAddresses(octet, offset, n int) []string {
	var out []string
	for i := offset; i < offset+n; i++ {
		out = append(out, fmt.Sprintf("10.%d.%d.%d", octet, i/250, i%250+1))
	}
	return out
}

// createConcurrently creates svcs with at most workers requests in flight,
// counting the successes in created. It returns the first error.
func createConcurrently(ctx context.Context, c kubernetes.Interface, workers int, svcs []*corev1.Service, created *atomic.Int64) error {
	jobs := make(chan *corev1.Service)
	var wg stdsync.WaitGroup
	var mu stdsync.Mutex
	var first error
	for range workers {
		wg.Go(func() {
			for s := range jobs {
				if _, err := c.CoreV1().Services(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("%s/%s: %w", s.Namespace, s.Name, err)
					}
					mu.Unlock()
					continue
				}
				created.Add(1)
			}
		})
	}
	for _, s := range svcs {
		jobs <- s
	}
	close(jobs)
	wg.Wait()
	return first
}

// hubRejections records the daemon's hub writes that the hub's API server
// refused for any reason but a conflict (409: a lagging cache or a lost
// race) or a missing object (404).
type hubRejections struct {
	mu    stdsync.Mutex
	order []string
	count map[string]int
}

func (r *hubRejections) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err != nil || req.Method == http.MethodGet || resp.StatusCode < 400 ||
			resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusConflict {
			return resp, err
		}
		body, rerr := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		msg := statusMessage(body)
		if rerr != nil {
			msg += " (body unreadable: " + rerr.Error() + ")"
		}
		r.add(fmt.Sprintf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, msg))
		return resp, err
	})
}

func (r *hubRejections) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.count == nil {
		r.count = map[string]int{}
	}
	if r.count[s] == 0 {
		r.order = append(r.order, s)
	}
	r.count[s]++
}

// all returns the distinct rejections, in order, with how often each came.
func (r *hubRejections) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.order))
	for _, s := range r.order {
		out = append(out, fmt.Sprintf("%dx %s", r.count[s], s))
	}
	return out
}

func (r *hubRejections) String() string {
	if l := r.all(); len(l) > 0 {
		return "\n" + strings.Join(l, "\n")
	}
	return "none"
}

// statusMessage returns the message of an API error response, JSON or
// protobuf, or the start of the body.
func statusMessage(body []byte) string {
	var st metav1.Status
	if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, &st); err == nil && st.Message != "" {
		return st.Message
	}
	if len(body) > 300 {
		body = body[:300]
	}
	return fmt.Sprintf("%q", body)
}

// startDaemonRecording is startDaemon whose hub client reports refused
// writes to rec.
func (e *env) startDaemonRecording(t *testing.T, rec *hubRejections, mutate func(*app.Options)) *daemon {
	t.Helper()
	cfg := rest.CopyConfig(e.hub.Config)
	cfg.Wrap(rec.wrap)
	return startDaemonOn(t, t, cfg, mutate)
}

// perClusterObjects lists the hub's per-cluster Services or Endpoints by
// source, "cluster/namespace/service".
func (e *env) perClusterObjects(t *testing.T, kind string) map[string]metav1.ObjectMeta {
	t.Helper()
	ctx := context.Background()
	opts := metav1.ListOptions{LabelSelector: endpoints.LabelManagedBy + "=" + endpoints.ManagedByValue + "," + endpoints.LabelSourceCluster}
	var metas []metav1.ObjectMeta
	switch kind {
	case "Service":
		l, err := e.hub.Client.CoreV1().Services("").List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range l.Items {
			metas = append(metas, o.ObjectMeta)
		}
	case "Endpoints":
		l, err := e.hub.Client.CoreV1().Endpoints("").List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range l.Items {
			metas = append(metas, o.ObjectMeta)
		}
	}
	out := map[string]metav1.ObjectMeta{}
	for _, m := range metas {
		src := m.Labels[endpoints.LabelSourceCluster] + "/" + m.Namespace + "/" + m.Labels[endpoints.LabelServiceName]
		if prev, ok := out[src]; ok {
			t.Errorf("%s has two per-cluster %s objects: %s and %s", src, kind, prev.Name, m.Name)
		}
		out[src] = m
	}
	return out
}

// countPerClusterServices counts the hub's per-cluster Services of a
// cluster, from the API server's watch cache.
func (e *env) countPerClusterServices(t *testing.T, cluster string) int {
	t.Helper()
	l, err := e.hub.Client.CoreV1().Services("").List(context.Background(), metav1.ListOptions{
		LabelSelector:   endpoints.LabelManagedBy + "=" + endpoints.ManagedByValue + "," + endpoints.LabelSourceCluster + "=" + cluster,
		ResourceVersion: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

// countImports counts the hub's ServiceImports, from the watch cache.
func (e *env) countImports(t *testing.T) int {
	t.Helper()
	l, err := e.hubMCS.MulticlusterV1beta1().ServiceImports("").List(context.Background(), metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

// checkPerClusterName checks the name of the per-cluster object of src
// (cluster/namespace/service): <service>-<cluster> when that fits a DNS
// label, else a valid label of at most 63 characters naming its full source
// in an annotation.
func checkPerClusterName(t *testing.T, kind, src string, o metav1.ObjectMeta) {
	t.Helper()
	parts := strings.SplitN(src, "/", 3)
	cluster, svc := parts[0], parts[2]
	if errs := validation.IsDNS1123Label(o.Name); len(errs) > 0 {
		t.Errorf("%s %s of %s: not a DNS label: %s", kind, o.Name, src, errs[0])
	}
	full := svc + "-" + cluster
	if len(full) <= validation.DNS1123LabelMaxLength {
		if o.Name != full {
			t.Errorf("%s of %s is named %s, want %s", kind, src, o.Name, full)
		}
		return
	}
	if o.Annotations[endpoints.AnnotationSource] != src {
		t.Errorf("%s %s of %s (shortened): annotation %s = %q, want %q", kind, o.Name, src,
			endpoints.AnnotationSource, o.Annotations[endpoints.AnnotationSource], src)
	}
}

// hubSlices summarises the hub's MCS EndpointSlices.
type hubSlices struct {
	slices, endpoints int
	// addresses and ready by "namespace/service/cluster".
	addresses map[string][]string
	ready     map[string]int
	// where an address is: "namespace/slice".
	where map[string]string
	// bad lists what no hub slice may hold.
	bad []string
}

func (e *env) mcsSlices(t *testing.T) hubSlices {
	t.Helper()
	l, err := e.hub.Client.DiscoveryV1().EndpointSlices("").List(context.Background(), metav1.ListOptions{
		LabelSelector: discoveryv1.LabelManagedBy + "=" + endpoints.SliceManagedByValue,
	})
	if err != nil {
		t.Fatal(err)
	}
	out := hubSlices{addresses: map[string][]string{}, ready: map[string]int{}, where: map[string]string{}}
	for _, s := range l.Items {
		out.slices++
		at := s.Namespace + "/" + s.Name
		key := s.Namespace + "/" + s.Labels["multicluster.kubernetes.io/service-name"] + "/" + s.Labels[labelMCSSourceCluster]
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			out.bad = append(out.bad, fmt.Sprintf("hub slice %s has address type %s", at, s.AddressType))
		}
		if len(s.Endpoints) > endpoints.MaxEndpointsPerSlice {
			out.bad = append(out.bad, fmt.Sprintf("hub slice %s has %d endpoints", at, len(s.Endpoints)))
		}
		for _, ep := range s.Endpoints {
			out.endpoints++
			if len(ep.Addresses) != 1 {
				out.bad = append(out.bad, fmt.Sprintf("hub slice %s has an endpoint with addresses %v", at, ep.Addresses))
				continue
			}
			a := ep.Addresses[0]
			ip, err := netip.ParseAddr(a)
			if err != nil || ip.String() != a || ip.Is4() != (s.AddressType == discoveryv1.AddressTypeIPv4) {
				out.bad = append(out.bad, fmt.Sprintf("hub slice %s (%s) holds address %q", at, s.AddressType, a))
			}
			if ep.Zone != nil && len(validation.IsValidLabelValue(*ep.Zone)) > 0 {
				out.bad = append(out.bad, fmt.Sprintf("hub slice %s holds zone %q", at, *ep.Zone))
			}
			out.addresses[key] = append(out.addresses[key], a)
			out.where[a] = at
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				out.ready[key]++
			}
		}
	}
	return out
}

// labelledCounter sums the samples of a counter family whose label has value.
func labelledCounter(t *testing.T, d *daemon, name, label, value string) float64 {
	t.Helper()
	var sum float64
	for v, n := range labelledCountersMap(t, d, name, label) {
		if v == value {
			sum += n
		}
	}
	return sum
}

// labelledCounters formats a counter family summed by one label.
func labelledCounters(t *testing.T, d *daemon, name, label string) string {
	t.Helper()
	m := labelledCountersMap(t, d, name, label)
	var parts []string
	for _, v := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%v", v, m[v]))
	}
	return strings.Join(parts, " ")
}

func labelledCountersMap(t *testing.T, d *daemon, name, label string) map[string]float64 {
	t.Helper()
	mfs, err := d.Gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

func annotationBytes(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	return n
}

// abbrev prints at most a few elements of a long list.
func abbrev(s []string) string {
	if len(s) <= 6 {
		return fmt.Sprint(s)
	}
	return fmt.Sprintf("[%s ... %s]", strings.Join(s[:3], " "), strings.Join(s[len(s)-3:], " "))
}
