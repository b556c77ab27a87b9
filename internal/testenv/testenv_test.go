package testenv

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

var serviceImports = schema.GroupVersionResource{Group: "multicluster.x-k8s.io", Version: "v1beta1", Resource: "serviceimports"}

// TestHubAndTwoMembers starts a hub (with the mcs-api CRDs) and two members
// concurrently, checks each answers with its own kubeconfig, stops them, and
// checks that every kube-apiserver and etcd process they ran is gone.
func TestHubAndTwoMembers(t *testing.T) {
	RequireAssets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	before := controlPlaneChildren(t)
	t0 := time.Now()
	clusters, err := StartAll(
		Spec{Name: "hub", Options: Options{CRDs: true}},
		Spec{Name: "east"},
		Spec{Name: "west"},
	)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = StopAll(clusters...)
		}
	})
	t.Logf("started 3 clusters in %s", time.Since(t0).Round(time.Millisecond))

	var pids []int
	if runtime.GOOS == "linux" {
		for _, pid := range controlPlaneChildren(t) {
			if !contains(before, pid) {
				pids = append(pids, pid)
			}
		}
		if len(pids) != 6 {
			t.Errorf("want 6 new kube-apiserver/etcd child processes, found %d: %v", len(pids), pids)
		}
	}

	hosts := map[string]bool{}
	for _, c := range clusters {
		checkKubeconfig(t, c)
		if hosts[c.Host()] {
			t.Errorf("%s: host %s used by another cluster", c.Name, c.Host())
		}
		hosts[c.Host()] = true

		nss, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("%s: list namespaces: %v", c.Name, err)
		}
		if !hasNamespace(nss.Items, "default") {
			t.Errorf("%s: no default namespace in %d namespaces", c.Name, len(nss.Items))
		}

		// Each cluster has its own etcd: a namespace made in one is
		// absent from the others.
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
			ObjectMeta: metav1.ObjectMeta{Name: "only-in-" + c.Name},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: create namespace: %v", c.Name, err)
		}

		dyn, err := dynamic.NewForConfig(c.Config)
		if err != nil {
			t.Fatal(err)
		}
		_, err = dyn.Resource(serviceImports).List(ctx, metav1.ListOptions{})
		switch {
		case c.Name == "hub" && err != nil:
			t.Errorf("hub: list ServiceImports: %v", err)
		case c.Name != "hub" && !apierrors.IsNotFound(err):
			t.Errorf("%s: list ServiceImports without CRDs: want NotFound, got %v", c.Name, err)
		}
	}
	for _, c := range clusters {
		nss, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, other := range clusters {
			if want := other == c; hasNamespace(nss.Items, "only-in-"+other.Name) != want {
				t.Errorf("%s: namespace only-in-%s present=%v, want %v", c.Name, other.Name, !want, want)
			}
		}
	}

	t0 = time.Now()
	if err := StopAll(clusters...); err != nil {
		t.Errorf("stop: %v", err)
	}
	stopped = true
	t.Logf("stopped 3 clusters in %s", time.Since(t0).Round(time.Millisecond))

	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("control-plane process %d still running after Stop", pid)
		}
	}
	for _, c := range clusters {
		if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
			t.Errorf("%s: directory %s not removed (stat: %v)", c.Name, c.Dir, err)
		}
		if err := c.Stop(); err != nil {
			t.Errorf("%s: second Stop: %v", c.Name, err)
		}
	}
}

// TestRestartAPIServer checks that the apiserver comes back on the same
// address, with the same credentials and the same data.
func TestRestartAPIServer(t *testing.T) {
	c := StartT(t, "restart", Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "survivor", Namespace: "default"}}
	if _, err := c.Client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// An open watch must not hold the shutdown up.
	w, err := c.Client.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	t0 := time.Now()
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Since(t0)
	t.Logf("kube-apiserver stopped in %s with a watch open", stopped.Round(time.Millisecond))
	// Watches are closed 1 s into the shutdown; without that it takes the
	// whole request timeout.
	if stopped > 10*time.Second {
		t.Errorf("kube-apiserver took %s to stop with a watch open", stopped)
	}

	short := rest.CopyConfig(c.Config)
	short.Timeout = 2 * time.Second
	if _, err := kubernetes.NewForConfigOrDie(short).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err == nil {
		t.Fatal("apiserver still answers after StopAPIServer")
	}

	t0 = time.Now()
	if err := c.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver restarted in %s", time.Since(t0).Round(time.Millisecond))

	// The old client, built before the restart, must work as is.
	got, err := c.Client.CoreV1().ConfigMaps("default").Get(ctx, "survivor", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get ConfigMap after restart: %v", err)
	}
	if got.UID == "" {
		t.Fatal("ConfigMap without UID")
	}
	// A client made from the kubeconfig file works too.
	cfg, err := clientcmd.BuildConfigFromFlags("", c.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps("default").Get(ctx, "survivor", metav1.GetOptions{}); err != nil {
		t.Fatalf("kubeconfig client after restart: %v", err)
	}
}

func TestStartRejectsBadName(t *testing.T) {
	if _, err := Start("Not_A_Label", Options{}); err == nil || !strings.Contains(err.Error(), "invalid cluster name") {
		t.Fatalf("want invalid name error, got %v", err)
	}
}

