package e2e

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

// TestDNS resolves the hub's MCS objects with a real CoreDNS: its kubernetes
// plugin, with `multicluster clusterset.local`, answers
// <svc>.<ns>.svc.clusterset.local from the ServiceImports and the
// EndpointSlices labelled multicluster.kubernetes.io/service-name and
// .../source-cluster that the daemon writes. The steps share state and run
// in order.
func TestDNS(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	e.startDaemon(t, nil)
	dns := newDNSClient(testenv.StartCoreDNS(t, e.hub.KubeconfigPath))

	// cart: a ClusterSetIP service with two ports, exported from both
	// members. Its endpoints have no hostname.
	cartPorts := []corev1.ServicePort{
		{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
		{Name: "grpc", Port: 9000, Protocol: corev1.ProtocolTCP},
	}
	exportService(t, e.east.Client, "cart", cartPorts...)
	exportService(t, e.west.Client, "cart", cartPorts...)
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-east-1", 1, 3, true))
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-west-1", 2, 2, true))

	// db: a headless service exported from both members whose endpoints
	// have hostnames (as a StatefulSet's do); db-0 exists in both clusters,
	// and one endpoint of east is not ready.
	dbEast := []dnsEndpoint{
		{hostname: "db-0", ip: "10.11.0.1", ready: true},
		{hostname: "db-1", ip: "10.11.0.2", ready: true},
		{hostname: "db-2", ip: "10.11.0.3", ready: false},
	}
	dbWest := []dnsEndpoint{
		{hostname: "db-0", ip: "10.12.0.1", ready: true},
		{hostname: "db-1", ip: "10.12.0.2", ready: true},
	}
	exportHeadlessService(t, e.east.Client, "db")
	exportHeadlessService(t, e.west.Client, "db")
	applySlices(t, e.east.Client, "db", hostnameSlice("db", "db-east-1", dbEast))
	applySlices(t, e.west.Client, "db", hostnameSlice("db", "db-west-1", dbWest))

	const (
		cartName = "cart." + appNamespace + ".svc." + testenv.ClusterSetZone + "."
		dbName   = "db." + appNamespace + ".svc." + testenv.ClusterSetZone + "."
	)

	// The hub converges first, so that a DNS failure below is CoreDNS's
	// reading of the hub, not the daemon being slow.
	if !t.Run("the hub has the ServiceImports and slices", func(t *testing.T) {
		eventually(t, waitTimeout, func() error {
			for svc, want := range map[string]map[string]int{
				"cart": {"east": 3, "west": 2},
				"db":   {"east": 3, "west": 2},
			} {
				st := e.hubState(t, svc)
				if !mapsEqual(st.total, want) {
					return fmt.Errorf("hub slices of %s: %v endpoints per cluster, want %v", svc, st.total, want)
				}
			}
			cart, err := e.hubMCS.MulticlusterV1beta1().ServiceImports(appNamespace).Get(ctx, "cart", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cart.Spec.Type != mcsv1beta1.ClusterSetIP || len(cart.Spec.IPs) == 0 || len(cart.Spec.Ports) != 2 {
				return fmt.Errorf("ServiceImport cart: type %q ips %v ports %v", cart.Spec.Type, cart.Spec.IPs, cart.Spec.Ports)
			}
			db, err := e.hubMCS.MulticlusterV1beta1().ServiceImports(appNamespace).Get(ctx, "db", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if db.Spec.Type != mcsv1beta1.Headless {
				return fmt.Errorf("ServiceImport db: type %q, want %q", db.Spec.Type, mcsv1beta1.Headless)
			}
			return nil
		})
	}) {
		t.FailNow()
	}

	t.Run("ClusterSetIP: the A record is the ServiceImport's IP", func(t *testing.T) {
		imp, err := e.hubMCS.MulticlusterV1beta1().ServiceImports(appNamespace).Get(ctx, "cart", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{imp.Spec.IPs[0]}
		eventually(t, waitTimeout, func() error { return dns.wantA(cartName, want) })
	})

	t.Run("headless: the A records are the ready endpoints of both members", func(t *testing.T) {
		want := readyIPs(dbEast, dbWest)
		eventually(t, waitTimeout, func() error { return dns.wantA(dbName, want) })
	})

	t.Run("SRV records per port", func(t *testing.T) {
		eventually(t, waitTimeout, func() error {
			// ClusterSetIP: one record per ServiceImport port, the
			// service port, targeting the service name.
			for _, p := range cartPorts {
				got, err := dns.lookupSRV(p.Name, "tcp", cartName)
				if err != nil {
					return err
				}
				if want := []string{fmt.Sprintf("%s:%d", cartName, p.Port)}; !slices.Equal(got, want) {
					return fmt.Errorf("SRV _%s._tcp.%s = %v, want %v", p.Name, cartName, got, want)
				}
			}
			if err := dns.wantRcode("_https._tcp."+cartName, typeSRV, rcodeNXDomain); err != nil {
				return fmt.Errorf("a port the service lacks: %w", err)
			}
			// Headless: one record per ready endpoint, the endpoint
			// port, targeting <hostname>.<cluster>.<svc>.<ns>.svc.<zone>.
			got, err := dns.lookupSRV("http", "tcp", dbName)
			if err != nil {
				return err
			}
			var want []string
			for cluster, eps := range map[string][]dnsEndpoint{"east": dbEast, "west": dbWest} {
				for _, ep := range eps {
					if ep.ready {
						want = append(want, fmt.Sprintf("%s.%s.%s:8080", ep.hostname, cluster, dbName))
					}
				}
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				return fmt.Errorf("SRV _http._tcp.%s = %v, want %v", dbName, got, want)
			}
			return nil
		})
	})

	t.Run("per-endpoint names resolve to the endpoint's IP", func(t *testing.T) {
		eventually(t, waitTimeout, func() error {
			for cluster, eps := range map[string][]dnsEndpoint{"east": dbEast, "west": dbWest} {
				for _, ep := range eps {
					name := ep.hostname + "." + cluster + "." + dbName
					if !ep.ready {
						// Not-ready endpoints are not published.
						if err := dns.wantRcode(name, typeA, rcodeNXDomain); err != nil {
							return fmt.Errorf("not-ready endpoint: %w", err)
						}
						continue
					}
					if err := dns.wantA(name, []string{ep.ip}); err != nil {
						return err
					}
				}
			}
			// An endpoint without a hostname is named by its dashed
			// IP; the cluster label must still match.
			name := "10-1-0-1.east." + cartName
			if err := dns.wantA(name, []string{"10.1.0.1"}); err != nil {
				return err
			}
			return dns.wantRcode("10-1-0-1.west."+cartName, typeA, rcodeNXDomain)
		})
	})

	t.Run("an endpoint that becomes ready is published", func(t *testing.T) {
		dbEast[2].ready = true
		applySlices(t, e.east.Client, "db", hostnameSlice("db", "db-east-1", dbEast))
		want := readyIPs(dbEast, dbWest)
		name := "db-2.east." + dbName
		eventually(t, waitTimeout, func() error {
			if err := dns.wantA(dbName, want); err != nil {
				return err
			}
			return dns.wantA(name, []string{"10.11.0.3"})
		})
	})

	t.Run("NXDOMAIN after unexport", func(t *testing.T) {
		// cart: the export annotation is removed in both members.
		for _, c := range []kubernetes.Interface{e.east.Client, e.west.Client} {
			svc, err := c.CoreV1().Services(appNamespace).Get(ctx, "cart", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			delete(svc.Annotations, easync.AnnotationExport)
			if _, err := c.CoreV1().Services(appNamespace).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// db: the Service is deleted in both members (its slices stay,
		// as they would until a member's garbage collector ran).
		for _, c := range []kubernetes.Interface{e.east.Client, e.west.Client} {
			if err := c.CoreV1().Services(appNamespace).Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, waitTimeout, func() error {
			for _, q := range []struct {
				name  string
				qtype uint16
			}{
				{cartName, typeA},
				{"_http._tcp." + cartName, typeSRV},
				{"10-1-0-1.east." + cartName, typeA},
				{dbName, typeA},
				{"_http._tcp." + dbName, typeSRV},
				{"db-0.east." + dbName, typeA},
				{"db-0.west." + dbName, typeA},
			} {
				if err := dns.wantRcode(q.name, q.qtype, rcodeNXDomain); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// dnsEndpoint is one endpoint of a headless service.
type dnsEndpoint struct {
	hostname, ip string
	ready        bool
}

func readyIPs(lists ...[]dnsEndpoint) []string {
	var out []string
	for _, eps := range lists {
		for _, ep := range eps {
			if ep.ready {
				out = append(out, ep.ip)
			}
		}
	}
	slices.Sort(out)
	return out
}

// exportHeadlessService creates an annotated (exported) headless Service
// with one port, http/80, in a member.
func exportHeadlessService(t *testing.T, c kubernetes.Interface, name string) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: name, Annotations: map[string]string{easync.AnnotationExport: "true"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Ports:     []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
	out, err := c.CoreV1().Services(appNamespace).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// hostnameSlice builds a member slice of svc whose endpoints have hostnames,
// port http/8080, as a StatefulSet's headless service has.
func hostnameSlice(svc, name string, eps []dnsEndpoint) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc,
			discoveryv1.LabelManagedBy:   "test",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, ep := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{ep.ip},
			Hostname:   ptr.To(ep.hostname),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ep.ready), Serving: ptr.To(ep.ready), Terminating: ptr.To(false)},
		})
	}
	return s
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// dnsClient queries one DNS server: records through the standard library's
// resolver, and response codes through a minimal raw query (the resolver
// reports NXDOMAIN and NODATA alike).
type dnsClient struct {
	addr     string
	resolver *net.Resolver
}

func newDNSClient(addr string) *dnsClient {
	return &dnsClient{
		addr: addr,
		resolver: &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}},
	}
}

const dnsQueryTimeout = 3 * time.Second

// lookupA returns the sorted IPv4 addresses of the absolute name fqdn.
func (c *dnsClient) lookupA(fqdn string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dnsQueryTimeout)
	defer cancel()
	ips, err := c.resolver.LookupIP(ctx, "ip4", fqdn)
	if err != nil {
		return nil, fmt.Errorf("A %s: %w", fqdn, err)
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	slices.Sort(out)
	return out, nil
}

// lookupSRV returns the SRV records of _service._proto.fqdn as sorted
// "target:port" strings.
func (c *dnsClient) lookupSRV(service, proto, fqdn string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dnsQueryTimeout)
	defer cancel()
	_, srvs, err := c.resolver.LookupSRV(ctx, service, proto, fqdn)
	if err != nil {
		return nil, fmt.Errorf("SRV _%s._%s.%s: %w", service, proto, fqdn, err)
	}
	out := make([]string, 0, len(srvs))
	for _, s := range srvs {
		out = append(out, fmt.Sprintf("%s:%d", strings.ToLower(s.Target), s.Port))
	}
	slices.Sort(out)
	return out, nil
}

// DNS record types and response codes (RFC 1035, RFC 2782).
const (
	typeA   uint16 = 1
	typeSRV uint16 = 33

	rcodeNXDomain = 3
)

var rcodeNames = map[int]string{0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}

func rcodeName(rc int) string {
	if n, ok := rcodeNames[rc]; ok {
		return n
	}
	return fmt.Sprintf("RCODE%d", rc)
}

// wantA checks that fqdn's A records are exactly want (sorted).
func (c *dnsClient) wantA(fqdn string, want []string) error {
	got, err := c.lookupA(fqdn)
	if err != nil {
		return err
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("A %s = %v, want %v", fqdn, got, want)
	}
	return nil
}

// wantRcode checks the response code of a query for fqdn.
func (c *dnsClient) wantRcode(fqdn string, qtype uint16, want int) error {
	rc, answers, err := c.rcode(fqdn, qtype)
	if err != nil {
		return err
	}
	if rc != want {
		return fmt.Errorf("%s (type %d): %s with %d answers, want %s", fqdn, qtype, rcodeName(rc), answers, rcodeName(want))
	}
	return nil
}

// rcode sends one query over UDP and returns the response code and the
// number of answers.
func (c *dnsClient) rcode(fqdn string, qtype uint16) (rcode, answers int, err error) {
	var id [2]byte
	if _, err := rand.Read(id[:]); err != nil {
		return 0, 0, err
	}
	// Header: ID, flags RD, QDCOUNT 1; then the question.
	msg := []byte{id[0], id[1], 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, label := range strings.Split(strings.TrimSuffix(fqdn, "."), ".") {
		if len(label) == 0 || len(label) > 63 {
			return 0, 0, fmt.Errorf("bad name %q", fqdn)
		}
		msg = append(msg, byte(len(label)))
		msg = append(msg, label...)
	}
	msg = append(msg, 0)
	msg = binary.BigEndian.AppendUint16(msg, qtype)
	msg = binary.BigEndian.AppendUint16(msg, 1) // class IN

	conn, err := net.Dial("udp", c.addr)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(dnsQueryTimeout)); err != nil {
		return 0, 0, err
	}
	if _, err := conn.Write(msg); err != nil {
		return 0, 0, err
	}
	buf := make([]byte, 65535)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return 0, 0, fmt.Errorf("query %s: %w", fqdn, err)
		}
		resp := buf[:n]
		if n < 12 || resp[0] != id[0] || resp[1] != id[1] || resp[2]&0x80 == 0 {
			continue // not our response
		}
		return int(resp[3] & 0x0f), int(binary.BigEndian.Uint16(resp[6:8])), nil
	}
}
