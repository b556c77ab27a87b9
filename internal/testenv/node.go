package testenv

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A cluster with a node (Options.Node) gets, on this machine:
//
//   - a network namespace ea-node-N holding the node: a veth pair to the
//     host (host side ea-vethN 10.250.N.1, node side eth0 10.250.N.2) and
//     the CNI bridge cni0 with the pod network 10.244.N.0/24. The host routes
//     every pod network to its node, so the pods of all clusters reach each
//     other (a flat network, as MCS assumes); the host forwards between
//     them, which needs net.ipv4.ip_forward.
//   - with NodeOptions.Family IPv6 or DualStack, the same in IPv6 (instead
//     of IPv4, or beside it): fd00:250:N::1 and ::2 on the link (added
//     without duplicate address detection, so usable at once), pods in
//     fd00:244:N::/64, routes to every IPv6 pod network, and
//     net.ipv6.conf.all.forwarding.
//   - a private mount namespace inside it with tmpfs on /run, /var/lib and
//     /var/log, so what the kubelet, containerd and the CNI plugins write
//     there (sockets, pod logs, device-plugin sockets, pod netns files, IPAM
//     state) and every mount they make stays in that namespace and goes
//     with it.
//   - containerd (its root in the cluster's directory), the kubelet and
//     kube-proxy (nftables) in those namespaces; kube-scheduler and
//     kube-controller-manager on the host.
//
// The API server binds and advertises the host side of the link in the
// primary family (10.250.N.1, or fd00:250:N::1 in IPv6 only), so pods reach
// it through the kubernetes Service and the host's tests reach it directly.
// Its Service range is 10.0.0.0/24, fd00:10:96::/112, or both.
//
// The kubelet sets a few kernel-wide sysctls; they and both forwarding
// switches are recorded before the first node starts and restored when the
// last one stops. Each node records what it created (its routes of both
// families among them) under nodeStateDir, so a later run removes what a
// crashed one left (CleanStaleNodes).

const (
	nodeNetnsPrefix = "ea-node-"
	nodeVethPrefix  = "ea-veth"
	nodeStateDir    = "/run/endpoint-aggregator-testenv"
	hostStateFile   = nodeStateDir + "/host-sysctls.json"
	// cgroupParentKey marks, in the host state, that the containers'
	// cgroup parent existed before the first node.
	cgroupParentKey = "cgroup-parent"
	// The image containerd runs as every pod's sandbox; StartNode imports it.
	PauseImage = "localhost/endpoint-aggregator-testenv/pause:1"
	// maxNodes bounds the node index (and so the address plan).
	maxNodes = 50
)

