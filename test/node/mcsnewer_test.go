package node

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
)

// The namespaces of TestMCSNewerConformanceSpecs: one per scenario, so that
// they all run at once on one ClusterSet.
const (
	nsClient     = "newer-client"     // the request pods
	nsFields     = "newer-fields"     // a ClusterIP service with non-default fields, no pods
	nsDNS        = "newer-dns"        // hello in both clusters, exported from alpha only
	nsHeadless   = "newer-headless"   // a headless StatefulSet service in alpha
	nsType       = "newer-type"       // ClusterIP in alpha, headless in beta
	nsPortName   = "newer-portname"   // tcp/42 in alpha, tcp2/4242 in beta
	nsPortNumber = "newer-portnumber" // tcp/42 in alpha, tcp/4242 in beta
	helloService = "hello"            // the service name of every scenario
	helloPort    = 42                 // where the hello pods listen
	requestPod   = "request"          // the client pod in nsClient
	requestImage = testenv.NetshootImage
)

// TestMCSNewerConformanceSpecs mirrors, on real nodes, the specs the newest
// MCS conformance suite (kubernetes-sigs/mcs-api, conformance/) has beyond
// the copy the module proxy serves (TestMCSConformance runs that one). Each
// subtest is named after the spec it mirrors and written from its meaning.
// Two clusters, alpha and beta, each a hub of the ClusterSet with its own
// daemon and CoreDNS; the clients and servers are the images the newest
// suite names, served by the local stand-ins: a netshoot pod per cluster runs
// nslookup and `nc -4 -w` (`-6` for IPv6) through kubectl exec, and the
// hello pods run socat from a `sh -c` script that reads MY_POD_IPS. It runs
// in every IP family; the specs about addresses check each family of the
// cluster (A records, AAAA records, connections with `nc -4` and `nc -6`).
// One subtest mirrors the suite's --dns-domain: a second CoreDNS per
// cluster serves the ClusterSet under another domain.
// The StrictPortConflict spec with one port name and different numbers is
// not mirrored: the daemon fails it (docs/mcs.md says why).
func TestMCSNewerConformanceSpecs(t *testing.T) {
	for _, family := range testenv.Families {
		t.Run(family.String(), func(t *testing.T) { mcsNewerConformanceSpecs(t, family) })
	}
}

