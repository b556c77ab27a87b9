package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/shard"
)

const (
	release  = "endpoint-aggregator"
	daemonNS = "endpoint-aggregator"
	appNS    = "shop"

	// The release the test installs, and the one it upgrades to. There is
	// no earlier release to upgrade from, so both are built from this tree,
	// differing only in their version (and so in their images' digests).
	previousVersion = "v0.0.9"
	currentVersion  = "v0.1.0"
)

// TestClusterSetOnRealNodes is the tier users live in: a hub and two
// members, each with a real node; a release of this tree pushed to a
// registry (TLS, its own CA), its chart installed into the hub with `helm
// install oci://`, and its image pulled by the hub node's containerd; real
// Deployments in the members; a client pod in the hub that resolves
// clusterset.local names through CoreDNS and sends HTTP requests through
// the ClusterSet IP that kube-proxy programs from the hub's MCS slices; an
// upgrade to the next release.
func TestClusterSetOnRealNodes(t *testing.T) {
	// In every family: IPv4, IPv6 only and dual-stack. Beyond IPv4 it also
	// checks the ClusterSet IPs, AAAA records and IPv6 traffic of each
	// family (checkClusterSetFamilies). In IPv6 only the hub node's
	// containerd pulls the release from the registry's IPv6 address on the
	// node's link (Node.TrustRegistry).
	for _, family := range []testenv.Family{testenv.FamilyIPv4, testenv.FamilyIPv6, testenv.FamilyDualStack} {
		t.Run(family.String(), func(t *testing.T) { clusterSetOnRealNodes(t, family) })
	}
}

