package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Node is the one node of a cluster started with Options.Node.
type Node struct {
	// Name is the Node object's name: <cluster>-node.
	Name string
	// IP is the node's InternalIP; PodCIDR its pod network; HostIP the
	// host side of its link, where the cluster's API server listens. Each
	// is of the primary family (IPv6 in an IPv6-only cluster).
	IP, HostIP, PodCIDR string
	// Family is the cluster's IP family plan; IPs, HostIPs, PodCIDRs and
	// ServiceCIDRs hold one of each of its families, primary first.
	Family                               Family
	IPs, HostIPs, PodCIDRs, ServiceCIDRs []string
	// Socket is containerd's address (for ctr).
	Socket string

	net    nodeNet
	state  *nodeState
	dir    string
	holder *nodeProc
	// in start order; stopped in reverse.
	procs []*nodeProc
}

type nodeProc struct {
	name string
	*process
}

func (n *Node) start(name, bin string, inNode bool, args ...string) (*nodeProc, error) {
	var cmd *exec.Cmd
	if inNode {
		h := n.holder.pid()
		cmd = exec.Command("nsenter", append([]string{
			fmt.Sprintf("--net=/proc/%d/ns/net", h), fmt.Sprintf("--mount=/proc/%d/ns/mnt", h), "--", bin}, args...)...)
	} else {
		cmd = exec.Command(bin, args...)
	}
	cmd.Dir = n.dir
	// Its own process group: a test's Ctrl-C does not reach it first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	proc, err := startProcess(cmd, filepath.Join(n.dir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &nodeProc{name: name, process: proc}
	n.state.Pids = append(n.state.Pids, proc.pid())
	if err := n.state.write(); err != nil {
		p.stop()
		return nil, err
	}
	n.procs = append(n.procs, p)
	return p, nil
}

// startNode runs the node of c (its network set up by Start): the mount
// namespace holder, containerd, the images, the kubelet, kube-proxy, and on
// the host kube-controller-manager and kube-scheduler. It returns once the
// Node is Ready.
func (c *Cluster) startNode(assets string) error {
	n := c.Node
	n.Name = c.Name + "-node"
	for _, d := range []string{"containerd", "certs.d", "cni/net.d", "cni/ipam", "kubelet", "kubelet-certs"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o700); err != nil {
			return err
		}
	}
	files := map[string]string{
		"containerd.toml":               containerdConfig(n),
		"cni/net.d/10-testenv.conflist": cniConfig(n),
		"kubelet.yaml":                  kubeletConfig(n, c.nodeOpts),
		"kube-proxy.yaml":               kubeProxyConfig(n, c.KubeconfigPath),
		"resolv.conf":                   "", // pods without cluster DNS ask nobody
		"holder":                        "",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(n.dir, name), []byte(content), 0o600); err != nil {
			return err
		}
	}

	// The holder keeps the node's private mount namespace (with its own
	// /run, /var/lib and /var/log) while the node runs; its command line
	// names the node's directory so a later run can find it.
	holder, err := n.startHolder()
	if err != nil {
		return err
	}
	n.holder = holder

	if _, err := n.start("kube-controller-manager", filepath.Join(assets, "kube-controller-manager"), false,
		"--kubeconfig="+c.KubeconfigPath,
		"--root-ca-file="+filepath.Join(c.Dir, "apiserver", "ca.crt"),
		"--service-account-private-key-file="+filepath.Join(c.Dir, "apiserver", "sa-signer.key"),
		"--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=false",
		"--controllers=*,-nodeipam",
		"--node-monitor-grace-period=20s", "--v=1"); err != nil {
		return err
	}
	if _, err := n.start("kube-scheduler", filepath.Join(assets, "kube-scheduler"), false,
		"--kubeconfig="+c.KubeconfigPath, "--authentication-kubeconfig="+c.KubeconfigPath,
		"--authorization-kubeconfig="+c.KubeconfigPath,
		"--leader-elect=false", "--secure-port=0", "--v=1"); err != nil {
		return err
	}
	if _, err := n.start("containerd", "containerd", true, "--config", filepath.Join(n.dir, "containerd.toml")); err != nil {
		return err
	}
	if err := n.waitContainerd(60 * time.Second); err != nil {
		return err
	}
	if err := n.importImages(c.nodeOpts); err != nil {
		return err
	}
	if _, err := n.start("kubelet", filepath.Join(assets, "kubelet"), true,
		"--config="+filepath.Join(n.dir, "kubelet.yaml"),
		"--kubeconfig="+c.KubeconfigPath,
		"--root-dir="+filepath.Join(n.dir, "kubelet"),
		"--cert-dir="+filepath.Join(n.dir, "kubelet-certs"),
		"--hostname-override="+n.Name,
		"--node-ip="+strings.Join(n.IPs, ","), "--v=1"); err != nil {
		return err
	}
	if _, err := n.start("kube-proxy", filepath.Join(assets, "kube-proxy"), true,
		"--config="+filepath.Join(n.dir, "kube-proxy.yaml"), "--v=1"); err != nil {
		return err
	}
	return c.waitNodeReady(2 * time.Minute)
}