func mcsNewerConformanceSpecs(t *testing.T, family testenv.Family) {
	testenv.RequireRoot(t)
	testenv.RequireFamily(t, family)
	assets := testenv.RequireAssets(t)
	before := testenv.SnapshotHost()
	var dirs []string
	t.Cleanup(func() {
		if left := testenv.Leftovers(before, dirs...); len(left) > 0 {
			t.Errorf("left behind:\n%s", strings.Join(left, "\n"))
		}
	})
	var specs []testenv.Spec
	for _, n := range []string{"alpha", "beta"} {
		specs = append(specs, testenv.Spec{Name: n, Options: testenv.Options{CRDs: true,
			Node: &testenv.NodeOptions{ClusterDNSAtHost: true, MCSConformance: true, Family: family}}})
	}
	cs := testenv.StartAllT(t, specs...)
	alpha, beta := cs[0], cs[1]
	for _, c := range cs {
		dirs = append(dirs, c.Dir)
	}
	for _, c := range cs {
		testenv.StartCoreDNSAt(t, c.KubeconfigPath, c.Node.HostIP)
		mustCreateNamespace(t, c.Client, daemonNS)
		for _, other := range cs {
			if other != c {
				register(t, c, daemonNS, other)
			}
		}
		runDaemon(t, c)
		for _, ns := range []string{nsClient, nsFields, nsDNS, nsHeadless, nsType, nsPortName, nsPortNumber} {
			mustCreateNamespace(t, c.Client, ns)
		}
		create(t, c, requestPodObject())
	}
	kubectlBin := filepath.Join(assets, "kubectl")
	ctx := context.Background()
	ipFamilies := family.IPFamilies()

	// alpha exports every scenario's service first. Every Service has
	// each family of the cluster: fields is PreferDualStack (the spec on
	// IP families is about it), the rest RequireDualStack in dual-stack.
	fields := serviceOf(nsFields, tcpPort("tcp", helloPort, helloPort))
	fields.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	fields.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](10)}}
	fields.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
	fields.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferClose)
	fields.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyPreferDualStack)
	create(t, alpha, fields)
	dnsPorts := []corev1.ServicePort{tcpPort("tcp", helloPort, helloPort),
		{Name: "udp", Port: helloPort, Protocol: corev1.ProtocolUDP}}
	create(t, alpha, helloDeployment(nsDNS), ofFamily(serviceOf(nsDNS, dnsPorts...), family))
	headless := ofFamily(serviceOf(nsHeadless, tcpPort("tcp", helloPort, helloPort)), family)
	headless.Spec.ClusterIP = corev1.ClusterIPNone
	create(t, alpha, helloStatefulSet(nsHeadless, 2), headless)
	create(t, alpha, ofFamily(serviceOf(nsType, tcpPort("tcp", helloPort, helloPort)), family))
	create(t, alpha, helloDeployment(nsPortName), ofFamily(serviceOf(nsPortName, tcpPort("tcp", helloPort, helloPort)), family))
	create(t, alpha, helloDeployment(nsPortNumber), ofFamily(serviceOf(nsPortNumber, tcpPort("tcp", helloPort, helloPort)), family))
	for _, ns := range []string{nsFields, nsDNS, nsHeadless, nsType, nsPortName, nsPortNumber} {
		exportService(t, alpha, ns)
	}

	// beta: the same hello in nsDNS, not exported; the conflicting ones.
	create(t, beta, helloDeployment(nsDNS), ofFamily(serviceOf(nsDNS, dnsPorts...), family))
	headlessType := ofFamily(serviceOf(nsType, tcpPort("tcp", helloPort, helloPort)), family)
	headlessType.Spec.ClusterIP = corev1.ClusterIPNone
	create(t, beta, headlessType)
	create(t, beta, helloDeployment(nsPortName), ofFamily(serviceOf(nsPortName, tcpPort("tcp2", 4242, helloPort)), family))
	create(t, beta, helloDeployment(nsPortNumber), ofFamily(serviceOf(nsPortNumber, tcpPort("tcp", 4242, helloPort)), family))
	// The conflicting exports come after alpha's are imported, at least a
	// second later (creation times have seconds), so alpha's is the oldest.
	for _, ns := range []string{nsType, nsPortName, nsPortNumber} {
		eventually(t, time.Minute, func() error {
			_, err := serviceImport(alpha, ns)
			return err
		})
	}
	time.Sleep(1100 * time.Millisecond)
	for _, ns := range []string{nsType, nsPortName, nsPortNumber} {
		exportService(t, beta, ns)
	}
	for _, c := range cs {
		waitPodReady(t, c, nsClient, requestPod, 2*time.Minute)
	}

	t.Run("The SessionAffinity for a ClusterSetIP ServiceImport should match the exported service's SessionAffinity", func(t *testing.T) {
		exported := liveService(t, alpha, nsFields)
		for _, c := range cs {
			awaitImport(t, c, nsFields, func(si *mcsv1beta1.ServiceImport) error {
				if si.Spec.SessionAffinity != exported.Spec.SessionAffinity ||
					!equalJSON(si.Spec.SessionAffinityConfig, exported.Spec.SessionAffinityConfig) {
					return fmt.Errorf("sessionAffinity %s %s, want %s %s", si.Spec.SessionAffinity, toJSON(si.Spec.SessionAffinityConfig),
						exported.Spec.SessionAffinity, toJSON(exported.Spec.SessionAffinityConfig))
				}
				return nil
			})
		}
	})
	for _, field := range []struct {
		name, json string
		// get returns the field of the import and of the exported Service.
		get func(*mcsv1beta1.ServiceImport, *corev1.Service) (any, any)
	}{
		{"InternalTrafficPolicy", "internalTrafficPolicy", func(si *mcsv1beta1.ServiceImport, svc *corev1.Service) (any, any) {
			return si.Spec.InternalTrafficPolicy, svc.Spec.InternalTrafficPolicy
		}},
		{"TrafficDistribution", "trafficDistribution", func(si *mcsv1beta1.ServiceImport, svc *corev1.Service) (any, any) {
			return si.Spec.TrafficDistribution, svc.Spec.TrafficDistribution
		}},
	} {
		t.Run("The "+field.name+" for a ClusterSetIP ServiceImport should match the exported service's "+field.name, func(t *testing.T) {
			exported := liveService(t, alpha, nsFields)
			for _, c := range cs {
				awaitImport(t, c, nsFields, func(si *mcsv1beta1.ServiceImport) error {
					got, want := field.get(si, exported)
					if !equalJSON(got, want) {
						return fmt.Errorf("%s %s, want %s", field.json, toJSON(got), toJSON(want))
					}
					return nil
				})
			}
		})
	}
	t.Run("A ClusterSetIP ServiceImport should be allocated one IP per IP family", func(t *testing.T) {
		exported := liveService(t, alpha, nsFields)
		// The exported Service is PreferDualStack: it has every family
		// of the cluster, two in dual-stack.
		if !slices.Equal(exported.Spec.IPFamilies, ipFamilies) {
			t.Fatalf("the exported Service has ipFamilies %v, want the cluster's %v", exported.Spec.IPFamilies, ipFamilies)
		}
		for _, c := range cs {
			si := awaitImport(t, c, nsFields, func(si *mcsv1beta1.ServiceImport) error {
				if si.Spec.Type != mcsv1beta1.ClusterSetIP || !slices.Equal(si.Spec.IPFamilies, exported.Spec.IPFamilies) {
					return fmt.Errorf("type %s, ipFamilies %v; want ClusterSetIP, %v", si.Spec.Type, si.Spec.IPFamilies, exported.Spec.IPFamilies)
				}
				got, err := familiesOf(si.Spec.IPs)
				if err != nil {
					return fmt.Errorf("ips %v: %w", si.Spec.IPs, err)
				}
				if !slices.Equal(got, si.Spec.IPFamilies) {
					return fmt.Errorf("ips %v of families %v, want one IP of each of ipFamilies %v, in that order", si.Spec.IPs, got, si.Spec.IPFamilies)
				}
				return nil
			})
			// Each in the cluster's Service range of its family.
			for i, ip := range si.Spec.IPs {
				if cidr := c.Node.ServiceCIDRs[i]; !netip.MustParsePrefix(cidr).Contains(netip.MustParseAddr(ip)) {
					t.Errorf("%s: the import's %s IP %s is outside the cluster's %s Service range %s", c.Name, si.Spec.IPFamilies[i], ip, si.Spec.IPFamilies[i], cidr)
				}
			}
			// The IPs are the derived Service's, which kube-proxy routes.
			derived := derivedService(t, c, si)
			if !slices.Equal(si.Spec.IPs, derived.Spec.ClusterIPs) {
				t.Errorf("%s: the import's ips %v, its derived Service %s has clusterIPs %v", c.Name, si.Spec.IPs, derived.Name, derived.Spec.ClusterIPs)
			}
			t.Logf("%s: the import's ipFamilies %v, ips %v", c.Name, si.Spec.IPFamilies, si.Spec.IPs)
		}
	})
	t.Run("A service exported on two clusters with conflicting headlessness should apply the conflict resolution policy and report a Conflict condition on each ServiceExport", func(t *testing.T) {
		for _, c := range cs {
			eventually(t, time.Minute, func() error {
				se, err := mcsclientset.NewForConfigOrDie(c.Config).MulticlusterV1beta1().ServiceExports(nsType).Get(ctx, helloService, metav1.GetOptions{})
				if err != nil {
					return err
				}
				cond := meta.FindStatusCondition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionConflict))
				if cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Reason, string(mcsv1beta1.ServiceExportReasonTypeConflict)) {
					return fmt.Errorf("the export in %s has Conflict %+v, want True with TypeConflict", c.Name, cond)
				}
				return nil
			})
			// The oldest export, alpha's ClusterIP service, wins.
			awaitImport(t, c, nsType, func(si *mcsv1beta1.ServiceImport) error {
				if si.Spec.Type != mcsv1beta1.ClusterSetIP {
					return fmt.Errorf("type %s, want ClusterSetIP", si.Spec.Type)
				}
				return nil
			})
		}
	})
	t.Run("A DNS SRV query of the <service>.<ns>.svc.clusterset.local domain for a ClusterIP service should return valid SRV records", func(t *testing.T) {
		for _, c := range cs {
			expectSRV(t, kubectlBin, c, nsDNS, testenv.ClusterSetZone, "")
		}
	})
	t.Run("DNS lookups of the <service>.<ns>.svc.cluster.local domain for a ClusterIP service should only resolve local services", func(t *testing.T) {
		local := liveService(t, alpha, nsFields).Spec.ClusterIPs
		imported := awaitImport(t, alpha, nsFields, nil).Spec.IPs
		name := helloService + "." + nsFields + ".svc.cluster.local."
		clusterset := helloService + "." + nsFields + ".svc.clusterset.local."
		// beta imports hello but has no Service of that name.
		betaIPs := awaitImport(t, beta, nsFields, nil).Spec.IPs
		for _, f := range ipFamilies {
			want := ofIPFamily(t, local, f)
			eventually(t, time.Minute, func() error {
				got, out, err := podLookup(kubectlBin, alpha, f, name, "")
				if err != nil {
					return err
				}
				if !slices.Equal(got, want) {
					return fmt.Errorf("alpha: %s records of %s: %v, want its own Service's %v (the import's IPs are %v):\n%s", recordType(f), name, got, want, imported, out)
				}
				return nil
			})
			wantBeta := ofIPFamily(t, betaIPs, f)
			eventually(t, time.Minute, func() error {
				got, out, err := podLookup(kubectlBin, beta, f, clusterset, "")
				if err != nil || !slices.Equal(got, wantBeta) {
					return fmt.Errorf("beta: %s records of %s: %v (%v), want the import's %v:\n%s", recordType(f), clusterset, got, err, wantBeta, out)
				}
				return nil
			})
			got, out, err := podLookup(kubectlBin, beta, f, name, "")
			if err == nil || len(got) > 0 || !strings.Contains(out+err.Error(), "NXDOMAIN") {
				t.Errorf("beta: %s records of %s: %v (err %v), want NXDOMAIN:\n%s", recordType(f), name, got, err, out)
			}
			t.Logf("%s records: %s in alpha %v, in beta NXDOMAIN; %s in beta %v", recordType(f), name, want, clusterset, wantBeta)
		}
	})
	t.Run("A DNS query of the <hostname>.<clusterid>.<service>.<ns>.svc.clusterset.local domain for a headless StatefulSet service should return the requested pod's endpoint address", func(t *testing.T) {
		for _, c := range cs {
			for _, f := range ipFamilies {
				var eps []discoveryv1.Endpoint
				var clusterID string
				eventually(t, 2*time.Minute, func() error {
					var err error
					eps, clusterID, err = mcsEndpoints(c, nsHeadless, discoveryv1.AddressType(f))
					if err != nil {
						return err
					}
					ready := 0
					for _, ep := range eps {
						if ptr.Deref(ep.Conditions.Ready, false) && ptr.Deref(ep.Hostname, "") != "" {
							ready++
						}
					}
					if ready != 2 || len(eps) != 2 {
						return fmt.Errorf("%s: MCS %s endpoints %s, want 2 ready with hostnames", c.Name, f, toJSON(eps))
					}
					return nil
				})
				if clusterID != alpha.Name {
					t.Errorf("%s: the MCS %s slices' source cluster is %q, want alpha", c.Name, f, clusterID)
				}
				for _, ep := range eps {
					name := fmt.Sprintf("%s.%s.%s.%s.svc.clusterset.local.", *ep.Hostname, clusterID, helloService, nsHeadless)
					want := ofIPFamily(t, ep.Addresses, f)
					eventually(t, time.Minute, func() error {
						got, out, err := podLookup(kubectlBin, c, f, name, "")
						if err != nil || !slices.Equal(got, want) {
							return fmt.Errorf("%s: %s records of %s: %v (%v), want %v:\n%s", c.Name, recordType(f), name, got, err, want, out)
						}
						return nil
					})
					t.Logf("%s: %s records of %s: %v", c.Name, recordType(f), name, want)
				}
			}
		}
	})
	t.Run("Connectivity to a ClusterIP service existing in two clusters but exported from one should only access the exporting cluster", func(t *testing.T) {
		want := helloPodIP(t, alpha, nsDNS)
		other := helloPodIP(t, beta, nsDNS)
		for _, c := range cs {
			for _, f := range ipFamilies {
				expectOnlyFrom(t, kubectlBin, c, f, nsDNS, helloPort, want, other)
			}
		}
	})
	t.Run("Connectivity to exported services with different port name on each cluster should route traffic to each port only to the cluster that exposes it (StrictPortConflict)", func(t *testing.T) {
		a, b := helloPodIP(t, alpha, nsPortName), helloPodIP(t, beta, nsPortName)
		for _, c := range cs {
			for _, f := range ipFamilies {
				expectOnlyFrom(t, kubectlBin, c, f, nsPortName, helloPort, a, b)
				expectOnlyFrom(t, kubectlBin, c, f, nsPortName, 4242, b, a)
			}
		}
	})
	t.Run("Connectivity to exported services with same port name but different port numbers on each cluster should only route traffic to the cluster that exposes the port (StrictPortConflict)", func(t *testing.T) {
		// Once each hub holds the merge (alpha's tcp/42 wins, beta's
		// MCS slices carry no tcp), no connection may reach beta.
		for _, c := range cs {
			awaitSourcePorts(t, c, nsPortNumber, map[string]string{alpha.Name: "tcp", beta.Name: ""})
		}
		a, b := helloPodIP(t, alpha, nsPortNumber), helloPodIP(t, beta, nsPortNumber)
		for _, c := range cs {
			for _, f := range ipFamilies {
				expectOnlyFrom(t, kubectlBin, c, f, nsPortNumber, helloPort, a, b)
			}
		}
	})
	// The newest suite takes the ClusterSet's DNS domain as a flag
	// (--dns-domain, default clusterset.local). The daemon writes no name:
	// the domain is CoreDNS's multicluster zone alone. Here each cluster
	// gets a second CoreDNS whose multicluster zone is otherDNSDomain, and
	// the request pod asks it directly.
	t.Run("DNS lookups of the <service>.<ns>.svc.<dns-domain> domain for a ClusterIP service should resolve to the clusterset IPs when the ClusterSet's DNS domain is not clusterset.local (--dns-domain)", func(t *testing.T) {
		for _, c := range cs {
			server := testenv.StartCoreDNSZoneAt(t, c.KubeconfigPath, c.Node.HostIP, otherDNSDomain)
			ips := awaitImport(t, c, nsFields, nil).Spec.IPs
			name := helloService + "." + nsFields + ".svc." + otherDNSDomain + "."
			clusterset := helloService + "." + nsFields + ".svc.clusterset.local."
			for _, f := range ipFamilies {
				want := ofIPFamily(t, ips, f)
				eventually(t, time.Minute, func() error {
					got, out, err := podLookup(kubectlBin, c, f, name, server)
					if err != nil || !slices.Equal(got, want) {
						return fmt.Errorf("%s: %s records of %s from %s: %v (%v), want the import's %v:\n%s", c.Name, recordType(f), name, server, got, err, want, out)
					}
					return nil
				})
				// That server does not answer clusterset.local: no
				// address, and nslookup fails or says it found none.
				got, out, err := podLookup(kubectlBin, c, f, clusterset, server)
				if len(got) > 0 || (err == nil && !strings.Contains(strings.ToLower(out), "can't find")) {
					t.Errorf("%s: %s records of %s from %s: %v (err %v), want none:\n%s", c.Name, recordType(f), clusterset, server, got, err, out)
				}
				t.Logf("%s: from %s, %s records of %s: %v; of %s: none (%v)", c.Name, server, recordType(f), name, want, clusterset, err)
			}
			expectSRV(t, kubectlBin, c, nsDNS, otherDNSDomain, server)
		}
	})
}

