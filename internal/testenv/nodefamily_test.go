package testenv

import (
	"encoding/json"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// Every node index gets addresses of its own in each family: IPv4 as
// before, IPv6 from unique local ranges only, the link's two ends in one
// prefix, the pod gateway in the pod network, the kubernetes Service IP in
// the Service range.
func TestNodeAddressPlanPerFamily(t *testing.T) {
	ula := netip.MustParsePrefix("fc00::/7")
	seen := map[string]int{}
	for i := 1; i <= maxNodes; i++ {
		for _, family := range Families {
			n := planNode(i, family)
			var got []corev1.IPFamily
			for _, f := range n.nets {
				got = append(got, f.family)
			}
			if !slices.Equal(got, family.IPFamilies()) {
				t.Fatalf("node %d %s: families %v, want %v", i, family, got, family.IPFamilies())
			}
			for _, f := range n.nets {
				host, node := netip.MustParseAddr(f.hostIP.String()), netip.MustParseAddr(f.nodeIP.String())
				link := netip.PrefixFrom(host, f.linkBits).Masked()
				pods := netip.MustParsePrefix(f.podCIDR)
				gw := netip.MustParseAddr(f.podGateway.String())
				svc := netip.MustParsePrefix(f.serviceCIDR)
				if !link.Contains(node) || !pods.Contains(gw) || !svc.Contains(netip.MustParseAddr(f.kubernetesIP.String())) || link.Overlaps(pods) {
					t.Errorf("node %d %s: link %s (node %s), pods %s (gateway %s), services %s (kubernetes %s)", i, f.family, link, node, pods, gw, svc, f.kubernetesIP)
				}
				if host.Is4() != (f.family == corev1.IPv4Protocol) || pods.Addr().Is4() != host.Is4() || svc.Addr().Is4() != host.Is4() {
					t.Errorf("node %d %s: addresses of another family: %s, %s, %s", i, f.family, host, pods, svc)
				}
				if f.ipv6() && (!ula.Contains(host) || !ula.Contains(pods.Addr()) || !ula.Contains(svc.Addr())) {
					t.Errorf("node %d: IPv6 addresses outside the unique local range: %s, %s, %s", i, host, pods, svc)
				}
				if family == FamilyDualStack {
					// Same addresses as the single-family plans.
					continue
				}
				for _, p := range []string{link.String(), pods.String()} {
					if j, ok := seen[p]; ok && j != i {
						t.Errorf("%s is the network of node %d and of node %d", p, j, i)
					}
					seen[p] = i
				}
			}
		}
	}
	if got := planNode(3, "").nets; len(got) != 1 || got[0].hostIP.String() != "10.250.3.1" || got[0].podCIDR != "10.244.3.0/24" {
		t.Errorf("the default plan of node 3 is %+v, want IPv4 10.250.3.1 and 10.244.3.0/24 as always", got)
	}
	if err := Family("IPv5").valid(); err == nil {
		t.Error("family IPv5 is accepted")
	}
}

// The bridge's configuration hands out one address per family of the
// node, and kube-proxy's names the pod network of each.
func TestNodeConfigsPerFamily(t *testing.T) {
	for _, family := range Families {
		nn := planNode(7, family)
		n := &Node{net: nn, dir: t.TempDir(), Name: "c-node", IP: nn.primary().nodeIP.String(),
			PodCIDRs: nn.each(func(f familyNet) string { return f.podCIDR })}
		var cni struct {
			Plugins []struct {
				IPAM struct {
					Ranges [][]struct{ Subnet, Gateway string }
					Routes []struct{ Dst string }
				}
			}
		}
		if err := json.Unmarshal([]byte(cniConfig(n)), &cni); err != nil || len(cni.Plugins) != 1 {
			t.Fatalf("%s: CNI config %v:\n%s", family, err, cniConfig(n))
		}
		ipam := cni.Plugins[0].IPAM
		if len(ipam.Ranges) != len(nn.nets) || len(ipam.Routes) != len(nn.nets) {
			t.Fatalf("%s: %d range sets and %d routes for %d families", family, len(ipam.Ranges), len(ipam.Routes), len(nn.nets))
		}
		for i, f := range nn.nets {
			dst := map[bool]string{false: "0.0.0.0/0", true: "::/0"}[f.ipv6()]
			if len(ipam.Ranges[i]) != 1 || ipam.Ranges[i][0].Subnet != f.podCIDR || ipam.Ranges[i][0].Gateway != f.podGateway.String() || ipam.Routes[i].Dst != dst {
				t.Errorf("%s: range set %d %+v, route %+v; want %s via %s, default %s", family, i, ipam.Ranges[i], ipam.Routes[i], f.podCIDR, f.podGateway, dst)
			}
		}
		want := "clusterCIDR: \"" + strings.Join(n.PodCIDRs, ",") + "\""
		if proxy := kubeProxyConfig(n, "kubeconfig"); !strings.Contains(proxy, want) {
			t.Errorf("%s: kube-proxy config lacks %s:\n%s", family, want, proxy)
		}
	}
}

// A node left by a run that died (its state file's owner is gone) is
// removed by CleanStaleNodes with all it changed on the host: its routes of
// both families, its link and namespace, and both forwarding switches.
func TestCleanStaleNodesRemovesADeadRunsDualStackNetwork(t *testing.T) {
	RequireRoot(t)
	RequireFamily(t, FamilyDualStack)
	CleanStaleNodes()
	before := SnapshotHost()
	// The node's directory: CleanStaleNodes removes it with the node.
	dir := t.TempDir()
	n, st, err := setupNodeNetwork(dir, FamilyDualStack)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { teardownNodeState(st) })
	out, _ := exec.Command("ip", "-6", "route", "show", n.nets[1].podCIDR).Output()
	if !strings.Contains(string(out), "via "+n.nets[1].nodeIP.String()) {
		t.Fatalf("no IPv6 route to the node's pods: %q", out)
	}
	if b, _ := os.ReadFile("/proc/sys/net/ipv6/conf/all/forwarding"); strings.TrimSpace(string(b)) != "1" {
		t.Fatalf("IPv6 forwarding is %q with a dual-stack node", b)
	}
	// The run that made it dies: a process that has exited owns it.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	st.Owner = dead.Process.Pid
	if err := st.write(); err != nil {
		t.Fatal(err)
	}
	CleanStaleNodes()
	for _, f := range n.nets {
		if out, _ := exec.Command("ip", ipArgs("", f, "route", "show", f.podCIDR)...).Output(); len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("the route to %s is left: %s", f.podCIDR, out)
		}
	}
	if exec.Command("ip", "link", "show", n.veth).Run() == nil {
		t.Errorf("link %s is left", n.veth)
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); slices.Contains(strings.Fields(string(out)), n.netns) {
		t.Errorf("network namespace %s is left", n.netns)
	}
	if _, err := os.Stat(st.file()); err == nil {
		t.Errorf("state file %s is left", st.file())
	}
	// The sysctls come back when no node is left (another run's may be).
	if others, _ := filepath.Glob(filepath.Join(nodeStateDir, "node-*.json")); len(others) == 0 {
		if now := SnapshotHost().Sysctls; !maps.Equal(now, before.Sysctls) {
			t.Errorf("sysctls %v, were %v", now, before.Sysctls)
		}
	}
}