func (n *Node) startHolder() (*nodeProc, error) {
	cg := filepath.Join(n.dir, "cgroup")
	script := strings.Join([]string{
		": " + n.dir, // names the node in the command line
		// A sysfs of the node's network namespace (as `ip netns exec`
		// mounts), keeping the host's cgroup mounts under it.
		"mkdir -p " + cg,
		"mount --rbind /sys/fs/cgroup " + cg,
		"mount -t sysfs testenv /sys",
		"mount --rbind " + cg + " /sys/fs/cgroup",
		"umount -l " + cg,
		"mount -t tmpfs -o mode=0755 testenv /run",
		"mount -t tmpfs -o mode=0755 testenv /var/lib",
		"mount -t tmpfs -o mode=0755 testenv /var/log",
		"mkdir -p /run/netns",
		"exec tail -f " + filepath.Join(n.dir, "holder"),
	}, " && ")
	p, err := n.start("holder", "nsenter", false, "--net=/run/netns/"+n.net.netns, "--",
		"unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	if err != nil {
		return nil, err
	}
	// Wait until the mounts are in place (tail runs).
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if p.exited() {
			return nil, fmt.Errorf("node holder exited: %s", tail(p.logPath, 10))
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.pid()))
		if strings.TrimSpace(string(comm)) == "tail" {
			return p, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, errors.New("node holder did not start")
}

func (n *Node) ctr(args ...string) error {
	h := n.holder.pid()
	return run("nsenter", append([]string{fmt.Sprintf("--mount=/proc/%d/ns/mnt", h), "--",
		"ctr", "--address", n.Socket, "--namespace", "k8s.io"}, args...)...)
}

func (n *Node) waitContainerd(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = n.ctr("version"); err == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("containerd did not answer: %v\n%s", err, tail(filepath.Join(n.dir, "containerd.log"), 20))
}

// importImages imports the pause and echo images, with o.MCSConformance
// the conformance suites' stand-ins, and o.Images into containerd; those
// are never pulled (what a node pulls comes from a Registry it trusts, see
// Node.TrustRegistry).
func (n *Node) importImages(o NodeOptions) error {
	images, err := testImages()
	if err != nil {
		return err
	}
	if o.MCSConformance {
		more, err := conformanceImages()
		if err != nil {
			return err
		}
		images = append(images, more...)
	}
	for _, tar := range append(images, o.Images...) {
		if err := n.ctr("images", "import", "--no-unpack=false", tar); err != nil {
			return fmt.Errorf("importing %s: %w", tar, err)
		}
	}
	return nil
}

func (c *Cluster) waitNodeReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last string
	for ctx.Err() == nil {
		for _, p := range c.Node.procs {
			if p.exited() {
				return fmt.Errorf("%s exited:\n%s", p.name, tail(p.logPath, 30))
			}
		}
		node, err := c.Client.CoreV1().Nodes().Get(ctx, c.Node.Name, metav1.GetOptions{})
		if err == nil {
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					last = fmt.Sprintf("%s %s", cond.Reason, cond.Message)
					if cond.Status == corev1.ConditionTrue && len(node.Spec.Taints) == 0 {
						return nil
					}
				}
			}
			if len(node.Spec.Taints) > 0 {
				last += fmt.Sprintf(" taints %v", node.Spec.Taints)
			}
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("node %s not Ready after %s: %s\nkubelet log:\n%s", c.Node.Name, timeout, last, tail(filepath.Join(c.Node.dir, "kubelet.log"), 30))
}

// stop stops the node's processes, then everything below containerd (the
// shims and the containers); teardown then removes its network, after the
// API server (which listens on it) has stopped.
func (n *Node) stop() {
	for i := len(n.procs) - 1; i >= 0; i-- {
		p := n.procs[i]
		if p == n.holder {
			continue
		}
		if p.name == "containerd" {
			// containerd and, below its shims, the containers: their
			// command lines name the node's directory.
			killNodeTree(n.dir)
		}
		p.stop()
	}
	if n.holder != nil {
		n.holder.stop()
	}
}

func (n *Node) teardown() {
	if n.state != nil {
		teardownNodeState(n.state)
	}
}

var (
	imagesOnce sync.Once
	imagesTars []string
	imagesErr  error

	conformanceOnce sync.Once
	conformanceTars []string
	conformanceErr  error
)