// otherDNSDomain is the ClusterSet DNS domain of the --dns-domain spec.
const otherDNSDomain = "clusterset.example"

// recordType is the DNS record type of addresses of family f.
func recordType(f corev1.IPFamily) string {
	if f == corev1.IPv6Protocol {
		return "AAAA"
	}
	return "A"
}

// ofIPFamily returns, sorted, those of ips that are of family f, as
// nslookup prints them; it fails t when there are none, so that a check
// of a family never passes on nothing.
func ofIPFamily(t *testing.T, ips []string, f corev1.IPFamily) []string {
	t.Helper()
	var out []string
	for _, s := range ips {
		a, err := netip.ParseAddr(s)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if fams, _ := familiesOf([]string{s}); fams[0] == f {
			out = append(out, a.Unmap().String())
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %s address in %v", f, ips)
	}
	slices.Sort(out)
	return out
}

// podLookup asks, from the request pod of c, for name's records of family
// f (nslookup -type=A or AAAA), of the pod's nameserver or, if server is
// not "", of server (host:port); it returns the addresses answered,
// normalised and sorted, and what nslookup printed.
func podLookup(kubectlBin string, c *testenv.Cluster, f corev1.IPFamily, name, server string) ([]string, string, error) {
	script := "nslookup -type=" + recordType(f) + " " + name
	if server != "" {
		script += " " + server
	}
	out, err := podShell(kubectlBin, c, script)
	var got []string
	for _, s := range nslookupAddresses(out) {
		if a, perr := netip.ParseAddr(s); perr == nil {
			s = a.Unmap().String()
		}
		got = append(got, s)
	}
	slices.Sort(got)
	return got, out, err
}

// expectSRV checks, from the request pod of c, that the SRV records of
// hello in ns under domain (of server, or of the pod's nameserver when
// server is "") are one record, for port 42 (tcp/42 and udp/42 share the
// number), whose target is the service's name under domain.
func expectSRV(t *testing.T, kubectlBin string, c *testenv.Cluster, ns, domain, server string) {
	t.Helper()
	name := helloService + "." + ns + ".svc." + domain
	script := "nslookup -type=SRV " + name + "."
	if server != "" {
		script += " " + server
	}
	eventually(t, time.Minute, func() error {
		out, err := podShell(kubectlBin, c, script)
		if err != nil {
			return err
		}
		got := nslookupSRV(out)
		if want := []srvRecord{{port: helloPort, target: name}}; !slices.Equal(got, want) {
			return fmt.Errorf("%s: SRV %v, want %v:\n%s", c.Name, got, want, out)
		}
		t.Logf("%s: SRV records of %s: %v", c.Name, name, got)
		return nil
	})
}

// runDaemon runs the daemon of hub c in this process (the hub a member
// too) until the test ends, and waits until it is ready.
func runDaemon(t *testing.T, c *testenv.Cluster) {
	t.Helper()
	d, err := app.NewDaemon(daemonOptions(c.Name), c.Config, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Logf("daemon of %s: %v", c.Name, err)
		}
	})
	eventually(t, 2*time.Minute, func() error {
		if !d.Ready() {
			return fmt.Errorf("daemon of %s not ready", c.Name)
		}
		return nil
	})
}