// hostSysctls are the kernel-wide settings the kubelet (or the flat pod
// network) changes. They are restored in this order: writing IPv6's
// all/forwarding also sets default/forwarding, which comes after it.
var hostSysctls = []string{
	"net/ipv4/ip_forward",
	"net/ipv6/conf/all/forwarding",
	"net/ipv6/conf/default/forwarding",
	"kernel/panic",
	"kernel/panic_on_oops",
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

// nodeState is what a node created, written to its state file.
type nodeState struct {
	Owner int    `json:"owner"` // the test process
	Netns string `json:"netns"`
	Veth  string `json:"veth"`
	Dir   string `json:"dir"`
	Pids  []int  `json:"pids"`
	// Route is the one route of an IPv4 node written by an earlier
	// version; Routes are every host route of the node, of both families.
	Route  string   `json:"route,omitempty"`
	Routes []string `json:"routes,omitempty"`
}

// nodeNet is the address plan of node N.
type nodeNet struct {
	index       int
	netns, veth string
	family      Family
	// nets holds each family's addresses, primary first.
	nets []familyNet
}

func planNode(i int, family Family) nodeNet {
	n := nodeNet{index: i, netns: nodeNetnsPrefix + strconv.Itoa(i), veth: nodeVethPrefix + strconv.Itoa(i), family: family.orDefault()}
	for _, f := range family.IPFamilies() {
		n.nets = append(n.nets, planFamily(i, f))
	}
	return n
}

// primary is the node's primary family: where the API server listens.
func (n nodeNet) primary() familyNet { return n.nets[0] }

// each returns what f gives for every family, primary first.
func (n nodeNet) each(f func(familyNet) string) []string {
	var out []string
	for _, fn := range n.nets {
		out = append(out, f(fn))
	}
	return out
}

var hostMu sync.Mutex

// RequireRoot skips t unless the test runs as root, which a node needs (it
// creates namespaces, links and routes, and runs containers).
func RequireRoot(t interface {
	Helper()
	Skip(...any)
}) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("testenv: real nodes need root (network namespaces, links, containers); run `make test-node` as root")
	}
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// setupNodeNetwork takes the first free node index and creates its network
// namespace, veth pair, addresses and routes in each of family's IP
// families, and saves the host's sysctls before the first node changes
// them. The returned state is written to disk already.
func setupNodeNetwork(dir string, family Family) (nodeNet, *nodeState, error) {
	hostMu.Lock()
	defer hostMu.Unlock()
	if err := os.MkdirAll(nodeStateDir, 0o700); err != nil {
		return nodeNet{}, nil, err
	}
	if err := saveHostSysctls(); err != nil {
		return nodeNet{}, nil, err
	}
	var n nodeNet
	for i := 1; ; i++ {
		if i > maxNodes {
			return nodeNet{}, nil, errors.New("testenv: no free node index")
		}
		n = planNode(i, family)
		// Creating the namespace is the allocation: it fails when taken.
		if run("ip", "netns", "add", n.netns) == nil {
			break
		}
	}
	st := &nodeState{Owner: os.Getpid(), Netns: n.netns, Dir: dir}
	if err := st.write(); err != nil {
		_ = run("ip", "netns", "del", n.netns)
		return nodeNet{}, nil, err
	}
	fail := func(err error) (nodeNet, *nodeState, error) {
		teardownNodeState(st)
		return nodeNet{}, nil, err
	}
	st.Veth = n.veth
	if err := st.write(); err != nil {
		return fail(err)
	}
	steps := []func() error{
		func() error {
			return run("ip", "link", "add", n.veth, "type", "veth", "peer", "name", "eth0", "netns", n.netns)
		},
		func() error { return run("ip", "link", "set", n.veth, "up") },
		func() error { return run("ip", "-n", n.netns, "link", "set", "eth0", "up") },
		func() error { return run("ip", "-n", n.netns, "link", "set", "lo", "up") },
	}
	for _, f := range n.nets {
		steps = append(steps,
			func() error { return run("ip", ipArgs("", f, addrArgs(f, f.hostIP, n.veth)...)...) },
			func() error { return run("ip", ipArgs(n.netns, f, addrArgs(f, f.nodeIP, "eth0")...)...) },
			func() error {
				return run("ip", ipArgs(n.netns, f, "route", "add", "default", "via", f.hostIP.String())...)
			},
			func() error {
				return run("ip", "netns", "exec", n.netns, "sh", "-c", "echo 1 > /proc/sys/"+forwardingSysctl(f))
			},
			func() error {
				// Recorded first: a crash right after must not leave it.
				st.Routes = append(st.Routes, f.podCIDR)
				if err := st.write(); err != nil {
					return err
				}
				return run("ip", ipArgs("", f, "route", "add", f.podCIDR, "via", f.nodeIP.String())...)
			},
			func() error { return os.WriteFile("/proc/sys/"+forwardingSysctl(f), []byte("1"), 0o644) },
		)
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fail(fmt.Errorf("testenv: node network %s: %w", n.netns, err))
		}
	}
	return n, st, nil
}

func (st *nodeState) file() string { return filepath.Join(nodeStateDir, "node-"+st.Netns+".json") }

func (st *nodeState) write() error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := st.file() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, st.file())
}

// teardownNodeState removes what st records: processes, route, links,
// namespace, directory, then the state file; when no node is left it
// restores the host's sysctls. Every step is idempotent.
func teardownNodeState(st *nodeState) {
	for _, pid := range st.Pids {
		killIfOurs(pid, st.Dir)
	}
	removeEmptyContainerCgroups(false)
	for _, r := range append([]string{st.Route}, st.Routes...) {
		if r != "" {
			_ = run("ip", "route", "del", r)
		}
	}
	if st.Veth != "" {
		_ = run("ip", "link", "del", st.Veth) // removes its peer too
	}
	if st.Netns != "" {
		_ = run("ip", "netns", "del", st.Netns)
	}
	_ = os.Remove(st.file())
	restoreHostSysctlsIfLast()
}

// containerCgroupParent is where runc puts the containers containerd's CRI
// starts (the kubelet runs without per-QoS cgroups).
const containerCgroupParent = "k8s.io"

