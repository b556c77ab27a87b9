package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// podURL is the URL of path on the echo server of the pod at ip (either
// family).
func podURL(ip, path string) string {
	return "http://" + net.JoinHostPort(ip, "8080") + path
}

// ofFamily makes svc take every IP family of a dual-stack cluster; in a
// single-family cluster it keeps the default, that family.
func ofFamily(svc *corev1.Service, family testenv.Family) *corev1.Service {
	if len(family.IPFamilies()) > 1 {
		svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
	}
	return svc
}

// familiesOf returns the IP family of each of ips, in order.
func familiesOf(ips []string) ([]corev1.IPFamily, error) {
	var out []corev1.IPFamily
	for _, s := range ips {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, err
		}
		if a.Unmap().Is4() {
			out = append(out, corev1.IPv4Protocol)
		} else {
			out = append(out, corev1.IPv6Protocol)
		}
	}
	return out, nil
}

// lookupAt asks the DNS server at server (host:port) alone for name's
// addresses: network "ip4" sends an A query, "ip6" an AAAA query. The
// machine's resolver is never asked; an answer without records is an
// empty list.
func lookupAt(server, network, name string) ([]string, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", server)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ips, err := r.LookupIP(ctx, network, name)
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	sort.Strings(out)
	return out, nil
}

// checkClusterSetFamilies checks, in a hub of family (IPv6 only or
// dual-stack) whose members export echo and echo-headless from every
// family: the ServiceImport of echo has one ClusterSet IP per family, in
// the hub's Service range of that family, and its derived Service carries
// the same families and IPs; the hub's CoreDNS answers AAAA (and A only
// where the hub has IPv4) for both clusterset names; the client pod at
// clientIP reaches the backends of every member through the IPv6 ClusterSet
// IP.
func checkClusterSetFamilies(t *testing.T, hub *testenv.Cluster, family testenv.Family, clientIP string, members ...*testenv.Cluster) {
	t.Helper()
	ctx := context.Background()
	want := family.IPFamilies()
	mcs := mcsclientset.NewForConfigOrDie(hub.Config)
	byFamily := map[corev1.IPFamily]string{}
	eventually(t, time.Minute, func() error {
		imp, err := mcs.MulticlusterV1beta1().ServiceImports(appNS).Get(ctx, "echo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		got, err := familiesOf(imp.Spec.IPs)
		if err != nil {
			return fmt.Errorf("ServiceImport IPs %v: %w", imp.Spec.IPs, err)
		}
		if !slices.Equal(imp.Spec.IPFamilies, want) || !slices.Equal(got, want) {
			return fmt.Errorf("ServiceImport ipFamilies %v, IPs %v of families %v; want one IP of each of %v in that order", imp.Spec.IPFamilies, imp.Spec.IPs, got, want)
		}
		derived, err := hub.Client.CoreV1().Services(appNS).Get(ctx, endpoints.DerivedServiceName(appNS, "echo"), metav1.GetOptions{})
		if err != nil {
			return err
		}
		policy := corev1.IPFamilyPolicySingleStack
		if len(want) > 1 {
			policy = corev1.IPFamilyPolicyRequireDualStack
		}
		if !slices.Equal(derived.Spec.IPFamilies, want) || derived.Spec.IPFamilyPolicy == nil || *derived.Spec.IPFamilyPolicy != policy ||
			!slices.Equal(derived.Spec.ClusterIPs, imp.Spec.IPs) {
			return fmt.Errorf("derived Service %s: ipFamilies %v, policy %v, clusterIPs %v; want %v, %s, %v",
				derived.Name, derived.Spec.IPFamilies, ptr.Deref(derived.Spec.IPFamilyPolicy, ""), derived.Spec.ClusterIPs, want, policy, imp.Spec.IPs)
		}
		for i, ip := range imp.Spec.IPs {
			byFamily[want[i]] = ip
		}
		return nil
	})
	for i, cidr := range hub.Node.ServiceCIDRs {
		if !netip.MustParsePrefix(cidr).Contains(netip.MustParseAddr(byFamily[want[i]])) {
			t.Errorf("the %s ClusterSet IP %s is outside the hub's %s Service range %s", want[i], byFamily[want[i]], want[i], cidr)
		}
	}
	t.Logf("ServiceImport %s/echo: ClusterSet IPs %v", appNS, byFamily)

	// The pods' IPs of each family, as the members report them.
	podIPs := map[corev1.IPFamily][]string{}
	for _, m := range members {
		list, err := m.Client.CoreV1().Pods(appNS).List(ctx, metav1.ListOptions{LabelSelector: "app=echo"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			for _, ip := range p.Status.PodIPs {
				f, err := familiesOf([]string{ip.IP})
				if err != nil {
					t.Fatal(err)
				}
				podIPs[f[0]] = append(podIPs[f[0]], ip.IP)
			}
		}
	}
	dns := net.JoinHostPort(hub.Node.HostIP, "53")
	for _, f := range []struct {
		family  corev1.IPFamily
		network string
	}{{corev1.IPv4Protocol, "ip4"}, {corev1.IPv6Protocol, "ip6"}} {
		var clusterSet []string
		if ip, ok := byFamily[f.family]; ok {
			clusterSet = []string{ip}
		}
		headless := slices.Clone(podIPs[f.family])
		sort.Strings(headless)
		if f.family == corev1.IPv6Protocol && (len(clusterSet) != 1 || len(headless) == 0) {
			t.Fatalf("no IPv6 to look for: ClusterSet IP %v, pod IPs %v", clusterSet, headless)
		}
		for name, wantIPs := range map[string][]string{
			"echo." + appNS + ".svc.clusterset.local.":          clusterSet,
			"echo-headless." + appNS + ".svc.clusterset.local.": headless,
		} {
			eventually(t, time.Minute, func() error {
				got, err := lookupAt(dns, f.network, name)
				if err != nil {
					return err
				}
				if !slices.Equal(got, wantIPs) {
					return fmt.Errorf("%s records of %s from %s: %v, want %v", map[string]string{"ip4": "A", "ip6": "AAAA"}[f.network], name, dns, got, wantIPs)
				}
				return nil
			})
		}
	}

	target := "http://" + net.JoinHostPort(byFamily[corev1.IPv6Protocol], "80") + "/"
	eventually(t, time.Minute, func() error {
		by, failed, err := answers(clientIP, target, 40)
		if err != nil {
			return err
		}
		for _, m := range members {
			if by[m.Name] == 0 {
				return fmt.Errorf("answers by cluster %v, %d failed; none from %s", by, failed, m.Name)
			}
		}
		if failed > 0 {
			return fmt.Errorf("answers by cluster %v, %d failed", by, failed)
		}
		t.Logf("40 requests to %s: %v", target, by)
		return nil
	})
}
