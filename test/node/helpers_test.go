package node

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
)

func mustCreateNamespace(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	_, err := c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// register writes a member's registration Secret into the hub namespace.
func register(t *testing.T, hub *testenv.Cluster, namespace string, member *testenv.Cluster) {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: member.Name,
			Labels: map[string]string{clusters.LabelMemberCluster: "true"},
		},
		Data: map[string][]byte{clusters.KubeconfigKey: member.Kubeconfig},
	}
	if _, err := hub.Client.CoreV1().Secrets(namespace).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// echoDeployment runs replicas echo servers answering with cluster.
func echoDeployment(namespace, cluster string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": "echo"}
	pod := echoPod("", cluster)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "echo"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod.Spec},
		},
	}
}

func echoService(namespace, name string, headless bool) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "echo"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	if headless {
		s.Spec.ClusterIP = corev1.ClusterIPNone
	}
	return s
}

// helm runs the pinned Helm against kubeconfig with throw-away Helm
// directories (registry logins included).
func helm(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	bin, err := testenv.HelmPath()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), testenv.HelmEnvHome(t.TempDir())...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// kubectl runs the cluster's kubectl against c, with a throw-away cache.
func kubectl(t *testing.T, c *testenv.Cluster, args ...string) string {
	t.Helper()
	bin := filepath.Join(testenv.RequireAssets(t), "kubectl")
	cmd := exec.Command(bin, append([]string{"--kubeconfig", c.KubeconfigPath, "--cache-dir", t.TempDir()}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// get fetches url from the host (pod IPs are routed to their nodes).
func get(url string) (string, error) {
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// answers counts, per cluster, the answers of n requests to target sent
// from the client pod at clientIP, and the failed ones.
func answers(clientIP, target string, n int) (map[string]int, int, error) {
	byCluster, failures, err := answersWhy(clientIP, target, n)
	return byCluster, len(failures), err
}

// answersWhy is answers with the client's line for each failed request.
func answersWhy(clientIP, target string, n int) (map[string]int, []string, error) {
	body, err := get(podURL(clientIP, fmt.Sprintf("/fetch?n=%d&url=%s", n, url.QueryEscape(target))))
	if err != nil {
		return nil, nil, err
	}
	byCluster, failed := map[string]int{}, []string(nil)
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		if strings.HasPrefix(line, "error:") {
			failed = append(failed, line)
			continue
		}
		f := strings.Fields(line)
		if len(f) > 0 {
			byCluster[strings.TrimPrefix(f[0], "cluster=")]++
		}
	}
	return byCluster, failed, nil
}

func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not true after %s: %v", timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