func TestAssetsDir(t *testing.T) {
	empty := t.TempDir()
	t.Setenv(AssetsEnv, empty)
	_, err := AssetsDir()
	if err == nil || !strings.Contains(err.Error(), "make tools") {
		t.Fatalf("want an error that mentions `make tools`, got %v", err)
	}

	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if err := os.WriteFile(filepath.Join(empty, bin), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if dir, err := AssetsDir(); err != nil || dir != empty {
		t.Fatalf("AssetsDir() = %q, %v; want %q", dir, err, empty)
	}

	t.Setenv(AssetsEnv, "")
	t.Setenv("XDG_CACHE_HOME", "/cache")
	dir, err := DefaultAssetsDir()
	if want := "/cache/endpoint-aggregator/bin/k8s-" + KubernetesVersion + "-etcd-" + EtcdVersion; err != nil || dir != want {
		t.Fatalf("DefaultAssetsDir() = %q, %v; want %q", dir, err, want)
	}
}

// TestVersionsMatchMakefile keeps the Go constants and the Makefile in step:
// they both name the cache directory.
func TestVersionsMatchMakefile(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"K8S_VERSION": KubernetesVersion, "ETCD_VERSION": EtcdVersion} {
		m := regexp.MustCompile(`(?m)^` + name + `\s*[:?]?=\s*(\S+)\s*$`).FindSubmatch(mk)
		if m == nil {
			t.Errorf("Makefile does not set %s", name)
		} else if string(m[1]) != want {
			t.Errorf("Makefile %s = %s, testenv says %s", name, m[1], want)
		}
	}
	gomod, err := os.ReadFile("../../hack/tools/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []string{"k8s.io/kubernetes " + KubernetesVersion, "go.etcd.io/etcd/server/v3 " + EtcdVersion} {
		if !bytes.Contains(gomod, []byte(req)) {
			t.Errorf("hack/tools/go.mod does not require %s", req)
		}
	}
}

func checkKubeconfig(t *testing.T, c *Cluster) {
	t.Helper()
	onDisk, err := os.ReadFile(c.KubeconfigPath)
	if err != nil || !bytes.Equal(onDisk, c.Kubeconfig) {
		t.Errorf("%s: %s does not hold Kubeconfig (err %v)", c.Name, c.KubeconfigPath, err)
	}
	kc, err := clientcmd.Load(c.Kubeconfig)
	if err != nil {
		t.Fatalf("%s: parse kubeconfig: %v", c.Name, err)
	}
	if kc.CurrentContext != c.Name {
		t.Errorf("%s: current context %q", c.Name, kc.CurrentContext)
	}
	ctx := kc.Contexts[c.Name]
	if ctx == nil {
		t.Fatalf("%s: no context named after the cluster", c.Name)
	}
	cl, user := kc.Clusters[ctx.Cluster], kc.AuthInfos[ctx.AuthInfo]
	if cl == nil || user == nil {
		t.Fatalf("%s: context refers to missing cluster or user", c.Name)
	}
	if !regexp.MustCompile(`^https://127\.0\.0\.1:\d+$`).MatchString(cl.Server) {
		t.Errorf("%s: server %q", c.Name, cl.Server)
	}
	if len(cl.CertificateAuthorityData) == 0 || cl.CertificateAuthority != "" || cl.InsecureSkipTLSVerify {
		t.Errorf("%s: cluster entry must carry inline CA data only", c.Name)
	}
	if len(user.ClientCertificateData) == 0 || len(user.ClientKeyData) == 0 ||
		user.ClientCertificate != "" || user.ClientKey != "" || user.Token != "" || user.TokenFile != "" || user.Exec != nil || user.AuthProvider != nil {
		t.Errorf("%s: user entry must carry inline client certificate and key only", c.Name)
	}
}

func hasNamespace(items []corev1.Namespace, name string) bool {
	for _, ns := range items {
		if ns.Name == name {
			return true
		}
	}
	return false
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// controlPlaneChildren lists the kube-apiserver and etcd processes whose
// parent is this test binary (Linux only; nil elsewhere).
func controlPlaneChildren(t *testing.T) []int {
	t.Helper()
	if runtime.GOOS != "linux" {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, ppid, ok := procStat(pid)
		if ok && ppid == self && (comm == "kube-apiserver" || comm == "etcd") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// alive reports whether pid is still a child of this process (a recycled
// pid with another parent does not count).
func alive(pid int) bool {
	_, ppid, ok := procStat(pid)
	return ok && ppid == os.Getpid()
}

// procStat reads the command name and parent pid from /proc/PID/stat.
func procStat(pid int) (comm string, ppid int, ok bool) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0, false
	}
	s := string(data)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return "", 0, false
	}
	fields := strings.Fields(s[closing+1:]) // state ppid ...
	if len(fields) < 2 {
		return "", 0, false
	}
	ppid, err = strconv.Atoi(fields[1])
	if err != nil {
		return "", 0, false
	}
	return s[open+1 : closing], ppid, true
}

// TestFreezeAPIServer checks that a frozen apiserver hangs its clients
// (rather than refusing them) and answers again once thawed.
func TestFreezeAPIServer(t *testing.T) {
	c := StartT(t, "freeze", Options{})
	ctx := context.Background()
	short := rest.CopyConfig(c.Config)
	short.Timeout = 2 * time.Second
	client := kubernetes.NewForConfigOrDie(short)
	if _, err := client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.FreezeAPIServer(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	_, err := client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	if err == nil {
		t.Fatal("a frozen apiserver answered")
	}
	if waited := time.Since(t0); waited < short.Timeout {
		t.Fatalf("request failed after %s (%v): the connection was refused, not hung", waited, err)
	}
	if err := c.ThawAPIServer(); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("after thaw: %v", err)
	}
	// Stop must cope with a frozen apiserver.
	if err := c.FreezeAPIServer(); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("frozen cluster stopped in %s", time.Since(t0).Round(time.Millisecond))
}
