package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// liarTimeout bounds the checks made after the daemon has settled: only
// Events and metrics may still be on their way.
const liarTimeout = 15 * time.Second

// The lies of east's proxy. East's API server holds ordinary addresses;
// the proxy turns some of them into addresses that must never be routed.
var (
	// liarSpecial maps an address east really has to the special one the
	// proxy says instead, with the refusal reason the daemon must count.
	liarSpecial = map[string]struct{ to, reason string }{
		"10.20.0.1":  {"127.0.0.1", "special_address"},       // loopback
		"10.20.0.2":  {"169.254.169.254", "special_address"}, // link-local: cloud metadata
		"10.20.0.3":  {"0.0.0.0", "special_address"},         // unspecified
		"10.20.0.4":  {"224.0.0.1", "special_address"},       // multicast
		"10.20.0.5":  {"255.255.255.255", "special_address"}, // broadcast
		"10.20.0.6":  {"10.0.0.1", "hub_service_range"},      // the hub's kubernetes Service
		"fd00:20::1": {"::1", "special_address"},             // loopback
		"fd00:20::2": {"fe80::1", "special_address"},         // link-local
		"fd00:20::3": {"::ffff:10.1.1.1", "special_address"}, // IPv4-mapped
	}
	// liarBoundary is a valid address the proxy also says, just outside the
	// hub's Service range 10.0.0.0/24: it must arrive.
	liarBoundary = [2]string{"10.20.0.7", "10.0.1.1"}

	// What the hub must hold, by service and source cluster.
	liarWant = map[string]map[string][]string{
		"web": {
			"east": {"10.0.1.1", "10.20.0.8", "10.20.0.9", "fd00:20::4", "fd00:20::5"},
			"west": {"10.30.0.1", "10.30.0.2", "10.30.0.3"},
		},
		"checkout": {
			"east": {"10.21.0.1", "10.21.0.2"},
			"west": {"10.31.0.1", "10.31.0.2"},
		},
	}
)

// eastLies is the proxy's rewrite: web's addresses as above; every slice
// claims to be west's and the aggregator's own; checkout's export claims
// to be from 1970, older than any other.
func eastLies(kind string, obj map[string]any) bool {
	md, _ := obj["metadata"].(map[string]any)
	if md == nil {
		return false
	}
	switch kind {
	case "EndpointSlice":
		changed := setLabel(md, mcsv1beta1.LabelSourceCluster, "west")
		changed = setLabel(md, discoveryv1.LabelManagedBy, endpoints.SliceManagedByValue) || changed
		eps, _ := obj["endpoints"].([]any)
		for _, ep := range eps {
			m, _ := ep.(map[string]any)
			addrs, _ := m["addresses"].([]any)
			for i, a := range addrs {
				s, _ := a.(string)
				if lie, ok := liarSpecial[s]; ok {
					addrs[i], changed = lie.to, true
				} else if s == liarBoundary[0] {
					addrs[i], changed = liarBoundary[1], true
				}
			}
		}
		return changed
	case "Service":
		// web gets ports no API server would take: shared by the import
		// of every member, they must not break it.
		if md["namespace"] != appNamespace || md["name"] != "web" {
			return false
		}
		spec, _ := obj["spec"].(map[string]any)
		ports, _ := spec["ports"].([]any)
		if len(ports) != 1 {
			return false
		}
		spec["ports"] = append(ports,
			map[string]any{"name": "Not_A_Label", "port": 81, "protocol": "TCP"},
			map[string]any{"name": "zero", "port": 0, "protocol": "TCP"},
			map[string]any{"name": "quic", "port": 443, "protocol": "HTTP3"})
		return true
	case "ServiceExport":
		const epoch = "1970-01-01T00:00:00Z"
		if md["namespace"] == appNamespace && md["name"] == "checkout" && md["creationTimestamp"] != epoch {
			md["creationTimestamp"] = epoch
			return true
		}
	}
	return false
}

// setLabel sets a label of decoded metadata and reports whether it changed.
func setLabel(md map[string]any, key, value string) bool {
	l, _ := md["labels"].(map[string]any)
	if l == nil {
		l = map[string]any{}
		md["labels"] = l
	}
	if l[key] == value {
		return false
	}
	l[key] = value
	return true
}