// The images the MCS conformance suites' pods name, built here, each from
// Debian's busybox-static (sh and the tools their scripts use) and Go
// stand-ins:
//   - busybox (the served suite's client): busybox alone;
//   - nicolaka/netshoot (the newest suite's client): busybox, with
//     nodeimages/nc as its nc (busybox's knows no -4 or -6) and Debian's
//     dash as its sh;
//   - alpine/socat (both suites' servers): nodeimages/socat as the
//     entrypoint and as /bin/socat, for the newer suite's `sh -c` script.
//
// Each stand-in's doc comment says which command forms it supports.
const (
	BusyboxImage  = "docker.io/library/busybox:latest"
	NetshootImage = "docker.io/nicolaka/netshoot:v0.15"
	SocatImage    = "docker.io/alpine/socat:1.7.4.4"
	busyboxPath   = "/bin/busybox"
)

// busyboxTools are the busybox applets linked into the conformance images:
// what the suites' commands and scripts call, and a few for debugging.
var busyboxTools = []string{"sh", "nslookup", "sleep", "echo", "cat", "grep", "tr", "awk", "sed", "head", "tail",
	"cut", "wc", "env", "true", "false", "ls", "ps", "hostname"}

func conformanceImages() ([]string, error) {
	conformanceOnce.Do(func() {
		conformanceTars, conformanceErr = buildConformanceImages()
	})
	return conformanceTars, conformanceErr
}

func buildConformanceImages() ([]string, error) {
	if err := checkExecutable(busyboxPath); err != nil {
		return nil, fmt.Errorf("%w (install Debian's busybox-static: make node-deps)", err)
	}
	dir, err := imagesDir()
	if err != nil {
		return nil, err
	}
	socat, err := goBuild(dir, "socat")
	if err != nil {
		return nil, err
	}
	nc, err := goBuild(dir, "nc")
	if err != nil {
		return nil, err
	}
	withBusybox := []string{"-add", busyboxPath + ":/bin/busybox"}
	for _, tool := range busyboxTools {
		if tool != "sh" {
			withBusybox = append(withBusybox, "-symlink", "/bin/"+tool+":busybox")
		}
	}
	busyboxSh := []string{"-symlink", "/bin/sh:busybox"}
	// busybox-static's sh runs its own applet for a command that has one,
	// whatever PATH says, so the netshoot image's `sh -c "... | nc ..."`
	// would never reach the nc stand-in: its sh is Debian's dash.
	dash, err := withLibraries(dashPath)
	if err != nil {
		return nil, err
	}
	dash = append(dash, "-symlink", "/bin/sh:dash")
	var tars []string
	for _, img := range []struct {
		tag  string
		args []string
	}{
		// The served suite's client keeps busybox's nc.
		{BusyboxImage, slices.Concat([]string{"-binary", busyboxPath, "-no-entrypoint", "-cmd", "sh"},
			withBusybox, busyboxSh, []string{"-symlink", "/bin/nc:busybox"})},
		{NetshootImage, slices.Concat([]string{"-binary", nc, "-no-entrypoint", "-cmd", "sh"},
			withBusybox, dash, []string{"-symlink", "/bin/nc:/nc"})},
		{SocatImage, slices.Concat([]string{"-binary", socat}, withBusybox, busyboxSh, []string{"-symlink", "/bin/socat:/socat"})},
	} {
		tar := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(img.tag)+".tar")
		args := append([]string{"-tag", img.tag, "-o", tar, "-user", "0:0", "-env", "PATH=/bin"}, img.args...)
		if err := testImage(args...); err != nil {
			return nil, err
		}
		tars = append(tars, tar)
	}
	return tars, nil
}

// dashPath is Debian's dash (an Essential package, so always installed).
const dashPath = "/bin/dash"

// withLibraries returns the hack/image -add arguments that put the dynamic
// executable bin and the shared libraries ldd says it loads at their paths.
func withLibraries(bin string) ([]string, error) {
	if err := checkExecutable(bin); err != nil {
		return nil, err
	}
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	args := []string{"-add", bin + ":" + bin}
	for _, line := range strings.Split(string(out), "\n") {
		// "libc.so.6 => /lib/.../libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
		f := strings.Fields(line)
		if len(f) >= 3 && f[1] == "=>" {
			f = f[2:]
		}
		if len(f) > 0 && strings.HasPrefix(f[0], "/") {
			args = append(args, "-add", f[0]+":"+f[0])
		}
	}
	return args, nil
}

// goBuild builds ./internal/testenv/nodeimages/<pkg> as a static binary in dir.
func goBuild(dir, pkg string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, pkg)
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./internal/testenv/nodeimages/"+pkg)
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %v: %s", pkg, err, out)
	}
	return bin, nil
}

