package charts_test

import (
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
)

const cleanupName = fullname + "-cleanup"

// hookAnnotations are those of every object of the cleanup hook: created
// for helm uninstall, deleted once it succeeded (or before the next try).
func hookAnnotations(weight string) map[string]string {
	return map[string]string{
		"helm.sh/hook":               "pre-delete",
		"helm.sh/hook-weight":        weight,
		"helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded",
	}
}

// TestChartCleanupHookIsOffByDefault: without cleanup.onUninstall the chart
// renders no hook, and helm uninstall deletes only the release's objects.
func TestChartCleanupHookIsOffByDefault(t *testing.T) {
	for _, o := range render(t) {
		if strings.Contains(o.Name, "cleanup") || strings.Contains(string(o.raw), "helm.sh/hook") || o.Kind == "Job" {
			t.Errorf("defaults render %s %s", o.Kind, o.Name)
		}
	}
}

// TestChartCleanupHook renders cleanup.onUninstall=true and checks the hook:
// a pre-delete Job running `endpoint-aggregator cleanup` with flags the
// command accepts, hardened like the Deployment, with its own ServiceAccount
// and exactly the RBAC cleanup needs, all removed after the hook.
func TestChartCleanupHook(t *testing.T) {
	objs := render(t, "--set", "cleanup.onUninstall=true")
	got := map[string]object{}
	for _, o := range objs {
		if strings.Contains(string(o.raw), "helm.sh/hook") {
			got[o.Kind] = o
		}
	}
	if want := []string{"ClusterRole", "ClusterRoleBinding", "Job", "Role", "RoleBinding", "ServiceAccount"}; !slices.Equal(keys(got), want) {
		t.Fatalf("hook objects %v, want %v", keys(got), want)
	}
	meta := func(o object) (string, string, map[string]string) {
		var m metav1.PartialObjectMetadata
		if err := yaml.Unmarshal(o.raw, &m); err != nil {
			t.Fatal(err)
		}
		return m.Name, m.Namespace, m.Annotations
	}
	for kind, o := range got {
		name, ns, ann := meta(o)
		weight := "-10" // RBAC before the Job
		if kind == "Job" {
			weight = "0"
		}
		if name != cleanupName || !reflect.DeepEqual(ann, hookAnnotations(weight)) {
			t.Errorf("%s %s annotations %v, want name %s and %v", kind, name, ann, cleanupName, hookAnnotations(weight))
		}
		if clusterScoped := strings.HasPrefix(kind, "Cluster"); clusterScoped != (ns == "") || (!clusterScoped && ns != namespace) {
			t.Errorf("%s in namespace %q", kind, ns)
		}
	}

	var cr rbacv1.ClusterRole
	got["ClusterRole"].into(t, &cr)
	wantCR := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services", "endpoints"}, Verbs: []string{"list", "delete"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "delete"}},
		{APIGroups: []string{"multicluster.x-k8s.io"}, Resources: []string{"serviceimports"}, Verbs: []string{"list", "delete"}},
	}
	if !reflect.DeepEqual(cr.Rules, wantCR) {
		t.Errorf("ClusterRole rules:\n%s\nwant:\n%s", toYAML(t, cr.Rules), toYAML(t, wantCR))
	}
	var role rbacv1.Role
	got["Role"].into(t, &role)
	wantRole := []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"endpoint-aggregator-config"}, Verbs: []string{"get", "delete"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, ResourceNames: []string{fullname}, Verbs: []string{"get", "delete"}},
	}
	if !reflect.DeepEqual(role.Rules, wantRole) {
		t.Errorf("Role rules:\n%s\nwant:\n%s", toYAML(t, role.Rules), toYAML(t, wantRole))
	}
	var crb rbacv1.ClusterRoleBinding
	got["ClusterRoleBinding"].into(t, &crb)
	var rb rbacv1.RoleBinding
	got["RoleBinding"].into(t, &rb)
	for _, b := range []struct {
		ref      rbacv1.RoleRef
		subjects []rbacv1.Subject
		kind     string
	}{{crb.RoleRef, crb.Subjects, "ClusterRole"}, {rb.RoleRef, rb.Subjects, "Role"}} {
		wantSubjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: cleanupName, Namespace: namespace}}
		if b.ref != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: b.kind, Name: cleanupName}) || !reflect.DeepEqual(b.subjects, wantSubjects) {
			t.Errorf("%sBinding: roleRef %+v subjects %+v", b.kind, b.ref, b.subjects)
		}
	}

	var job batchv1.Job
	got["Job"].into(t, &job)
	pod := job.Spec.Template.Spec
	d := deployment(t, objs)
	if pod.ServiceAccountName != cleanupName || pod.RestartPolicy != corev1.RestartPolicyNever || len(pod.Containers) != 1 {
		t.Fatalf("Job pod: serviceAccount %q restartPolicy %q, %d containers", pod.ServiceAccountName, pod.RestartPolicy, len(pod.Containers))
	}
	c, daemon := pod.Containers[0], d.Spec.Template.Spec.Containers[0]
	if c.Image != daemon.Image || !reflect.DeepEqual(c.SecurityContext, daemon.SecurityContext) || !reflect.DeepEqual(pod.SecurityContext, d.Spec.Template.Spec.SecurityContext) {
		t.Errorf("Job container image %q securityContext %s pod %s: want the Deployment's", c.Image, toYAML(t, c.SecurityContext), toYAML(t, pod.SecurityContext))
	}
	if c.Resources.Limits.Memory().IsZero() {
		t.Errorf("Job container resources %+v: want a memory limit", c.Resources)
	}
	sel, err := labels.ValidatedSelectorFromSet(d.Spec.Selector.MatchLabels)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Matches(labels.Set(job.Spec.Template.Labels)) {
		t.Errorf("the hook pod's labels %v match the daemon's selector %v", job.Spec.Template.Labels, d.Spec.Selector.MatchLabels)
	}
	want := map[string]string{
		"in-cluster": "true", "namespace": namespace, "leader-election-id": fullname,
		"delete-deployment": d.Name, "wait": "3m0s", "dry-run": "false", "force": "false",
	}
	if got := cleanupFlags(t, c.Args); !reflect.DeepEqual(got, want) {
		t.Errorf("cleanup flags %v, want %v", got, want)
	}

	// Without leader election there is no leader Lease to wait for.
	objs = render(t, "--set", "cleanup.onUninstall=true", "--set", "leaderElection.enabled=false", "--set", "replicas=1", "--set", "cleanup.timeout=90s")
	for _, o := range objs {
		if o.Kind == "Job" {
			o.into(t, &job)
			f := cleanupFlags(t, job.Spec.Template.Spec.Containers[0].Args)
			if f["leader-election-id"] != "" || f["wait"] != "1m30s" {
				t.Errorf("leaderElection.enabled=false, cleanup.timeout=90s: flags %v", f)
			}
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "cleanup.onUninstall=true", "--set", "rbac.create=false", "--set", "serviceAccount.create=false", "--set", "serviceAccount.name=mine"}, "cleanup.onUninstall needs rbac.create"},
		{[]string{"--set", "cleanup.timeout=0s"}, "/cleanup/timeout"},
		{[]string{"--set", "cleanup.onUninstall=yes"}, "/cleanup/onUninstall"},
		{[]string{"--set", "cleanup.after=1"}, "'after' not allowed"},
	} {
		if _, err := testenv.HelmTemplateErr(t, chartDir, release, namespace, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("helm template %q: error %v, want one about %q", tc.args, err, tc.want)
		}
	}

	helm := testenv.RequireHelm(t)
	home := t.TempDir()
	cmd := exec.Command(helm, "lint", "--strict", chartDir, "--set", "cleanup.onUninstall=true")
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("helm lint --strict with cleanup.onUninstall: %v\n%s", err, out)
	}
}

// cleanupFlags parses args as `endpoint-aggregator cleanup` would and
// returns the flags they set.
func cleanupFlags(t *testing.T, args []string) map[string]string {
	t.Helper()
	cmd, _, err := app.NewCommand().Find([]string{"cleanup"})
	if err != nil || cmd.Name() != "cleanup" {
		t.Fatalf("no cleanup subcommand: %v", err)
	}
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatalf("the hook's args %q: %v", args, err)
	}
	if pos := cmd.Flags().Args(); !slices.Equal(pos, []string{"cleanup"}) {
		t.Fatalf("positional args %q, want [cleanup]", pos)
	}
	out := map[string]string{}
	for _, name := range []string{"in-cluster", "namespace", "leader-election-id", "delete-deployment", "wait", "dry-run", "force"} {
		out[name] = cmd.Flags().Lookup(name).Value.String()
	}
	return out
}