// removeEmptyContainerCgroups removes the containers' cgroups that no
// process uses any more (runc leaves them when its shim is killed), and the
// parent when it is empty and was not there before the first node. A
// cgroup that still has a process (another node's container) refuses
// rmdir, so only dead ones go.
func removeEmptyContainerCgroups(removeParent bool) {
	parents, _ := filepath.Glob("/sys/fs/cgroup/*/" + containerCgroupParent)
	for _, parent := range parents {
		children, _ := os.ReadDir(parent)
		for _, c := range children {
			if c.IsDir() {
				_ = syscall.Rmdir(filepath.Join(parent, c.Name()))
			}
		}
		if removeParent {
			_ = syscall.Rmdir(parent)
		}
	}
}

// killIfOurs SIGKILLs pid if it still runs a command of ours: one whose
// command line names dir (every process a node starts does).
func killIfOurs(pid int, dir string) {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.Contains(cmdline, []byte(dir)) {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CleanStaleNodes removes what nodes of test processes that no longer run
// left behind (a crashed or killed run): their processes, links, routes,
// namespaces and directories, and restores the host's sysctls when no node
// is left.
func CleanStaleNodes() {
	hostMu.Lock()
	defer hostMu.Unlock()
	files, _ := filepath.Glob(filepath.Join(nodeStateDir, "node-*.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var st nodeState
		if json.Unmarshal(b, &st) != nil {
			_ = os.Remove(f)
			continue
		}
		if st.Owner != os.Getpid() && processAlive(st.Owner) {
			continue
		}
		killNodeTree(st.Dir)
		teardownNodeState(&st)
		if st.Dir != "" {
			_ = os.RemoveAll(st.Dir)
		}
	}
	restoreHostSysctlsIfLast()
}

func processAlive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// killNodeTree SIGKILLs every process whose command line names dir:
// containerd's shims and, below them, the containers, which a node's state
// does not list.
func killNodeTree(dir string) {
	if dir == "" {
		return
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var shims []int
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(dir)) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if pid == os.Getpid() {
			continue
		}
		shims = append(shims, pid)
	}
	for _, pid := range shims {
		for _, child := range descendants(pid) {
			_ = syscall.Kill(child, syscall.SIGKILL)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// descendants returns the processes below pid.
func descendants(pid int) []int {
	children := map[int][]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		p, _ := strconv.Atoi(filepath.Base(filepath.Dir(s)))
		children[ppid] = append(children[ppid], p)
	}
	var out []int
	var walk func(int)
	walk = func(p int) {
		for _, c := range children[p] {
			out = append(out, c)
			walk(c)
		}
	}
	walk(pid)
	return out
}

// saveHostSysctls records the host's values once: a file left by a crashed
// run holds the values from before any node, so it is kept.
func saveHostSysctls() error {
	if _, err := os.Stat(hostStateFile); err == nil {
		return nil
	}
	saved := map[string]string{}
	if m, _ := filepath.Glob("/sys/fs/cgroup/*/" + containerCgroupParent); len(m) > 0 {
		saved[cgroupParentKey] = "existed"
	}
	for _, k := range hostSysctls {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			continue // not on this kernel
		}
		saved[k] = strings.TrimSpace(string(b))
	}
	b, err := json.Marshal(saved)
	if err != nil {
		return err
	}
	return os.WriteFile(hostStateFile, b, 0o600)
}

// restoreHostSysctlsIfLast writes the saved values back when no node state
// file is left, in hostSysctls order, each only if it changed: writing a
// forwarding switch resets every interface's own.
func restoreHostSysctlsIfLast() {
	if files, _ := filepath.Glob(filepath.Join(nodeStateDir, "node-*.json")); len(files) > 0 {
		return
	}
	b, err := os.ReadFile(hostStateFile)
	if err != nil {
		return
	}
	var saved map[string]string
	if json.Unmarshal(b, &saved) == nil {
		for _, k := range hostSysctls {
			v, ok := saved[k]
			if !ok {
				continue
			}
			if now, err := os.ReadFile("/proc/sys/" + k); err == nil && strings.TrimSpace(string(now)) == v {
				continue
			}
			_ = os.WriteFile("/proc/sys/"+k, []byte(v), 0o644)
		}
		removeEmptyContainerCgroups(saved[cgroupParentKey] == "")
	}
	_ = os.Remove(hostStateFile)
	_ = os.Remove(nodeStateDir)
}
