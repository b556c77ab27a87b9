package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// nodeBinaries are what a node runs besides the Kubernetes binaries: the
// Debian packages containerd, runc, containernetworking-plugins, nftables
// (kube-proxy runs nft) and util-linux (nsenter, unshare).
var nodeBinaries = []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "nft", "nsenter", "unshare", "ip", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback"}

// checkNodeDeps reports what a node needs and this machine lacks.
func checkNodeDeps() error {
	var missing []string
	for _, b := range nodeBinaries {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	assets, err := AssetsDir()
	if err != nil {
		return err
	}
	for _, b := range []string{"kubelet", "kube-proxy", "kube-scheduler", "kube-controller-manager"} {
		if checkExecutable(filepath.Join(assets, b)) != nil {
			missing = append(missing, filepath.Join(assets, b))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("testenv: a node needs %s (run `make node-deps` as root, and `make tools`)", strings.Join(missing, ", "))
	}
	return nil
}

// HostSnapshot is what a node may change on the host and must restore:
// the sysctls, the network namespaces, links and routes (both families).
type HostSnapshot struct {
	Sysctls map[string]string
	Netns   string
	Links   string
	Routes  string
}

// SnapshotHost records the host's state that nodes touch. Take it after
// CleanStaleNodes, so a crashed run's leftovers are not counted as the
// host's own.
func SnapshotHost() HostSnapshot {
	s := HostSnapshot{Sysctls: map[string]string{}}
	for _, k := range hostSysctls {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil {
			s.Sysctls[k] = strings.TrimSpace(string(b))
		}
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	s.Netns = strings.TrimSpace(string(out))
	out, _ = exec.Command("ip", "-br", "link").Output()
	var links []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			links = append(links, f[0])
		}
	}
	s.Links = strings.Join(links, " ")
	var routes []string
	for _, family := range []string{"-4", "-6"} {
		out, _ = exec.Command("ip", family, "route", "show").Output()
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			// A learned route's lifetime counts down; it is not a change.
			if i := strings.Index(l, " expires "); i >= 0 {
				l = l[:i]
			}
			routes = append(routes, l)
		}
	}
	s.Routes = strings.Join(routes, "\n")
	return s
}

// Leftovers compares the host with before and lists what the nodes of
// clusters whose directories are dirs left behind: processes, mounts,
// directories, container cgroups, state files, and changed sysctls,
// namespaces, links or routes. Empty means the host is as it was.
func Leftovers(before HostSnapshot, dirs ...string) []string {
	var out []string
	now := SnapshotHost()
	if fmt.Sprint(now.Sysctls) != fmt.Sprint(before.Sysctls) {
		out = append(out, fmt.Sprintf("sysctls %v, were %v", now.Sysctls, before.Sysctls))
	}
	if now.Netns != before.Netns {
		out = append(out, fmt.Sprintf("network namespaces %q, were %q", now.Netns, before.Netns))
	}
	if now.Links != before.Links {
		out = append(out, fmt.Sprintf("links %q, were %q", now.Links, before.Links))
	}
	if now.Routes != before.Routes {
		out = append(out, fmt.Sprintf("routes:\n%s\nwere:\n%s", now.Routes, before.Routes))
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, d := range dirs {
		if strings.Contains(string(mounts), d) {
			out = append(out, "mounts under "+d)
		}
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			out = append(out, "directory "+d)
		}
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, err := os.ReadFile(p)
			if err == nil && strings.Contains(string(b), d) && filepath.Base(filepath.Dir(p)) != fmt.Sprint(os.Getpid()) {
				out = append(out, "process "+filepath.Base(filepath.Dir(p))+": "+strings.ReplaceAll(string(b), "\x00", " "))
			}
		}
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/*/" + containerCgroupParent + "/*/cgroup.procs"); len(left) > 0 {
		out = append(out, fmt.Sprintf("container cgroups %v", left))
	}
	if files, _ := filepath.Glob(filepath.Join(nodeStateDir, "*")); len(files) > 0 {
		out = append(out, fmt.Sprintf("state files %v", files))
	}
	return out
}

// Netns returns the node's network namespace.
func (n *Node) Netns() string { return n.net.netns }

// LogTails returns the last lines of the node's process logs.
func (n *Node) LogTails() string {
	var b strings.Builder
	for _, p := range n.procs {
		fmt.Fprintf(&b, "--- %s ---\n%s\n", p.name, tail(p.logPath, 15))
	}
	return b.String()
}