// create creates objects in c.
func create(t *testing.T, c *testenv.Cluster, objs ...any) {
	t.Helper()
	ctx := context.Background()
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *corev1.Service:
			_, err = c.Client.CoreV1().Services(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Pod:
			_, err = c.Client.CoreV1().Pods(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.Deployment:
			_, err = c.Client.AppsV1().Deployments(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.StatefulSet:
			_, err = c.Client.AppsV1().StatefulSets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("create: unexpected %T", o)
		}
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
	}
}

func exportService(t *testing.T, c *testenv.Cluster, ns string) {
	t.Helper()
	if _, err := mcsclientset.NewForConfigOrDie(c.Config).MulticlusterV1beta1().ServiceExports(ns).Create(context.Background(),
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: helloService}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("%s: %v", c.Name, err)
	}
}

func serviceImport(c *testenv.Cluster, ns string) (*mcsv1beta1.ServiceImport, error) {
	return mcsclientset.NewForConfigOrDie(c.Config).MulticlusterV1beta1().ServiceImports(ns).Get(context.Background(), helloService, metav1.GetOptions{})
}

// awaitImport waits until c has the import of hello in ns and check, if
// any, accepts it; it returns the import.
func awaitImport(t *testing.T, c *testenv.Cluster, ns string, check func(*mcsv1beta1.ServiceImport) error) *mcsv1beta1.ServiceImport {
	t.Helper()
	var si *mcsv1beta1.ServiceImport
	eventually(t, time.Minute, func() error {
		var err error
		if si, err = serviceImport(c, ns); err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
		if check != nil {
			if err := check(si); err != nil {
				return fmt.Errorf("%s: the import of %s/%s: %w", c.Name, ns, helloService, err)
			}
		}
		return nil
	})
	return si
}