// TestLyingMemberCannotRouteSpecialAddressesSpeakForPeersOrBackdateExports
// registers west honestly and east through a proxy that rewrites what
// east's API server returns, as a compromised member could:
//
//   - web's endpoints at loopback, link-local (169.254.169.254), unspecified,
//     multicast, broadcast and, in an IPv6 slice, ::1, fe80::1 and
//     ::ffff:10.1.1.1, plus 10.0.0.1 inside the hub's Service range, next to
//     valid endpoints in the same slices;
//   - every slice labelled source-cluster west and managed-by the aggregator;
//   - checkout's ServiceExport created in 1970, where west exports checkout
//     on another port number, so the oldest export would win the conflict;
//   - an export of default/kubernetes.
//
// The hub must hold exactly the valid endpoints, each under the cluster it
// came from; no import of default/kubernetes; west's port for checkout, as
// east's export counts no earlier than east's registration Secret; and the
// refusals in a metric by reason and in an Event on the ServiceImport.
func TestLyingMemberCannotRouteSpecialAddressesSpeakForPeersOrBackdateExports(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	east, west := mcsMember(e.east), mcsMember(e.west)
	proxy := startLiarProxy(t, e.east, eastLies)

	// West first: registered, exporting, on the hub.
	e.register(t, "west", "west", e.west.Kubeconfig)
	d := e.startDaemon(t, func(o *app.Options) { o.ExportMode = string(easync.ExportServiceExport) })
	for _, svc := range []string{"web", "checkout"} {
		west.service(t, svc, nil) // http:80
		west.export(t, svc, nil)
	}
	applySlices(t, e.west.Client, "web", endpointSlice("web", "web-west", 30, 3, true))
	applySlices(t, e.west.Client, "checkout", endpointSlice("checkout", "checkout-west", 31, 2, true))
	waitFor(t, e, "web", map[string]int{"west": 3}, map[string]int{"west": 3})
	waitFor(t, e, "checkout", map[string]int{"west": 2}, map[string]int{"west": 2})

	// East's registration must be at least a second (timestamps' resolution)
	// younger than west's export of checkout, so west's export is older than
	// east's export clamped to east's registration.
	westExport, err := west.mcs.MulticlusterV1beta1().ServiceExports(appNamespace).Get(ctx, "checkout", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(westExport.CreationTimestamp.Add(time.Second + 100*time.Millisecond)))

	// East's real objects: ordinary and valid.
	east.service(t, "web", nil)
	east.service(t, "checkout", func(s *corev1.Service) { s.Spec.Ports[0].Port = 8080 })
	east.export(t, "web", nil)
	east.export(t, "checkout", nil)
	if _, err := east.mcs.MulticlusterV1beta1().ServiceExports(metav1.NamespaceDefault).Create(ctx,
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "kubernetes"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	v6 := endpointSlice("web", "web-east-v6", 20, 5, true)
	v6.AddressType = discoveryv1.AddressTypeIPv6
	for i := range v6.Endpoints {
		v6.Endpoints[i].Addresses = []string{fmt.Sprintf("fd00:20::%d", i+1)}
	}
	applySlices(t, e.east.Client, "web", endpointSlice("web", "web-east-v4", 20, 9, true), v6)
	applySlices(t, e.east.Client, "checkout", endpointSlice("checkout", "checkout-east", 21, 2, true))

	if !t.Run("the proxy lies in lists and in streamed watch events", func(t *testing.T) { checkProxyLies(t, e, proxy) }) {
		t.FailNow()
	}
	sliceLies, exportLies := proxy.rewrites("EndpointSlice"), proxy.rewrites("ServiceExport")

	e.register(t, "east", "east", proxy.kubeconfig)

	t.Run("east's valid endpoints arrive through the proxy", func(t *testing.T) {
		eventually(t, waitTimeout, func() error {
			got := hubAddresses(t, e)
			for svc, want := range liarWant {
				if missing := without(want["east"], got[svc]["east"]); len(missing) > 0 {
					return fmt.Errorf("hub slices of %s from east lack %v (have %v)", svc, missing, got[svc])
				}
			}
			if proxy.rewrites("EndpointSlice") == sliceLies || proxy.rewrites("ServiceExport") == exportLies {
				return fmt.Errorf("the proxy rewrote nothing the daemon read (%d slices and %d exports before, %d and %d now)",
					sliceLies, exportLies, proxy.rewrites("EndpointSlice"), proxy.rewrites("ServiceExport"))
			}
			return nil
		})
	})
	t.Run("the daemon settles", d.waitSettled)
	defer logHubEventsIfFailed(t, e)
	t.Logf("the proxy rewrote %d EndpointSlices and %d ServiceExports", proxy.rewrites("EndpointSlice"), proxy.rewrites("ServiceExport"))

	t.Run("no special address reaches the hub, and the valid ones do", func(t *testing.T) {
		eventually(t, liarTimeout, func() error {
			errs := hubSpecialAddresses(t, e)
			got := hubAddresses(t, e)
			for svc, want := range liarWant {
				for _, c := range []string{"east", "west"} {
					if !sameSet(got[svc][c], want[c]) {
						errs = append(errs, fmt.Sprintf("hub slices of %s labelled %s hold %v, want %v", svc, c, got[svc][c], want[c]))
					}
				}
				// The per-cluster Endpoints hold the valid IPv4 addresses.
				if missing := without(ipv4(want["east"]), perClusterAddresses(t, e, svc, "east")); len(missing) > 0 {
					errs = append(errs, fmt.Sprintf("per-cluster Endpoints of %s from east lack %v", svc, missing))
				}
			}
			if len(errs) > 0 {
				return fmt.Errorf("\n  %s", strings.Join(errs, "\n  "))
			}
			return nil
		})
	})

	t.Run("east's endpoints are labelled east, and west's slices hold only west's", func(t *testing.T) {
		eventually(t, liarTimeout, func() error { return truthfulSourceLabels(t, e) })
	})

	t.Run("default/kubernetes is not imported", func(t *testing.T) {
		eventually(t, liarTimeout, func() error {
			if _, err := e.hubMCS.MulticlusterV1beta1().ServiceImports(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("hub ServiceImport default/kubernetes: want NotFound, got err=%v", err)
			}
			var ours []string
			for k, o := range e.ourObjects(t) {
				if strings.Split(k, "/")[1] == metav1.NamespaceDefault {
					ours = append(ours, fmt.Sprintf("%s (source %q)", k, o.cluster))
				}
			}
			if len(ours) > 0 {
				slices.Sort(ours)
				return fmt.Errorf("the daemon wrote into the hub's default namespace: %v", ours)
			}
			return nil
		})
	})

	t.Run("a backdated export does not win the port conflict", func(t *testing.T) {
		eventually(t, liarTimeout, func() error {
			ports, err := importPorts(t, e, "checkout")
			if err != nil {
				return err
			}
			if !slices.Equal(ports, []string{"http:80"}) {
				return fmt.Errorf("ServiceImport checkout ports %v, want west's [http:80]: east's 1970 export must count from east's registration, after west's export", ports)
			}
			return nil
		})
	})

	t.Run("a lying Service's invalid ports do not break the shared import", func(t *testing.T) {
		eventually(t, liarTimeout, func() error {
			ports, err := importPorts(t, e, "web")
			if err != nil {
				return err
			}
			if !slices.Equal(ports, []string{"http:80"}) {
				return fmt.Errorf("ServiceImport web ports %v, want [http:80]: east's invalid ports must be dropped", ports)
			}
			if st := e.hubState(t, "web"); st.derived == nil || len(st.derived.Spec.Ports) != 1 {
				return fmt.Errorf("derived Service of web: %v, want one with port http", st.derived)
			}
			return nil
		})
		eventually(t, liarTimeout, func() error {
			list, err := e.hub.Client.CoreV1().Events(appNamespace).List(ctx, metav1.ListOptions{
				FieldSelector: fields.Set{"involvedObject.kind": "ServiceImport", "involvedObject.name": "web", "reason": easync.ReasonInvalidExport}.String(),
			})
			if err != nil {
				return err
			}
			for _, ev := range list.Items {
				if strings.Contains(ev.Message, "cluster east") && strings.Contains(ev.Message, "Not_A_Label") && strings.Contains(ev.Message, "HTTP3") {
					return nil
				}
			}
			return fmt.Errorf("no InvalidExport Event on ServiceImport web naming east's ports (%d Events)", len(list.Items))
		})
	})

	t.Run("the refusals are counted by reason and reported on the ServiceImport", func(t *testing.T) {
		want := map[string]float64{}
		for _, lie := range liarSpecial {
			want[lie.reason]++
		}
		eventually(t, liarTimeout, func() error {
			for _, reason := range slices.Sorted(maps.Keys(want)) {
				labels := map[string]string{"cluster": "east", "reason": reason}
				if got := gaugeSum(t, d, "endpoint_aggregator_refused_member_endpoints", labels); got != want[reason] {
					return fmt.Errorf(`endpoint_aggregator_refused_member_endpoints{cluster="east",reason=%q} = %v, want %v`, reason, got, want[reason])
				}
			}
			return nil
		})
		eventually(t, liarTimeout, func() error {
			list, err := e.hub.Client.CoreV1().Events(appNamespace).List(ctx, metav1.ListOptions{
				FieldSelector: fields.Set{"involvedObject.kind": "ServiceImport", "involvedObject.name": "web"}.String(),
			})
			if err != nil {
				return err
			}
			var seen []string
			for _, ev := range list.Items {
				if ev.Reason == "EndpointsRefused" && ev.InvolvedObject.Namespace == appNamespace && strings.Contains(ev.Message, "east") {
					return nil
				}
				seen = append(seen, ev.Reason+": "+ev.Message)
			}
			return fmt.Errorf("no EndpointsRefused Event naming east on ServiceImport %s/web; its Events: %q", appNamespace, seen)
		})
	})
}

// logHubEventsIfFailed logs the hub's Events in the app namespace when t
// has failed: they say what the daemon made of east's lies.
func logHubEventsIfFailed(t *testing.T, e *env) {
	if !t.Failed() {
		return
	}
	list, err := e.hub.Client.CoreV1().Events(appNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Logf("listing hub Events: %v", err)
		return
	}
	for _, ev := range list.Items {
		t.Logf("hub Event on %s %s: %s: %s", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Message)
	}
}

// checkProxyLies reads east through the proxy: a list and a streamed watch
// event must carry the lies, while east's API server keeps the truth.
func checkProxyLies(t *testing.T, e *env, p *liarProxy) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cfg := p.restConfig(t)
	kube := kubernetes.NewForConfigOrDie(cfg)

	sel := metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"}
	list, err := kube.DiscoveryV1().EndpointSlices(appNamespace).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	if got := sliceAddresses(list.Items); !slices.Contains(got, "127.0.0.1") || !slices.Contains(got, "::ffff:10.1.1.1") {
		t.Errorf("web's slices through the proxy have %v, want the lies 127.0.0.1 and ::ffff:10.1.1.1", got)
	}
	for _, s := range list.Items {
		if s.Labels[mcsv1beta1.LabelSourceCluster] != "west" {
			t.Errorf("slice %s through the proxy is labelled %v, want source-cluster west", s.Name, s.Labels)
		}
	}
	truth, err := e.east.Client.DiscoveryV1().EndpointSlices(appNamespace).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	if got := sliceAddresses(truth.Items); slices.Contains(got, "127.0.0.1") {
		t.Errorf("east's API server itself holds %v", got)
	}

	se, err := mcsclientset.NewForConfigOrDie(cfg).MulticlusterV1beta1().ServiceExports(appNamespace).Get(ctx, "checkout", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if y := se.CreationTimestamp.Year(); y != 1970 {
		t.Errorf("checkout's ServiceExport through the proxy was created in %d, want the lie 1970", y)
	}

	// A watch must stream: the event of a slice created after it started
	// arrives, rewritten, while the response is still open.
	w, err := kube.DiscoveryV1().EndpointSlices(appNamespace).Watch(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=probe"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	probe := endpointSlice("probe", "probe", 20, 1, true) // 10.20.0.1, said to be 127.0.0.1
	if _, err := e.east.Client.DiscoveryV1().EndpointSlices(appNamespace).Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = e.east.Client.DiscoveryV1().EndpointSlices(appNamespace).Delete(context.Background(), "probe", metav1.DeleteOptions{})
	}()
	select {
	case ev, ok := <-w.ResultChan():
		s, isSlice := ev.Object.(*discoveryv1.EndpointSlice)
		if !ok || ev.Type != watch.Added || !isSlice {
			t.Fatalf("watch through the proxy: got %v %T, want an ADDED EndpointSlice", ev.Type, ev.Object)
		}
		if got := sliceAddresses([]discoveryv1.EndpointSlice{*s}); !slices.Equal(got, []string{"127.0.0.1"}) {
			t.Errorf("watched probe slice through the proxy has %v, want the lie [127.0.0.1]", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event through the proxy within 10s: the proxy does not stream")
	}
}

// hubAddresses returns the addresses of the hub's MCS slices in the app
// namespace, by service and source-cluster label, sorted.
func hubAddresses(t *testing.T, e *env) map[string]map[string][]string {
	t.Helper()
	out := map[string]map[string][]string{}
	for _, s := range hubMCSSlices(t, e, appNamespace) {
		svc, c := s.Labels[mcsv1beta1.LabelServiceName], s.Labels[mcsv1beta1.LabelSourceCluster]
		if out[svc] == nil {
			out[svc] = map[string][]string{}
		}
		out[svc][c] = append(out[svc][c], sliceAddresses([]discoveryv1.EndpointSlice{s})...)
	}
	for _, byCluster := range out {
		for _, addrs := range byCluster {
			slices.Sort(addrs)
		}
	}
	return out
}

// hubSpecialAddresses says where a special address (any one the proxy
// tells) sits in a hub MCS slice or in one of our Endpoints, anywhere.
func hubSpecialAddresses(t *testing.T, e *env) []string {
	t.Helper()
	special := map[string]bool{}
	for _, lie := range liarSpecial {
		special[lie.to] = true
	}
	var out []string
	for _, s := range hubMCSSlices(t, e, metav1.NamespaceAll) {
		for _, a := range sliceAddresses([]discoveryv1.EndpointSlice{s}) {
			if special[a] {
				out = append(out, fmt.Sprintf("EndpointSlice %s/%s (source-cluster %s) holds %s", s.Namespace, s.Name, s.Labels[mcsv1beta1.LabelSourceCluster], a))
			}
		}
	}
	eps, err := e.hub.Client.CoreV1().Endpoints(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{
		LabelSelector: endpoints.LabelManagedBy + "=" + endpoints.ManagedByValue,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range eps.Items {
		for _, a := range endpointsAddresses(&ep) {
			if special[a] {
				out = append(out, fmt.Sprintf("Endpoints %s/%s holds %s", ep.Namespace, ep.Name, a))
			}
		}
	}
	return out
}

// truthfulSourceLabels checks that every hub slice holding an address of
// east's is labelled east, and that west's slices hold only west's.
func truthfulSourceLabels(t *testing.T, e *env) error {
	t.Helper()
	owner := map[string]string{} // address → the cluster that has it
	for _, byCluster := range liarWant {
		for c, addrs := range byCluster {
			for _, a := range addrs {
				owner[a] = c
			}
		}
	}
	for _, lie := range liarSpecial {
		owner[lie.to] = "east"
	}
	var errs []string
	for _, s := range hubMCSSlices(t, e, metav1.NamespaceAll) {
		label := s.Labels[mcsv1beta1.LabelSourceCluster]
		for _, a := range sliceAddresses([]discoveryv1.EndpointSlice{s}) {
			if owner[a] == "east" && label != "east" {
				errs = append(errs, fmt.Sprintf("slice %s/%s labelled source-cluster %q holds east's %s", s.Namespace, s.Name, label, a))
			}
			if label == "west" && owner[a] != "west" {
				errs = append(errs, fmt.Sprintf("west's slice %s/%s holds %s, which is not west's", s.Namespace, s.Name, a))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("\n  %s", strings.Join(errs, "\n  "))
	}
	return nil
}

// hubMCSSlices lists the hub's slices with an MCS service-name label.
func hubMCSSlices(t *testing.T, e *env, ns string) []discoveryv1.EndpointSlice {
	t.Helper()
	list, err := e.hub.Client.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{LabelSelector: mcsv1beta1.LabelServiceName})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// perClusterAddresses returns the addresses of our per-cluster Endpoints
// of svc from cluster.
func perClusterAddresses(t *testing.T, e *env, svc, cluster string) []string {
	t.Helper()
	list, err := e.hub.Client.CoreV1().Endpoints(appNamespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: endpoints.LabelServiceName + "=" + svc + "," + endpoints.LabelSourceCluster + "=" + cluster,
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := range list.Items {
		out = append(out, endpointsAddresses(&list.Items[i])...)
	}
	return out
}

func sliceAddresses(ss []discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range ss {
		for _, ep := range s.Endpoints {
			out = append(out, ep.Addresses...)
		}
	}
	return out
}

func endpointsAddresses(ep *corev1.Endpoints) []string {
	var out []string
	for _, ss := range ep.Subsets {
		for _, a := range slices.Concat(ss.Addresses, ss.NotReadyAddresses) {
			out = append(out, a.IP)
		}
	}
	return out
}

// without returns the elements of want missing from have.
func without(want, have []string) []string {
	var out []string
	for _, a := range want {
		if !slices.Contains(have, a) {
			out = append(out, a)
		}
	}
	return out
}

func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

func ipv4(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		if !strings.Contains(a, ":") {
			out = append(out, a)
		}
	}
	return out
}

// importPorts lists the hub ServiceImport's ports of svc as "name:port".
func importPorts(t *testing.T, e *env, svc string) ([]string, error) {
	t.Helper()
	imp, err := e.serviceImport(t, svc)
	if err != nil {
		return nil, err
	}
	var ports []string
	for _, p := range imp.Spec.Ports {
		ports = append(ports, fmt.Sprintf("%s:%d", p.Name, p.Port))
	}
	return ports, nil
}
