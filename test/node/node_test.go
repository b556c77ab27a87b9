package node

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
)

// TestNodeRunsAPodAndLeavesNothing starts a cluster with a real node, runs
// the echo server in a Pod with a readiness probe, talks to it over the pod
// network from the host at each of its IPs, and checks that stopping the
// cluster leaves no process, link, route, namespace, mount, cgroup or
// changed sysctl behind; in each IP family.
func TestNodeRunsAPodAndLeavesNothing(t *testing.T) {
	for _, family := range testenv.Families {
		t.Run(family.String(), func(t *testing.T) { nodeRunsAPodAndLeavesNothing(t, family) })
	}
}

func nodeRunsAPodAndLeavesNothing(t *testing.T, family testenv.Family) {
	testenv.RequireRoot(t)
	testenv.RequireAssets(t)
	testenv.RequireFamily(t, family)
	before := testenv.SnapshotHost()
	c, err := testenv.Start("nodetest", testenv.Options{Node: &testenv.NodeOptions{Family: family}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop()
		}
	}()
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, echoPod("echo", "nodetest"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	p := waitPodReady(t, c, "default", "echo", 90*time.Second)
	t.Logf("pod Running and Ready %s after its creation, IPs %v", time.Since(started).Round(time.Millisecond), p.Status.PodIPs)
	var ips []string
	for _, ip := range p.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	if got, err := familiesOf(ips); err != nil || !slices.Equal(got, family.IPFamilies()) {
		t.Errorf("pod IPs %v are of families %v (%v), want one of each of %v", ips, got, err, family.IPFamilies())
	}
	for _, ip := range ips {
		resp, err := http.Get(podURL(ip, "/"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if !strings.HasPrefix(string(body), "cluster=nodetest pod=echo") {
			t.Errorf("the pod answered %q at %s", body, ip)
		}
	}

	dir := c.Dir
	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if left := testenv.Leftovers(before, dir); len(left) > 0 {
		t.Errorf("left behind:\n%s", strings.Join(left, "\n"))
	}
}

// echoPod is the echo server answering with cluster, with a readiness probe.
func echoPod(name, cluster string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "echo"}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name: "echo", Image: testenv.EchoImage, ImagePullPolicy: corev1.PullNever,
				Env: []corev1.EnvVar{{Name: "CLUSTER", Value: cluster}},
				// /ready answers 503 after /ready?set=false (setReady).
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8080)}},
					PeriodSeconds:    1,
					FailureThreshold: 1,
				},
			}},
		},
	}
}

func waitPodReady(t *testing.T, c *testenv.Cluster, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					return p
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s not ready after %s: %v %v\n%s", ns, name, timeout, err, p, c.Node.LogTails())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