func liveService(t *testing.T, c *testenv.Cluster, ns string) *corev1.Service {
	t.Helper()
	s, err := c.Client.CoreV1().Services(ns).Get(context.Background(), helloService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// derivedService is the Service the import's annotation names.
func derivedService(t *testing.T, c *testenv.Cluster, si *mcsv1beta1.ServiceImport) *corev1.Service {
	t.Helper()
	name := si.Annotations["multicluster.kubernetes.io/derived-service"]
	if name == "" {
		t.Fatalf("%s: the import names no derived Service: %v", c.Name, si.Annotations)
	}
	s, err := c.Client.CoreV1().Services(si.Namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// mcsEndpoints returns the endpoints of the MCS slices of hello in ns in c
// of one address type, and the cluster they name as their source.
func mcsEndpoints(c *testenv.Cluster, ns string, addressType discoveryv1.AddressType) ([]discoveryv1.Endpoint, string, error) {
	list, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: mcsv1beta1.LabelServiceName + "=" + helloService})
	if err != nil {
		return nil, "", err
	}
	var eps []discoveryv1.Endpoint
	var source string
	for _, s := range list.Items {
		if s.AddressType != addressType {
			continue
		}
		source = s.Labels[mcsv1beta1.LabelSourceCluster]
		eps = append(eps, s.Endpoints...)
	}
	return eps, source, nil
}

// awaitSourcePorts waits until hub c's MCS slices of the hello service in
// ns, per source cluster, hold endpoints and the port names want gives it
// (comma-separated, sorted; "" for none).
func awaitSourcePorts(t *testing.T, c *testenv.Cluster, ns string, want map[string]string) {
	t.Helper()
	eventually(t, time.Minute, func() error {
		list, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{
			LabelSelector: mcsv1beta1.LabelServiceName + "=" + helloService})
		if err != nil {
			return err
		}
		ports := map[string]map[string]bool{}
		endpoints := map[string]int{}
		for _, s := range list.Items {
			cluster := s.Labels[mcsv1beta1.LabelSourceCluster]
			if ports[cluster] == nil {
				ports[cluster] = map[string]bool{}
			}
			endpoints[cluster] += len(s.Endpoints)
			for _, p := range s.Ports {
				ports[cluster][ptr.Deref(p.Name, "")] = true
			}
		}
		for cluster, w := range want {
			got := strings.Join(slices.Sorted(maps.Keys(ports[cluster])), ",")
			if endpoints[cluster] == 0 || got != w {
				return fmt.Errorf("%s: MCS slices of %s/%s from %s: %d endpoints, ports %q; want some endpoints and ports %q", c.Name, ns, helloService, cluster, endpoints[cluster], got, w)
			}
		}
		return nil
	})
}

// toJSON shows v as JSON; equalJSON compares two values that way (nil and
// a pointer to nothing differ).
func toJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

func equalJSON(a, b any) bool { return toJSON(a) == toJSON(b) }

func tcpPort(name string, port, target int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, TargetPort: intstr.FromInt32(target), Protocol: corev1.ProtocolTCP}
}

