package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Family is the IP family plan of a cluster with a node
// (NodeOptions.Family): which families its node's link, its pod network,
// its Service range, the kubelet and kube-proxy use.
type Family string

const (
	// FamilyIPv4 is IPv4 only, the default (the zero value means it).
	FamilyIPv4 Family = "IPv4"
	// FamilyIPv6 is IPv6 only: the API server listens, advertises and
	// allocates Service IPs in IPv6, pods have IPv6 addresses alone.
	FamilyIPv6 Family = "IPv6"
	// FamilyDualStack is IPv4 and IPv6, IPv4 primary: the API server
	// listens and advertises in IPv4, Services may have an IP of each
	// family, pods have an address of each.
	FamilyDualStack Family = "DualStack"
)

// Families lists every family, IPv4 first.
var Families = []Family{FamilyIPv4, FamilyIPv6, FamilyDualStack}

func (f Family) orDefault() Family {
	if f == "" {
		return FamilyIPv4
	}
	return f
}

func (f Family) String() string { return string(f.orDefault()) }

// HasIPv4 reports whether f includes IPv4.
func (f Family) HasIPv4() bool { return f.orDefault() != FamilyIPv6 }

// HasIPv6 reports whether f includes IPv6.
func (f Family) HasIPv6() bool { return f.orDefault() != FamilyIPv4 }

// IPFamilies are f's Kubernetes IP families, primary first.
func (f Family) IPFamilies() []corev1.IPFamily {
	var out []corev1.IPFamily
	if f.HasIPv4() {
		out = append(out, corev1.IPv4Protocol)
	}
	if f.HasIPv6() {
		out = append(out, corev1.IPv6Protocol)
	}
	return out
}

func (f Family) valid() error {
	switch f.orDefault() {
	case FamilyIPv4, FamilyIPv6, FamilyDualStack:
		return nil
	}
	return fmt.Errorf("testenv: unknown IP family %q (want %s, %s or %s)", f, FamilyIPv4, FamilyIPv6, FamilyDualStack)
}

// The Service ranges of every cluster with a node, by family. The IPv4 one
// is envtest's default; the IPv6 one is a unique local range, as small as
// the API server accepts for a secondary range.
const (
	serviceCIDR4 = "10.0.0.0/24"
	serviceCIDR6 = "fd00:10:96::/112"
)

// familyNet is one IP family's share of a node's address plan.
type familyNet struct {
	family         corev1.IPFamily
	hostIP, nodeIP net.IP
	linkBits       int // the prefix length of the host-node link
	podCIDR        string
	podGateway     net.IP
	serviceCIDR    string
	// kubernetesIP is the first address of serviceCIDR: the kubernetes
	// Service's.
	kubernetesIP net.IP
}

func (f familyNet) ipv6() bool { return f.family == corev1.IPv6Protocol }

// planFamily returns node i's addresses in one family: IPv4 10.250.i.1 and
// .2 on the link, pods 10.244.i.0/24; IPv6 the unique local fd00:250:i::1
// and ::2 on the link, pods fd00:244:i::/64 (i written in decimal, read as
// hex: distinct for every i up to maxNodes).
func planFamily(i int, family corev1.IPFamily) familyNet {
	if family == corev1.IPv6Protocol {
		ip := func(format string) net.IP { return net.ParseIP(fmt.Sprintf(format, i)) }
		return familyNet{
			family: family, hostIP: ip("fd00:250:%d::1"), nodeIP: ip("fd00:250:%d::2"), linkBits: 64,
			podCIDR: fmt.Sprintf("fd00:244:%d::/64", i), podGateway: ip("fd00:244:%d::1"),
			serviceCIDR: serviceCIDR6, kubernetesIP: net.ParseIP("fd00:10:96::1"),
		}
	}
	return familyNet{
		family: family, hostIP: net.IPv4(10, 250, byte(i), 1), nodeIP: net.IPv4(10, 250, byte(i), 2), linkBits: 24,
		podCIDR: fmt.Sprintf("10.244.%d.0/24", i), podGateway: net.IPv4(10, 244, byte(i), 1),
		serviceCIDR: serviceCIDR4, kubernetesIP: net.IPv4(10, 0, 0, 1),
	}
}

// ipv6Missing says why this machine cannot give a node IPv6, or "".
func ipv6Missing() string {
	if _, err := os.Stat("/proc/net/if_inet6"); err != nil {
		return "the kernel has no IPv6 (no /proc/net/if_inet6)"
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv6/conf/all/disable_ipv6"); err == nil && strings.TrimSpace(string(b)) == "1" {
		return "IPv6 is disabled on this host (net.ipv6.conf.all.disable_ipv6 = 1)"
	}
	return ""
}

// RequireFamily skips t when this machine cannot run a node of family f:
// only IPv6 can be missing, when the kernel lacks it or has it disabled.
func RequireFamily(t interface {
	Helper()
	Skip(...any)
}, f Family) {
	t.Helper()
	if !f.HasIPv6() {
		return
	}
	if why := ipv6Missing(); why != "" {
		t.Skip("testenv: a node of family " + f.String() + " needs IPv6: " + why)
	}
}

func checkFamily(f Family) error {
	if err := f.valid(); err != nil {
		return err
	}
	if f.HasIPv6() {
		if why := ipv6Missing(); why != "" {
			return errors.New("testenv: a node of family " + f.String() + " needs IPv6: " + why)
		}
	}
	return nil
}

// ipArgs are the arguments of ip(8) for f's addresses and routes, in netns
// unless it is "".
func ipArgs(netns string, f familyNet, args ...string) []string {
	var out []string
	if netns != "" {
		out = append(out, "-n", netns)
	}
	if f.ipv6() {
		out = append(out, "-6")
	} else {
		out = append(out, "-4")
	}
	return append(out, args...)
}

// addrArgs are the arguments of `ip addr add` for ip on dev: an IPv6
// address skips duplicate address detection, so it is usable at once.
func addrArgs(f familyNet, ip net.IP, dev string) []string {
	args := []string{"addr", "add", fmt.Sprintf("%s/%d", ip, f.linkBits), "dev", dev}
	if f.ipv6() {
		args = append(args, "nodad")
	}
	return args
}

// forwardingSysctl is the per-namespace sysctl that makes the kernel
// forward f's packets.
func forwardingSysctl(f familyNet) string {
	if f.ipv6() {
		return "net/ipv6/conf/all/forwarding"
	}
	return "net/ipv4/ip_forward"
}