func clusterSetOnRealNodes(t *testing.T, family testenv.Family) {
	testenv.RequireRoot(t)
	testenv.RequireFamily(t, family)
	testenv.RequireAssets(t)
	before := testenv.SnapshotHost()
	var dirs []string
	// Registered before the clusters' own cleanup, so it runs after it.
	t.Cleanup(func() {
		if left := testenv.Leftovers(before, dirs...); len(left) > 0 {
			t.Errorf("left behind:\n%s", strings.Join(left, "\n"))
		}
	})
	cs := testenv.StartAllT(t,
		testenv.Spec{Name: "hub", Options: testenv.Options{CRDs: true, Node: &testenv.NodeOptions{ClusterDNSAtHost: true, Family: family}}},
		testenv.Spec{Name: "east", Options: testenv.Options{CRDs: true, Node: &testenv.NodeOptions{Family: family}}},
		testenv.Spec{Name: "west", Options: testenv.Options{CRDs: true, Node: &testenv.NodeOptions{Family: family}}},
	)
	hub, east, west := cs[0], cs[1], cs[2]
	for _, c := range cs {
		dirs = append(dirs, c.Dir)
	}
	// The registry, on 127.0.0.1 for helm and on the hub node's link for
	// its containerd, and the two releases in it.
	reg := testenv.StartRegistry(t, hub.Node.HostIP)
	dirs = append(dirs, reg.Dir)
	if err := hub.Node.TrustRegistry(reg); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	previous := testenv.BuildRelease(t, reg, previousVersion)
	current := testenv.BuildRelease(t, reg, currentVersion)
	t.Logf("releases built and pushed in %s: %s, %s", time.Since(start).Round(100*time.Millisecond), previous, current)
	if previous.IndexDigest == current.IndexDigest {
		t.Fatalf("%s and %s have the same image: the upgrade would not replace it", previous, current)
	}
	for _, r := range []*testenv.Release{previous, current} {
		checkChartImageInRegistry(t, hub, reg, r)
	}
	testenv.StartCoreDNSAt(t, hub.KubeconfigPath, hub.Node.HostIP)
	ctx := context.Background()
	for _, c := range cs {
		mustCreateNamespace(t, c.Client, appNS)
	}
	mustCreateNamespace(t, hub.Client, daemonNS)
	register(t, hub, daemonNS, east)
	register(t, hub, daemonNS, west)

	// The chart's defaults but for the replicas: the image is the
	// release's, pulled from the registry.
	start = time.Now()
	helm(t, hub.KubeconfigPath, "install", release, previous.ChartRef, "--version", previous.ChartVersion,
		"--ca-file", reg.CAFile, "-n", daemonNS, "--set", "replicas=3", "--set", "clustersetAlias=true", "--wait", "--timeout", "3m")
	t.Logf("helm install %s --version %s --wait: %s", previous.ChartRef, previous.ChartVersion, time.Since(start).Round(100*time.Millisecond))
	pods := daemonPods(t, hub)
	if len(pods) != 3 {
		t.Fatalf("%d daemon pods, want 3", len(pods))
	}
	checkPulled(t, pods, reg, previous)

	// The members' workloads: real Deployments, Services and exports.
	for _, m := range []*testenv.Cluster{east, west} {
		if _, err := m.Client.AppsV1().Deployments(appNS).Create(ctx, echoDeployment(appNS, m.Name, 2), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		mcs := mcsclientset.NewForConfigOrDie(m.Config)
		for _, svc := range []*corev1.Service{echoService(appNS, "echo", false), echoService(appNS, "echo-headless", true)} {
			ofFamily(svc, family)
			if _, err := m.Client.CoreV1().Services(appNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := mcs.MulticlusterV1beta1().ServiceExports(appNS).Create(ctx, &mcsv1beta1.ServiceExport{
				ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: svc.Name},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	client := echoPod("client", "hub")
	client.Namespace = appNS
	if _, err := hub.Client.CoreV1().Pods(appNS).Create(ctx, client, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clientIP := waitPodReady(t, hub, appNS, "client", 2*time.Minute).Status.PodIP

	clusterset := "http://echo." + appNS + ".svc.clusterset.local/"
	t.Run("the ClusterSet IP answers from both members", func(t *testing.T) {
		eventually(t, 3*time.Minute, func() error {
			by, failed, err := answers(clientIP, clusterset, 40)
			if err != nil {
				return err
			}
			if by["east"] == 0 || by["west"] == 0 || failed > 0 {
				return fmt.Errorf("answers by cluster %v, %d failed", by, failed)
			}
			t.Logf("40 requests to %s: %v", clusterset, by)
			return nil
		})
	})
	t.Run("<svc>-<cluster> reaches only that cluster", func(t *testing.T) {
		for _, m := range []string{"east", "west"} {
			target := "http://echo-" + m + "." + appNS + ".svc.cluster.local/"
			eventually(t, time.Minute, func() error {
				by, failed, err := answers(clientIP, target, 20)
				if err != nil {
					return err
				}
				if by[m] != 20 || failed > 0 {
					return fmt.Errorf("%s: answers by cluster %v, %d failed; want all from %s", target, by, failed, m)
				}
				return nil
			})
		}
	})
	t.Run("<svc>-clusterset reaches both members through the cluster DNS as it is", func(t *testing.T) {
		// An ExternalName alias of the derived Service: cluster.local
		// only, no clusterset.local zone.
		target := "http://echo-clusterset." + appNS + ".svc.cluster.local/"
		eventually(t, time.Minute, func() error {
			by, failed, err := answers(clientIP, target, 40)
			if err != nil {
				return err
			}
			if by["east"] == 0 || by["west"] == 0 || failed > 0 {
				return fmt.Errorf("%s: answers by cluster %v, %d failed", target, by, failed)
			}
			t.Logf("40 requests to %s: %v", target, by)
			return nil
		})
	})
	if family == testenv.FamilyIPv4 {
		t.Run("zone preference: a z1 node uses only z1 endpoints while one is ready, then the others", func(t *testing.T) {
			checkZonePreference(t, hub, east, west, clientIP, clusterset)
		})
	}
	t.Run("the headless import resolves to the pods of both members", func(t *testing.T) {
		var want []string
		for _, m := range []*testenv.Cluster{east, west} {
			list, err := m.Client.CoreV1().Pods(appNS).List(ctx, metav1.ListOptions{LabelSelector: "app=echo"})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range list.Items {
				for _, ip := range p.Status.PodIPs {
					want = append(want, ip.IP)
				}
			}
		}
		sort.Strings(want)
		name := "echo-headless." + appNS + ".svc.clusterset.local"
		eventually(t, time.Minute, func() error {
			body, err := get(podURL(clientIP, "/resolve?name="+name))
			if err != nil {
				return err
			}
			got := strings.Fields(body)
			sort.Strings(got)
			if strings.Join(got, " ") != strings.Join(want, " ") {
				return fmt.Errorf("%s resolves to %v, want %v", name, got, want)
			}
			return nil
		})
	})
	if family.HasIPv6() {
		t.Run("one ClusterSet IP per family, AAAA records, traffic over IPv6", func(t *testing.T) {
			checkClusterSetFamilies(t, hub, family, clientIP, east, west)
		})
	}
	t.Run("scaling a member to zero moves every request to the other", func(t *testing.T) {
		start := time.Now()
		scaleEcho(t, east, 0)
		eventually(t, time.Minute, func() error {
			by, failed, err := answers(clientIP, clusterset, 20)
			if err != nil {
				return err
			}
			if by["west"] != 20 {
				return fmt.Errorf("answers by cluster %v, %d failed", by, failed)
			}
			return nil
		})
		t.Logf("east scaled to 0: every request lands in west %s later", time.Since(start).Round(10*time.Millisecond))
	})
	t.Run("the chart's pods run hardened, as the chart says", func(t *testing.T) {
		procs := daemonProcesses(t)
		if len(procs) != 3 {
			t.Fatalf("%d daemon processes on the hub node, want 3", len(procs))
		}
		for _, p := range procs {
			for _, want := range []string{"Uid:\t65532\t65532\t65532\t65532", "Gid:\t65532\t65532\t65532\t65532",
				"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
				if !strings.Contains(p.status, want) {
					t.Errorf("pid %d: /proc status lacks %q", p.pid, strings.ReplaceAll(want, "\t", " "))
				}
			}
			if !p.readOnlyRoot {
				t.Errorf("pid %d: its root filesystem is writable", p.pid)
			}
			if !strings.Contains(p.environ, "GOMEMLIMIT=") {
				t.Errorf("pid %d: no GOMEMLIMIT in its environment", p.pid)
			}
			if v := p.version(t); v != previous.Version {
				t.Errorf("pid %d runs version %q, want %s", p.pid, v, previous.Version)
			}
		}
	})
	var leader string
	others := map[string]bool{}
	t.Run("one replica leads and each member has one owner among the replicas", func(t *testing.T) {
		leader = leaseHolderPod(t, hub)
		for _, p := range daemonPods(t, hub) {
			if p.Name != leader {
				others[p.Name] = true
			}
		}
		if leader == "" || len(others) != 2 {
			t.Fatalf("leader %q, others %v", leader, others)
		}
		eventually(t, time.Minute, func() error { return ownedByPods(hub, daemonPods(t, hub), "east", "west") })
	})
	t.Run("deleting the leader pod: another replica leads, its members move, and no request fails", func(t *testing.T) {
		if leader == "" {
			t.Fatal("no leader: the subtest above failed")
		}
		loop := startClientLoop(clientIP, clusterset)
		start := time.Now()
		if err := hub.Client.CoreV1().Pods(daemonNS).Delete(ctx, leader, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		var holder string
		eventually(t, time.Minute, func() error {
			holder = leaseHolderPod(t, hub)
			if holder == "" || holder == leader {
				return fmt.Errorf("lease held by %q", holder)
			}
			return nil
		})
		takeover := time.Since(start)
		eventually(t, time.Minute, func() error { return ownedByPods(hub, daemonPods(t, hub), "east", "west") })
		n := loop.stopAfter(t, 20) // requests after the takeover too
		t.Logf("leader %s deleted: %s took over after %s; the client loop sent %d requests, %d failed",
			leader, holder, takeover.Round(10*time.Millisecond), n.sent, n.failed)
		if n.failed > 0 {
			t.Errorf("%d of %d requests failed across the takeover: %q", n.failed, n.sent, n.why)
		}
		// The leader releases its lease when it stops, and any candidate
		// may take it: a standby at its next retry, or the Deployment's
		// replacement pod if it starts first. Either is another replica.
		if !others[holder] {
			t.Logf("the lease went to the replacement pod %s, which started before a standby replica (%v) retried", holder, others)
		}
	})
	t.Run("upgrading to the next release from the registry, CRDs first, under traffic: no request fails, nothing aggregated is rewritten", func(t *testing.T) {
		old := map[string]bool{}
		for _, p := range daemonPods(t, hub) {
			old[p.Name] = true
		}
		// Converged: every replica has worked off what the takeover above
		// moved to it.
		waitQuiet(t, runningDaemonPods(t, hub, nil))
		aggregated := aggregatedVersions(t, hub)
		loop := startClientLoop(clientIP, clusterset)
		start := time.Now()
		// As docs/upgrading.md's "Upgrading" says: the new release's CRDs first
		// (Helm never upgrades them), then helm upgrade.
		pulled := t.TempDir()
		helm(t, hub.KubeconfigPath, "pull", current.ChartRef, "--version", current.ChartVersion, "--ca-file", reg.CAFile,
			"--untar", "-d", pulled)
		kubectl(t, hub, "apply", "--server-side", "--force-conflicts", "-f", filepath.Join(pulled, "endpoint-aggregator", "crds"))
		helm(t, hub.KubeconfigPath, "upgrade", release, current.ChartRef, "--version", current.ChartVersion, "--ca-file", reg.CAFile,
			"-n", daemonNS, "--reset-then-reuse-values", "--wait", "--timeout", "3m")
		t.Logf("CRDs applied and helm upgrade to %s --wait: %s", current.ChartVersion, time.Since(start).Round(100*time.Millisecond))
		var holder string
		eventually(t, 2*time.Minute, func() error {
			holder = leaseHolderPod(t, hub)
			if holder == "" || old[holder] {
				return fmt.Errorf("lease held by %q (an old pod: %v)", holder, old[holder])
			}
			return nil
		})
		for _, p := range daemonPods(t, hub) {
			if old[p.Name] && p.DeletionTimestamp == nil {
				t.Errorf("pod %s of the old release still runs", p.Name)
			}
		}
		upgraded := runningDaemonPods(t, hub, old)
		if len(upgraded) != 3 {
			t.Fatalf("%d pods of the new release run, want 3", len(upgraded))
		}
		checkPulled(t, upgraded, reg, current)
		eventually(t, time.Minute, func() error {
			var versions []string
			for _, p := range daemonProcesses(t) {
				versions = append(versions, p.version(t))
			}
			if len(versions) != 3 || slices.ContainsFunc(versions, func(v string) bool { return v != current.Version }) {
				return fmt.Errorf("the daemon processes on the hub node run %q, want 3 of %s", versions, current.Version)
			}
			return nil
		})
		// Every new replica has worked off its start (the leader its
		// takeover, the others the members they took over).
		pages := waitQuiet(t, upgraded)
		if !strings.Contains(pages[holder], "endpoint_aggregator_leader 1") {
			t.Errorf("%s holds the leader Lease but does not say it leads", holder)
		}
		eventually(t, time.Minute, func() error { return ownedByPods(hub, daemonPods(t, hub), "east", "west") })
		n := loop.stopAfter(t, 20)
		t.Logf("the upgrade rolled %d pods; the client loop sent %d requests, %d failed", len(old), n.sent, n.failed)
		if n.failed > 0 {
			t.Errorf("%d of %d requests failed across the upgrade (upgrade started %s): %q", n.failed, n.sent, start.Format("15:04:05.000"), n.why)
		}
		// What the hub holds: the same objects at the same resourceVersions,
		// whoever wrote (an old replica on its way out, or a new one).
		if after := aggregatedVersions(t, hub); !maps.Equal(after, aggregated) {
			t.Errorf("the upgrade rewrote aggregated hub objects:\nbefore %v\nafter  %v", aggregated, after)
		}
		// And each new replica, the leader and the owners of the members,
		// made no hub write but the member liveness Leases, renewed whatever
		// the hub holds (a renewal may meet a conflict: the old owner
		// renewed the Lease just before it handed the member over). A new
		// replica once created a member Lease it found missing (1 run in
		// about 26): liveness, not aggregated output, so it is logged here,
		// not failed.
		for name, m := range pages {
			created := sumSeries(m, `endpoint_aggregator_hub_writes_total{resource="leases",result="success",verb="create"}`)
			if created > 0 {
				t.Logf("the new replica %s created %v member Leases it found missing", name, created)
			}
			w := sumSeries(m, "endpoint_aggregator_hub_writes_total") -
				sumSeries(m, `endpoint_aggregator_hub_writes_total{resource="leases",result="success",verb="update"}`) -
				sumSeries(m, `endpoint_aggregator_hub_writes_total{resource="leases",result="conflict",verb="update"}`) - created
			if w != 0 {
				var lines []string
				for _, l := range strings.Split(m, "\n") {
					if strings.HasPrefix(l, "endpoint_aggregator_hub_writes_total{") {
						lines = append(lines, l)
					}
				}
				t.Errorf("the new replica %s wrote %v times to a converged hub:\n%s", name, w, strings.Join(lines, "\n"))
			}
		}
	})
	if family == testenv.FamilyIPv4 {
		t.Run("this cluster first: with the hub a member, its clients use its own backends while one is ready, then the others", func(t *testing.T) {
			checkThisClusterFirst(t, hub, east, reg, current, clientIP, clusterset)
		})
	}
	t.Run("helm uninstall leaves the members untouched", func(t *testing.T) {
		memberState := func() string {
			var b strings.Builder
			for _, m := range []*testenv.Cluster{east, west} {
				svcs, _ := m.Client.CoreV1().Services(appNS).List(ctx, metav1.ListOptions{})
				for _, s := range svcs.Items {
					fmt.Fprintf(&b, "%s/%s %s\n", m.Name, s.Name, s.ResourceVersion)
				}
				exports, _ := mcsclientset.NewForConfigOrDie(m.Config).MulticlusterV1beta1().ServiceExports(appNS).List(ctx, metav1.ListOptions{})
				for _, e := range exports.Items {
					fmt.Fprintf(&b, "%s/export/%s %s\n", m.Name, e.Name, e.ResourceVersion)
				}
			}
			return b.String()
		}
		beforeUninstall := memberState()
		helm(t, hub.KubeconfigPath, "uninstall", release, "-n", daemonNS, "--wait", "--timeout", "2m")
		if after := memberState(); after != beforeUninstall {
			t.Errorf("members changed across helm uninstall:\nbefore\n%s\nafter\n%s", beforeUninstall, after)
		}
	})
}

func daemonPods(t *testing.T, hub *testenv.Cluster) []corev1.Pod {
	t.Helper()
	list, err := hub.Client.CoreV1().Pods(daemonNS).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=endpoint-aggregator",
	})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// clientLoop is a client in the hub sending requests to one URL, five at a
// time every 50ms, counting what fails.
type clientLoop struct {
	stop   chan struct{}
	done   chan clientTally
	rounds atomic.Int64
}

// clientTally counts a client loop's requests; why keeps the first few
// failures as the client saw them, with the time.
type clientTally struct {
	sent, failed int
	why          []string
}

// failedWith counts n failures, and keeps their reasons while it keeps
// fewer than five.
func (n *clientTally) failedWith(count int, why ...string) {
	n.failed += count
	n.sent += count
	for _, w := range why {
		if len(n.why) < 5 {
			n.why = append(n.why, time.Now().Format("15:04:05.000")+" "+w)
		}
	}
}

func startClientLoop(clientIP, url string) *clientLoop {
	l := &clientLoop{stop: make(chan struct{}), done: make(chan clientTally)}
	go func() {
		var n clientTally
		for {
			select {
			case <-l.stop:
				l.done <- n
				return
			default:
			}
			by, failed, err := answersWhy(clientIP, url, 5)
			if err != nil {
				n.failedWith(5, err.Error())
			} else {
				n.failedWith(len(failed), failed...)
				for _, c := range by {
					n.sent += c
				}
			}
			l.rounds.Add(1)
			time.Sleep(50 * time.Millisecond) // the client's pace
		}
	}()
	return l
}

// stopAfter lets the loop run rounds more rounds, then stops it and
// returns its tally.
func (l *clientLoop) stopAfter(t *testing.T, rounds int64) clientTally {
	t.Helper()
	after := l.rounds.Load() + rounds
	eventually(t, time.Minute, func() error {
		if n := l.rounds.Load(); n < after {
			return fmt.Errorf("%d of %d more rounds of requests", rounds-(after-n), rounds)
		}
		return nil
	})
	close(l.stop)
	return <-l.done
}

// ownedByPods checks that each member's fence Lease is held by one of the
// running daemon pods (an identity is <hostname>_<uuid>).
func ownedByPods(hub *testenv.Cluster, pods []corev1.Pod, members ...string) error {
	running := map[string]bool{}
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			running[p.Name] = true
		}
	}
	for _, m := range members {
		l, err := hub.Client.CoordinationV1().Leases(daemonNS).Get(context.Background(), shard.FenceName(m), metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("fence of %s: %w", m, err)
		}
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder, _, _ = strings.Cut(*l.Spec.HolderIdentity, "_")
		}
		if !running[holder] {
			return fmt.Errorf("the fence of %s is held by %q, not by a running daemon pod %v", m, holder, running)
		}
	}
	return nil
}

// leaseHolderPod returns the pod holding the leader Lease (its identity is
// <hostname>_<uuid>, the hostname the pod's name).
func leaseHolderPod(t *testing.T, hub *testenv.Cluster) string {
	t.Helper()
	l, err := hub.Client.CoordinationV1().Leases(daemonNS).Get(context.Background(), release, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	host, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
	return host
}

type daemonProcess struct {
	pid             int
	status, environ string
	readOnlyRoot    bool
}

// daemonProcesses finds the daemon's processes on this machine (the hub
// node's containers are its processes) and reads what the kernel says of
// them.
func daemonProcesses(t *testing.T) []daemonProcess {
	t.Helper()
	var out []daemonProcess
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, c := range cmdlines {
		b, err := os.ReadFile(c)
		if err != nil || !strings.HasPrefix(string(b), "/endpoint-aggregator\x00run") {
			continue
		}
		dir := filepath.Dir(c)
		pid, _ := strconv.Atoi(filepath.Base(dir))
		status, _ := os.ReadFile(filepath.Join(dir, "status"))
		environ, _ := os.ReadFile(filepath.Join(dir, "environ"))
		mountinfo, _ := os.ReadFile(filepath.Join(dir, "mountinfo"))
		ro := false
		for _, line := range strings.Split(string(mountinfo), "\n") {
			f := strings.Fields(line)
			// id parent major:minor root mountpoint options ...
			if len(f) > 5 && f[4] == "/" {
				ro = strings.HasPrefix(f[5], "ro")
			}
		}
		out = append(out, daemonProcess{pid: pid, status: string(status), environ: string(environ), readOnlyRoot: ro})
	}
	return out
}

// version is what the process's binary (the one in its container) says of
// itself with `version`, "" if it has exited.
func (p daemonProcess) version(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(fmt.Sprintf("/proc/%d/exe", p.pid), "version").Output()
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "version: "); ok {
			return v
		}
	}
	t.Errorf("pid %d: version printed %q", p.pid, out)
	return ""
}

// sumSeries adds up the values of every series of metric in a /metrics page;
// a metric given with its labels ({...}) matches that series only.
func sumSeries(page, metric string) float64 {
	var sum float64
	for _, line := range strings.Split(page, "\n") {
		if !strings.HasPrefix(line, metric) || (!strings.HasSuffix(metric, "}") && !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ")) {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// runningDaemonPods returns the daemon pods that run and are not being
// deleted, but for those named in except.
func runningDaemonPods(t *testing.T, hub *testenv.Cluster, except map[string]bool) []corev1.Pod {
	t.Helper()
	var out []corev1.Pod
	for _, p := range daemonPods(t, hub) {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && !except[p.Name] {
			out = append(out, p)
		}
	}
	return out
}

// waitQuiet waits until every one of pods has an empty queue and a sync
// count that has not moved across three scrapes a second apart, and
// returns the last /metrics page of each, by pod name.
func waitQuiet(t *testing.T, pods []corev1.Pod) map[string]string {
	t.Helper()
	pages := map[string]string{}
	last := map[string]float64{}
	quiet := 0
	eventually(t, 2*time.Minute, func() error {
		settled := true
		var why []string
		for _, p := range pods {
			m, err := get(podURL(p.Status.PodIP, "/metrics"))
			if err != nil {
				return err
			}
			pages[p.Name] = m
			depth := sumSeries(m, `endpoint_aggregator_workqueue_depth{name="endpoint_aggregator"}`)
			syncs := sumSeries(m, "endpoint_aggregator_syncs_total")
			if prev, seen := last[p.Name]; depth > 0 || !seen || syncs != prev {
				settled = false
				why = append(why, fmt.Sprintf("%s: %v keys queued, %v syncs", p.Name, depth, syncs))
			}
			last[p.Name] = syncs
		}
		if !settled {
			quiet = 0
			time.Sleep(time.Second)
			return errors.New(strings.Join(why, "; "))
		}
		if quiet++; quiet < 3 {
			time.Sleep(time.Second)
			return fmt.Errorf("quiet for %d scrapes", quiet)
		}
		return nil
	})
	return pages
}

// aggregatedVersions returns the resourceVersion of every hub object the
// daemon writes in the application namespace (ServiceImports, Services,
// Endpoints, EndpointSlices), by kind and name.
func aggregatedVersions(t *testing.T, hub *testenv.Cluster) map[string]string {
	t.Helper()
	ctx := context.Background()
	ours := metav1.ListOptions{LabelSelector: endpoints.LabelManagedBy + "=" + endpoints.ManagedByValue}
	out := map[string]string{}
	svcs, err := hub.Client.CoreV1().Services(appNS).List(ctx, ours)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range svcs.Items {
		out["service/"+o.Name] = o.ResourceVersion
	}
	eps, err := hub.Client.CoreV1().Endpoints(appNS).List(ctx, ours)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range eps.Items {
		out["endpoints/"+o.Name] = o.ResourceVersion
	}
	slices, err := hub.Client.DiscoveryV1().EndpointSlices(appNS).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelManagedBy + "=" + endpoints.SliceManagedByValue,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range slices.Items {
		out["endpointslice/"+o.Name] = o.ResourceVersion
	}
	imports, err := mcsclientset.NewForConfigOrDie(hub.Config).MulticlusterV1beta1().ServiceImports(appNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range imports.Items {
		out["serviceimport/"+o.Name] = o.ResourceVersion
	}
	if len(imports.Items) < 2 || len(slices.Items) == 0 || len(svcs.Items) == 0 {
		t.Fatalf("the hub holds %d ServiceImports, %d EndpointSlices, %d Services of the daemon: not the converged hub this test expects",
			len(imports.Items), len(slices.Items), len(svcs.Items))
	}
	return out
}

// checkChartImageInRegistry checks that rel's chart, as helm renders it
// from the registry with its defaults, runs rel's image, and that the
// registry resolves that reference to the image index the release pushed.
func checkChartImageInRegistry(t *testing.T, hub *testenv.Cluster, reg *testenv.Registry, rel *testenv.Release) {
	t.Helper()
	out := helm(t, hub.KubeconfigPath, "template", release, rel.ChartRef, "--version", rel.ChartVersion, "--ca-file", reg.CAFile, "-n", daemonNS)
	want := `image: "` + rel.Image + `"`
	if n := strings.Count(out, "image: "); n == 0 || n != strings.Count(out, want) {
		t.Errorf("%s %s renders %d images, %d of them %s", rel.ChartRef, rel.ChartVersion, n, strings.Count(out, want), want)
	}
	repo, tag, _ := strings.Cut(strings.TrimPrefix(rel.Image, reg.Host+"/"), ":")
	digest, mediaType, err := reg.Digest(repo, tag)
	if err != nil {
		t.Fatal(err)
	}
	if digest != rel.IndexDigest || mediaType != "application/vnd.oci.image.index.v1+json" {
		t.Errorf("the registry resolves %s to %s %s, want the index %s", rel.Image, mediaType, digest, rel.IndexDigest)
	}
}

// checkPulled checks that pods run rel's image, named as the chart names it
// by default, pulled if not present, and that the node's containerd pulled
// it from reg: the image it reports running is the index the release
// pushed there.
func checkPulled(t *testing.T, pods []corev1.Pod, reg *testenv.Registry, rel *testenv.Release) {
	t.Helper()
	wantID := reg.Host + "/endpoint-aggregator@" + rel.IndexDigest
	for _, p := range pods {
		for _, c := range p.Spec.Containers {
			if c.Image != rel.Image || c.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("pod %s: container %s runs %s (pull policy %s), want %s (IfNotPresent)", p.Name, c.Name, c.Image, c.ImagePullPolicy, rel.Image)
			}
		}
		for _, st := range p.Status.ContainerStatuses {
			if st.ImageID != wantID {
				t.Errorf("pod %s: container %s runs image %s, want %s", p.Name, st.Name, st.ImageID, wantID)
			}
		}
	}
}