func serviceOf(ns string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: helloService},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": helloService}, Ports: ports},
	}
}

// helloListener is the script a hello container runs: it takes the pod's
// addresses from MY_POD_IPS (status.podIPs, comma separated) and listens
// on port 42 with socat, on an IPv6 socket (which takes IPv4 too) when the
// pod has an IPv6 address, else on IPv4; each connection is answered with
// "pod ip" and the pod's first address.
func helloListener(proto string) string {
	return `first=${MY_POD_IPS%%,*}
export first
case "$MY_POD_IPS" in
*:*) listen=` + proto + `6-LISTEN ;;
*) listen=` + proto + `-LISTEN ;;
esac
exec socat -v -v "$listen:` + strconv.Itoa(helloPort) + `,crlf,reuseaddr,fork" SYSTEM:'echo "pod ip $first"'`
}

// helloPodSpec runs the socat stand-in as the newest suite does, through
// sh -c, on TCP and UDP port 42; ready once TCP answers.
func helloPodSpec() corev1.PodSpec {
	container := func(proto string) corev1.Container {
		return corev1.Container{
			Name: strings.ToLower(proto), Image: testenv.SocatImage, ImagePullPolicy: corev1.PullNever,
			Command: []string{"/bin/sh", "-c", helloListener(proto)},
			Env: []corev1.EnvVar{{Name: "MY_POD_IPS", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIPs"}}}},
		}
	}
	tcp := container("TCP")
	tcp.ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(helloPort)}},
		PeriodSeconds: 1,
	}
	return corev1.PodSpec{
		AutomountServiceAccountToken:  ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To[int64](1),
		Containers:                    []corev1.Container{tcp, container("UDP")},
	}
}

