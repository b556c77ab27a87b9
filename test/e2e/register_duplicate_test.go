package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
)

// TestCLIRegisterRefusesOneClusterUnderTwoNames: once east is registered,
// `register --dry-run` of it under another name fails, names the existing
// registration and writes nothing; registering it through another URL of
// the same API server (https://localhost:PORT for https://127.0.0.1:PORT,
// both in its serving certificate) is refused by its kube-system UID; a dry
// run re-pointing east at another cluster is refused; and --allow-duplicate
// lets a duplicate through.
func TestCLIRegisterRefusesOneClusterUnderTwoNames(t *testing.T) {
	t.Parallel()
	cs := testenv.StartAllT(t, testenv.Spec{Name: "hub"}, testenv.Spec{Name: "east"})
	hub, east := cs[0], cs[1]
	ctx := context.Background()
	kubeconfig := cliKubeconfig(t, hub, east)
	// cli runs a command against hub and, unless args name another, member east.
	cli := func(args ...string) (stdout, stderr string, err error) {
		args = append(args, "--kubeconfig", kubeconfig, "--hub-context", "hub", "--token-wait", "0s")
		if !slices.Contains(args, "--member-context") {
			args = append(args, "--member-context", "east")
		}
		return runCLI(ctx, args...)
	}
	secrets := hub.Client.CoreV1().Secrets(daemonNamespace)
	kubeSystem, err := east.Client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid := string(kubeSystem.UID)

	if stdout, stderr, err := cli("register", "--name", "east"); err != nil {
		t.Fatalf("register east: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	s, err := secrets.Get(ctx, "east", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Annotations[clusters.AnnotationKubeSystemUID]; got != uid {
		t.Errorf("east's registration records kube-system UID %q, want %q", got, uid)
	}

	// state is what a refused run must leave as it was: the registration
	// Secrets and the member identity, by resourceVersion.
	state := func(t *testing.T) map[string]string {
		t.Helper()
		out := cliMemberIdentityRVs(t, east.Client)
		list, err := secrets.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list.Items {
			out["hub Secret "+s.Name] = s.ResourceVersion
		}
		return out
	}
	assertUnchanged := func(t *testing.T, before map[string]string, name string) {
		t.Helper()
		if after := state(t); !cliEqualMaps(before, after) {
			t.Errorf("changed: before %v, after %v", before, after)
		}
		if _, err := secrets.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("secret %s was created (err %v)", name, err)
		}
	}
	localhost := strings.Replace(east.Host(), "https://127.0.0.1:", "https://localhost:", 1)
	if localhost == east.Host() {
		t.Fatalf("east is served at %s, not at 127.0.0.1", east.Host())
	}

	t.Run("dry-run of east under another name fails, naming east, and writes nothing", func(t *testing.T) {
		before := state(t)
		stdout, stderr, err := cli("register", "--name", "east2", "--dry-run")
		t.Logf("stderr:\n%s", stderr)
		if err == nil || !strings.Contains(err.Error(), `already registered as member "east" (secret endpoint-aggregator/east`) {
			t.Errorf("error %v, want east named", err)
		}
		for _, want := range []string{
			`check hub hub: cluster name "east2": ok`,
			"check member east: reachable, kube-system UID " + uid + ": ok",
			`not re-pointed: FAILED: `,
			"check member east: may apply the member identity: ok",
		} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q", want)
			}
		}
		if stdout != "" {
			t.Errorf("a dry run that would fail printed:\n%s", stdout)
		}
		assertUnchanged(t, before, "east2")
	})

	t.Run("east through https://localhost is refused by its kube-system UID", func(t *testing.T) {
		before := state(t)
		for _, dryRun := range []bool{true, false} {
			args := []string{"register", "--name", "east-lb", "--member-server", localhost}
			if dryRun {
				args = append(args, "--dry-run")
			}
			_, stderr, err := cli(args...)
			if err == nil || !strings.Contains(err.Error(), localhost+` is the cluster already registered as member "east"`) ||
				!strings.Contains(err.Error(), "both have kube-system UID "+uid) {
				t.Errorf("dry run %t: error %v, want the duplicate by kube-system UID\nstderr:\n%s", dryRun, err, stderr)
			}
		}
		assertUnchanged(t, before, "east-lb")
	})

	t.Run("dry-run re-pointing east at another cluster fails and asks for --force", func(t *testing.T) {
		before := state(t)
		// The hub plays the other cluster.
		stdout, stderr, err := cli("register", "--name", "east", "--dry-run", "--member-context", "hub")
		if err == nil || !strings.Contains(err.Error(), `member "east" is registered for another cluster (kube-system UID `+uid) ||
			!strings.Contains(err.Error(), "pass --force to re-point it") {
			t.Errorf("error %v, want the re-point refused\nstderr:\n%s", err, stderr)
		}
		if stdout != "" {
			t.Errorf("a dry run that would fail printed:\n%s", stdout)
		}
		assertUnchanged(t, before, "east2")
		if _, err := hub.Client.CoreV1().Namespaces().Get(ctx, cliMemberNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the dry run created the member namespace in the hub (err %v)", err)
		}
	})

	t.Run("a dry run that passes prints the Secret, with the UID", func(t *testing.T) {
		before := state(t)
		stdout, stderr, err := cli("register", "--name", "east", "--dry-run")
		if err != nil {
			t.Fatalf("%v\nstderr:\n%s", err, stderr)
		}
		var s corev1.Secret
		if err := yaml.UnmarshalStrict([]byte(stdout), &s); err != nil {
			t.Fatalf("dry-run output is not a Secret: %v\n%s", err, stdout)
		}
		if s.Name != "east" || s.Annotations[clusters.AnnotationKubeSystemUID] != uid {
			t.Errorf("dry-run Secret %s annotations %v", s.Name, s.Annotations)
		}
		for _, want := range []string{
			"member east: would apply clusterrole.rbac.authorization.k8s.io/endpoint-aggregator-member: unchanged",
			"hub hub: secret/east (namespace endpoint-aggregator) unchanged",
		} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr)
			}
		}
		if strings.Contains(stderr, "FAILED") || strings.Contains(stderr, "not run") {
			t.Errorf("stderr:\n%s", stderr)
		}
		assertUnchanged(t, before, "east2")
	})

	t.Run("--allow-duplicate registers east through localhost too", func(t *testing.T) {
		if stdout, stderr, err := cli("register", "--name", "east-lb", "--member-server", localhost, "--allow-duplicate"); err != nil {
			t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
		}
		s, err := secrets.Get(ctx, "east-lb", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Annotations[clusters.AnnotationKubeSystemUID]; got != uid {
			t.Errorf("east-lb records kube-system UID %q, want %q", got, uid)
		}
		// The kubeconfig really reaches east at the other URL.
		cfg, err := clusters.RESTConfig(s.Data[clusters.KubeconfigKey], clusters.KubeconfigPolicy{})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != localhost {
			t.Errorf("east-lb server %s, want %s", cfg.Host, localhost)
		}
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.CoreV1().Services(appNamespace).List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("east through %s: %v", localhost, err)
		}
	})
}
