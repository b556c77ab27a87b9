package node

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
)

const (
	release  = "endpoint-aggregator"
	daemonNS = "endpoint-aggregator"
	appNS    = "shop"
)

// TestClusterSetOnRealNodes is the tier users live in: a hub and two
// members, each with a real node; the chart installed into the hub with the
// image `make image` built; real Deployments in the members; a client pod
// in the hub that resolves clusterset.local names through CoreDNS and sends
// HTTP requests through the ClusterSet IP that kube-proxy programs from the
// hub's MCS slices.
func TestClusterSetOnRealNodes(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireAssets(t)
	imageTar, imageRef := daemonImage(t)
	before := testenv.SnapshotHost()
	var dirs []string
	// Registered before the clusters' own cleanup, so it runs after it.
	t.Cleanup(func() {
		if left := testenv.Leftovers(before, dirs...); len(left) > 0 {
			t.Errorf("left behind:\n%s", strings.Join(left, "\n"))
		}
	})
	cs := testenv.StartAllT(t,
		testenv.Spec{Name: "hub", Options: testenv.Options{CRDs: true, Node: &testenv.NodeOptions{ClusterDNSAtHost: true, Images: []string{imageTar}}}},
		testenv.Spec{Name: "east", Options: testenv.Options{CRDs: true, Node: &testenv.NodeOptions{}}},
		testenv.Spec{Name: "west", Options: testenv.Options{CRDs: true, Node: &testenv.NodeOptions{}}},
	)
	hub, east, west := cs[0], cs[1], cs[2]
	for _, c := range cs {
		dirs = append(dirs, c.Dir)
	}
	testenv.StartCoreDNSAt(t, hub.KubeconfigPath, hub.Node.HostIP)
	ctx := context.Background()
	for _, c := range cs {
		mustCreateNamespace(t, c.Client, appNS)
	}
	mustCreateNamespace(t, hub.Client, daemonNS)
	register(t, hub, daemonNS, east)
	register(t, hub, daemonNS, west)

	repo, tag, _ := strings.Cut(imageRef, ":")
	start := time.Now()
	helm(t, hub.KubeconfigPath, "install", release, "../../charts/endpoint-aggregator", "-n", daemonNS,
		"--set", "image.repository="+repo, "--set", "image.tag="+tag, "--set", "image.pullPolicy=Never",
		"--wait", "--timeout", "3m")
	t.Logf("helm install --wait: %s", time.Since(start).Round(100*time.Millisecond))
	pods := daemonPods(t, hub)
	if len(pods) != 2 {
		t.Fatalf("%d daemon pods, want 2", len(pods))
	}

	// The members' workloads: real Deployments, Services and exports.
	for _, m := range []*testenv.Cluster{east, west} {
		if _, err := m.Client.AppsV1().Deployments(appNS).Create(ctx, echoDeployment(appNS, m.Name, 2), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		mcs := mcsclientset.NewForConfigOrDie(m.Config)
		for _, svc := range []*corev1.Service{echoService(appNS, "echo", false), echoService(appNS, "echo-headless", true)} {
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
	t.Run("the headless import resolves to the pods of both members", func(t *testing.T) {
		var want []string
		for _, m := range []*testenv.Cluster{east, west} {
			list, err := m.Client.CoreV1().Pods(appNS).List(ctx, metav1.ListOptions{LabelSelector: "app=echo"})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range list.Items {
				want = append(want, p.Status.PodIP)
			}
		}
		sort.Strings(want)
		name := "echo-headless." + appNS + ".svc.clusterset.local"
		eventually(t, time.Minute, func() error {
			body, err := get("http://" + clientIP + ":8080/resolve?name=" + name)
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
	t.Run("scaling a member to zero moves every request to the other", func(t *testing.T) {
		scale, err := east.Client.AppsV1().Deployments(appNS).GetScale(ctx, "echo", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		scale.Spec.Replicas = 0
		start := time.Now()
		if _, err := east.Client.AppsV1().Deployments(appNS).UpdateScale(ctx, "echo", scale, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
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