func helloDeployment(ns string) *appsv1.Deployment {
	labels := map[string]string{"app": helloService}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: helloService},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: helloPodSpec()},
		},
	}
}

// helloStatefulSet's pods have hostnames (web-0, ...) under the headless
// hello service, which their endpoints carry.
func helloStatefulSet(ns string, replicas int32) *appsv1.StatefulSet {
	labels := map[string]string{"app": helloService}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(replicas),
			ServiceName:         helloService,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template:            corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: helloPodSpec()},
		},
	}
}

// requestPodObject is the client: the netshoot stand-in, idle, for
// commands run with kubectl exec.
func requestPodObject() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: nsClient, Name: requestPod},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: requestPod, Image: requestImage, ImagePullPolicy: corev1.PullNever,
				Args: []string{"sleep", "86400"},
			}},
		},
	}
}

// podShell runs script with sh -c in the request pod of c and returns its
// stdout; the error holds its stderr.
func podShell(kubectlBin string, c *testenv.Cluster, script string) (string, error) {
	cmd := exec.Command(kubectlBin, "--kubeconfig", c.KubeconfigPath, "exec", "-n", nsClient, requestPod, "-c", requestPod,
		"--", "sh", "-c", script)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s: %q: %w: %s", c.Name, script, err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// nslookupAddresses returns, sorted, the addresses nslookup printed as
// answers: the Address lines after a Name line (the ones before are the
// server's).
func nslookupAddresses(out string) []string {
	var addrs []string
	named := false
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "Name:"):
			named = true
		case named && strings.HasPrefix(line, "Address:"):
			addrs = append(addrs, strings.TrimSpace(strings.TrimPrefix(line, "Address:")))
		}
	}
	slices.Sort(addrs)
	return addrs
}

type srvRecord struct {
	port   int
	target string
}

func (r srvRecord) String() string { return fmt.Sprintf("%s:%d", r.target, r.port) }

