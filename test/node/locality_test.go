package node

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// checkZonePreference puts the hub's node and east's in zone z1 and west's
// in z2, and has both members' echo Service prefer the same zone. The
// daemon hints each hub endpoint for its own zone, so the hub's kube-proxy
// sends the client (on the z1 node) only to east while east has a ready
// endpoint, to west the moment it has none, and to east again once it is
// back. Without the preference, requests spread over both again.
func checkZonePreference(t *testing.T, hub, east, west *testenv.Cluster, clientIP, target string) {
	zones := map[*testenv.Cluster]string{hub: "z1", east: "z1", west: "z2"}
	for c, z := range zones {
		labelNodeZone(t, c, z)
	}
	t.Cleanup(func() {
		setTrafficDistribution(t, nil, east, west)
		for c := range zones {
			labelNodeZone(t, c, "")
		}
	})
	setTrafficDistribution(t, ptr.To(corev1.ServiceTrafficDistributionPreferSameZone), east, west)
	eventually(t, 2*time.Minute, func() error { return hubHints(hub, map[string]string{"east": "z1", "west": "z2"}) })

	const n = 200
	checkAllFrom := func(cluster string) {
		t.Helper()
		eventually(t, time.Minute, func() error {
			by, failed, err := answers(clientIP, target, n)
			if err != nil {
				return err
			}
			if by[cluster] != n || failed > 0 {
				return fmt.Errorf("%d requests from the z1 node: answers by cluster %v, %d failed; want all from %s", n, by, failed, cluster)
			}
			return nil
		})
		t.Logf("%d requests from the z1 node: all answered by %s", n, cluster)
	}
	checkAllFrom("east")

	// East's backends stop being ready (their readiness probe fails; the
	// servers keep answering): the z1 node has no ready endpoint for its
	// zone and kube-proxy uses every ready one, west's.
	setReady(t, east, false)
	failOver(t, clientIP, target, "east", "west")
	checkAllFrom("west")

	// East is back: the z1 node uses only east again.
	setReady(t, east, true)
	checkAllFrom("east")

	// No preference: the hints go, and requests spread again.
	setTrafficDistribution(t, nil, east, west)
	eventually(t, 2*time.Minute, func() error { return hubHints(hub, map[string]string{"east": "", "west": ""}) })
	eventually(t, time.Minute, func() error {
		by, failed, err := answers(clientIP, target, 40)
		if err != nil {
			return err
		}
		if by["east"] == 0 || by["west"] == 0 || failed > 0 {
			return fmt.Errorf("without a preference: answers by cluster %v, %d failed", by, failed)
		}
		return nil
	})
}

// labelNodeZone sets the zone label of c's node, or removes it for "".
func labelNodeZone(t *testing.T, c *testenv.Cluster, zone string) {
	t.Helper()
	var value any
	if zone != "" {
		value = zone
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{corev1.LabelTopologyZone: value}}})
	if _, err := c.Client.CoreV1().Nodes().Patch(context.Background(), c.Node.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("%s: labelling node %s with zone %q: %v", c.Name, c.Node.Name, zone, err)
	}
}

// setTrafficDistribution sets the trafficDistribution of the echo Service
// in each member.
func setTrafficDistribution(t *testing.T, td *string, members ...*testenv.Cluster) {
	t.Helper()
	var value any
	if td != nil {
		value = *td
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"trafficDistribution": value}})
	for _, m := range members {
		if _, err := m.Client.CoreV1().Services(appNS).Patch(context.Background(), "echo", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("%s: setting echo's trafficDistribution: %v", m.Name, err)
		}
	}
}

// hubHints checks that every endpoint of the hub's MCS slices of echo
// from each cluster is hinted for want[cluster] alone, or for nothing when
// that is "".
func hubHints(hub *testenv.Cluster, want map[string]string) error {
	list, err := hub.Client.DiscoveryV1().EndpointSlices(appNS).List(context.Background(), metav1.ListOptions{LabelSelector: mcsv1beta1.LabelServiceName + "=echo"})
	if err != nil {
		return err
	}
	seen := map[string]int{}
	for _, s := range list.Items {
		cluster := s.Labels[mcsv1beta1.LabelSourceCluster]
		for _, ep := range s.Endpoints {
			var got []string
			if ep.Hints != nil {
				for _, z := range ep.Hints.ForZones {
					got = append(got, z.Name)
				}
			}
			if w := want[cluster]; strings.Join(got, ",") != w {
				return fmt.Errorf("hub slice %s: %s endpoint %v in zone %v hinted for %q, want %q", s.Name, cluster, ep.Addresses, ptr.Deref(ep.Zone, ""), got, w)
			}
			seen[cluster]++
		}
	}
	for c := range want {
		if seen[c] == 0 {
			return fmt.Errorf("no hub endpoint of echo from %s yet (%v)", c, seen)
		}
	}
	return nil
}

// setReady makes the readiness probe of each of c's echo Deployment's pods
// pass or fail; the servers answer requests either way.
func setReady(t *testing.T, c *testenv.Cluster, ready bool) {
	t.Helper()
	list, err := c.Client.CoreV1().Pods(appNS).List(context.Background(), metav1.ListOptions{LabelSelector: "app=echo"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
			continue
		}
		if _, err := get(podURL(p.Status.PodIP, fmt.Sprintf("/ready?set=%t", ready))); err != nil && ready {
			t.Fatalf("%s: pod %s: %v", c.Name, p.Name, err)
		}
	}
}