// testImage runs `hack/image test-image args`.
func testImage(args ...string) error {
	bin, err := hackImage()
	if err != nil {
		return err
	}
	mk := exec.Command(bin, append([]string{"test-image"}, args...)...)
	if out, err := mk.CombinedOutput(); err != nil {
		return fmt.Errorf("hack/image test-image %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// EchoImage is the test server's image (nodeimages/echo), imported into
// every node.
const EchoImage = "localhost/endpoint-aggregator-testenv/echo:1"

// testImages builds the pause and echo images once per test process, with
// hack/image, into a temporary directory.
func testImages() ([]string, error) {
	imagesOnce.Do(func() {
		dir, err := imagesDir()
		if err != nil {
			imagesErr = err
			return
		}
		for _, img := range []struct{ pkg, tag, user string }{
			{"pause", PauseImage, "65535:65535"},
			{"echo", EchoImage, "65532:65532"},
		} {
			bin, err := goBuild(dir, img.pkg)
			if err != nil {
				imagesErr = err
				return
			}
			tar := filepath.Join(dir, img.pkg+".tar")
			if err := testImage("-binary", bin, "-tag", img.tag, "-o", tar, "-user", img.user); err != nil {
				imagesErr = err
				return
			}
			imagesTars = append(imagesTars, tar)
		}
	})
	return imagesTars, imagesErr
}

var (
	imagesDirMu   sync.Mutex
	imagesDirPath string
)

// imagesDir is where this process builds its test images.
func imagesDir() (string, error) {
	imagesDirMu.Lock()
	defer imagesDirMu.Unlock()
	if imagesDirPath == "" {
		d, err := os.MkdirTemp("", "endpoint-aggregator-images-")
		if err != nil {
			return "", err
		}
		imagesDirPath = d
	}
	return imagesDirPath, nil
}

// RemoveTestImages removes the images this process built (call it once its
// nodes are gone, e.g. at the end of TestMain).
func RemoveTestImages() {
	imagesDirMu.Lock()
	defer imagesDirMu.Unlock()
	if imagesDirPath != "" {
		_ = os.RemoveAll(imagesDirPath)
		imagesDirPath = ""
	}
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("testenv: not inside the endpoint-aggregator module")
	}
	return filepath.Dir(mod), nil
}

func containerdConfig(n *Node) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[6]q
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %[7]q
`, filepath.Join(n.dir, "containerd", "root"), filepath.Join(n.dir, "containerd", "state"), n.Socket,
		filepath.Join(n.dir, "containerd", "opt"), PauseImage, filepath.Join(n.dir, "cni", "net.d"),
		filepath.Join(n.dir, "certs.d"))
}

// cniConfig is the bridge's configuration: host-local hands out one address
// of each of the node's families (a range set per family) and routes each
// family's default to the bridge.
func cniConfig(n *Node) string {
	var ranges, routes []string
	for _, f := range n.net.nets {
		ranges = append(ranges, fmt.Sprintf(`[{"subnet": %q, "gateway": %q}]`, f.podCIDR, f.podGateway))
		dst := "0.0.0.0/0"
		if f.ipv6() {
			dst = "::/0"
		}
		routes = append(routes, fmt.Sprintf(`{"dst": %q}`, dst))
	}
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "testenv",
  "plugins": [{
    "type": "bridge",
    "bridge": "cni0",
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "ranges": [%s],
      "routes": [%s],
      "dataDir": %q
    }
  }]
}
`, strings.Join(ranges, ", "), strings.Join(routes, ", "), filepath.Join(n.dir, "cni", "ipam"))
}

func kubeletConfig(n *Node, o NodeOptions) string {
	dns := ""
	if o.ClusterDNSAtHost {
		dns = fmt.Sprintf("clusterDNS: [%q]\n", n.HostIP)
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %q
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupsPerQOS: false
cgroupRoot: /endpoint-aggregator-testenv-%d
enforceNodeAllocatable: []
failSwapOn: false
failCgroupV1: false
oomScoreAdj: 0
protectKernelDefaults: false
resolvConf: %q
clusterDomain: cluster.local
%spodCIDR: %q
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {"memory.available": "100Mi", "nodefs.available": "1%%", "imagefs.available": "1%%", "nodefs.inodesFree": "1%%"}
nodeStatusUpdateFrequency: 2s
syncFrequency: 10s
fileCheckFrequency: 10s
staticPodPath: ""
`, n.IP, n.Socket, n.net.index, filepath.Join(n.dir, "resolv.conf"), dns, n.PodCIDR)
}

func kubeProxyConfig(n *Node, kubeconfig string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection:
  kubeconfig: %q
hostnameOverride: %q
bindAddress: %q
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: %q
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, kubeconfig, n.Name, n.IP, strings.Join(n.PodCIDRs, ","))
}