// nslookupSRV returns the SRV records nslookup printed, one per line of the
// form "NAME service = PRIORITY WEIGHT PORT TARGET", targets without the
// final dot.
func nslookupSRV(out string) []srvRecord {
	var recs []srvRecord
	for _, line := range strings.Split(out, "\n") {
		_, rdata, ok := strings.Cut(line, "service =")
		f := strings.Fields(rdata)
		if !ok || len(f) != 4 {
			continue
		}
		port, err := strconv.Atoi(f[2])
		if err != nil {
			continue
		}
		recs = append(recs, srvRecord{port: port, target: strings.TrimSuffix(f[3], ".")})
	}
	return recs
}

func helloPodIP(t *testing.T, c *testenv.Cluster, ns string) string {
	t.Helper()
	var ip string
	eventually(t, 2*time.Minute, func() error {
		list, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + helloService})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 || list.Items[0].Status.PodIP == "" {
			return fmt.Errorf("%s: %d hello pods in %s, want one with an IP", c.Name, len(list.Items), ns)
		}
		ip = list.Items[0].Status.PodIP
		return nil
	})
	return ip
}

// connections is how many connections expectOnlyFrom opens per round.
const connections = 10

// expectOnlyFrom connects, from the request pod of c, to the ClusterSet
// name of hello in ns on port, as the suite does (echo hi | nc -4 -w, or
// nc -6 for family IPv6: to the ClusterSet IP of that family), until a
// round of connections all reach the pod at want; it fails at once if one
// reaches the pod at never. The pods answer with their first IP, whatever
// the family of the connection.
func expectOnlyFrom(t *testing.T, kubectlBin string, c *testenv.Cluster, f corev1.IPFamily, ns string, port int, want, never string) {
	t.Helper()
	name := helloService + "." + ns + ".svc.clusterset.local"
	flag := "-4"
	if f == corev1.IPv6Protocol {
		flag = "-6"
	}
	script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo hi | nc %s -w 2 %s %d; echo; i=$((i+1)); done`, connections, flag, name, port)
	eventually(t, 2*time.Minute, func() error {
		out, err := podShell(kubectlBin, c, script)
		if err != nil {
			return err
		}
		by := map[string]int{}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "pod" && f[1] == "ip" {
				by[f[2]]++
			}
		}
		if by[never] > 0 {
			t.Fatalf("%s: %s connections to %s:%d reached %s, which does not export that port: %v", c.Name, f, name, port, never, by)
		}
		if by[want] != connections {
			return fmt.Errorf("%s: %s to %s:%d: answers by pod IP %v, want all %d from %s", c.Name, f, name, port, by, connections, want)
		}
		t.Logf("%s: %d connections (nc %s) to %s:%d, all answered by %s", c.Name, connections, flag, name, port, want)
		return nil
	})
}

// The parsers of TestMCSNewerConformanceSpecs on what busybox's nslookup
// (the netshoot stand-in's) prints. It needs no root: it reads strings.
func TestNslookupParsers(t *testing.T) {
	a := "Server:\t\t10.250.1.1\nAddress:\t10.250.1.1:53\n\nName:\thello.ns.svc.clusterset.local\nAddress: 10.0.0.12\n" +
		"Name:\thello.ns.svc.clusterset.local\nAddress: 10.0.0.9\n\n"
	if got := nslookupAddresses(a); !slices.Equal(got, []string{"10.0.0.12", "10.0.0.9"}) {
		t.Errorf("A answers %v", got)
	}
	nx := "Server:\t\t10.250.1.1\nAddress:\t10.250.1.1:53\n\n** server can't find nope.ns.svc.cluster.local.: NXDOMAIN\n\n"
	if got := nslookupAddresses(nx); len(got) != 0 {
		t.Errorf("NXDOMAIN answers %v", got)
	}
	srv := "Server:\t\t10.250.1.1\nAddress:\t10.250.1.1:53\n\n" +
		"hello.ns.svc.clusterset.local\tservice = 0 100 42 hello.ns.svc.clusterset.local\n" +
		"hello.ns.svc.clusterset.local\tservice = 0 50 4242 web-0.alpha.hello.ns.svc.clusterset.local.\n\n"
	want := []srvRecord{{port: 42, target: "hello.ns.svc.clusterset.local"}, {port: 4242, target: "web-0.alpha.hello.ns.svc.clusterset.local"}}
	if got := nslookupSRV(srv); !slices.Equal(got, want) {
		t.Errorf("SRV records %v, want %v", got, want)
	}
	if got := nslookupSRV(a); len(got) != 0 {
		t.Errorf("SRV records in an A answer: %v", got)
	}
}