// checkThisClusterFirst makes the hub a member that prefers its own
// endpoints (helm upgrade with hubIsMember and preferLocal), its node in
// zone z1, and has it export echo too. The daemon hints the hub's
// endpoints for z1 and east's and west's for a zone no Node has, so the
// client on the hub node reaches only the hub's backends while one is
// ready, east and west the moment none is, and the hub again once it is
// back.
func checkThisClusterFirst(t *testing.T, hub, east *testenv.Cluster, reg *testenv.Registry, rel *testenv.Release, clientIP, target string) {
	ctx := context.Background()
	scaleEcho(t, east, 2) // an earlier subtest scaled it to zero
	labelNodeZone(t, hub, "z1")
	t.Cleanup(func() { labelNodeZone(t, hub, "") })
	helm(t, hub.KubeconfigPath, "upgrade", release, rel.ChartRef, "--version", rel.ChartVersion, "--ca-file", reg.CAFile,
		"-n", daemonNS, "--reuse-values", "--set", "hubIsMember=true", "--set", "preferLocal=true", "--wait", "--timeout", "3m")
	if _, err := hub.Client.AppsV1().Deployments(appNS).Create(ctx, echoDeployment(appNS, "hub", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := hub.Client.CoreV1().Services(appNS).Create(ctx, echoService(appNS, "echo", false), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mcs := mcsclientset.NewForConfigOrDie(hub.Config)
	if _, err := mcs.MulticlusterV1beta1().ServiceExports(appNS).Create(ctx, &mcsv1beta1.ServiceExport{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "echo"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = mcs.MulticlusterV1beta1().ServiceExports(appNS).Delete(ctx, "echo", metav1.DeleteOptions{})
		_ = hub.Client.CoreV1().Services(appNS).Delete(ctx, "echo", metav1.DeleteOptions{})
		_ = hub.Client.AppsV1().Deployments(appNS).Delete(ctx, "echo", metav1.DeleteOptions{})
	})
	eventually(t, 3*time.Minute, func() error {
		return hubHints(hub, map[string]string{"hub": "z1", "east": endpoints.RemoteZone, "west": endpoints.RemoteZone})
	})

	const n = 200
	check := func(want func(by map[string]int) bool, what string) {
		t.Helper()
		eventually(t, time.Minute, func() error {
			by, failed, err := answers(clientIP, target, n)
			if err != nil {
				return err
			}
			if !want(by) || failed > 0 {
				return fmt.Errorf("%d requests from the hub node: answers by cluster %v, %d failed; want %s", n, by, failed, what)
			}
			t.Logf("%d requests from the hub node: %v", n, by)
			return nil
		})
	}
	onlyHub := func(by map[string]int) bool { return by["hub"] == n }
	check(onlyHub, "all from the hub")

	setReady(t, hub, false)
	failOver(t, clientIP, target, "hub", "east", "west")
	check(func(by map[string]int) bool { return by["hub"] == 0 && by["east"] > 0 && by["west"] > 0 }, "none from the hub, some from east and from west")

	setReady(t, hub, true)
	check(onlyHub, "all from the hub again")
}

// scaleEcho sets the replicas of c's echo Deployment.
func scaleEcho(t *testing.T, c *testenv.Cluster, replicas int32) {
	t.Helper()
	ctx := context.Background()
	scale, err := c.Client.AppsV1().Deployments(appNS).GetScale(ctx, "echo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = replicas
	if _, err := c.Client.AppsV1().Deployments(appNS).UpdateScale(ctx, "echo", scale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// failOver follows the client's requests to target, five at a time, after
// the backends of cluster went not ready, until 40 in a row are answered
// by the clusters in to. It reports how long the first of those took and
// how many requests failed meanwhile: the servers of cluster still answer
// while kube-proxy moves, so a request may fail only with the data plane's
// own blips (a SYN lost while the rules are replaced), never for long.
func failOver(t *testing.T, clientIP, target, cluster string, to ...string) {
	t.Helper()
	changed := time.Now()
	var first time.Duration
	sent, failed := 0, 0
	var why []string
	for streak := 0; streak < 40; {
		if time.Since(changed) > 2*time.Minute {
			t.Fatalf("2m after %s's backends went not ready: %d requests, %d failed, the last %d answered by %v; first failures %q", cluster, sent, failed, streak, to, why)
		}
		by, fails, err := answersWhy(clientIP, target, 5)
		if err != nil {
			fails = []string{err.Error()}
		}
		sent += 5
		failed += len(fails)
		if len(why) < 5 {
			why = append(why, fails...)
		}
		elsewhere := 0
		for _, c := range to {
			elsewhere += by[c]
		}
		if elsewhere > 0 && first == 0 {
			first = time.Since(changed)
		}
		if elsewhere == 5 {
			streak += 5
		} else {
			streak = 0
		}
	}
	t.Logf("%s's backends not ready: the first answer from %v came %s later; %d of %d requests failed meanwhile %q",
		cluster, to, first.Round(10*time.Millisecond), failed, sent, why)
	if failed*10 > sent {
		t.Errorf("%d of %d requests failed while %s's backends went not ready: %q", failed, sent, cluster, why)
	}
}
