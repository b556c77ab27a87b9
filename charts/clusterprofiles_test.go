package charts_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
)

// TestChartClusterProfiles renders clusterProfiles: the flags, an
// access-provider file the daemon parses, mounted where the flag points,
// and in each namespace a Role with the rules of
// config/rbac/hub-clusterprofile-role.yaml bound to the ServiceAccount.
func TestChartClusterProfiles(t *testing.T) {
	objs := render(t,
		"--set-json", `clusterProfiles.namespaces=["fleet","fleet-b"]`,
		"--set", "clusterProfiles.clusterManager=ocm",
		"--set-json", `clusterProfiles.providers=[{"name":"token-plugin","execConfig":{"apiVersion":"client.authentication.k8s.io/v1","command":"/plugins/token-plugin"}}]`,
		"--set-json", `clusterProfiles.volumes=[{"name":"plugins","emptyDir":{}}]`,
		"--set-json", `clusterProfiles.volumeMounts=[{"name":"plugins","mountPath":"/plugins","readOnly":true}]`,
	)
	run := runCommand(t)
	c := daemonContainer(t, objs)
	if err := run.ParseFlags(c.Args); err != nil {
		t.Fatalf("args %q: %v", c.Args, err)
	}
	file := run.Flags().Lookup("access-provider-file").Value.String()
	for flag, want := range map[string]string{
		"cluster-profile-namespaces": "[fleet,fleet-b]",
		"cluster-manager":            "ocm",
		"access-provider-file":       "/etc/endpoint-aggregator/access-providers/providers.json",
	} {
		if got := run.Flags().Lookup(flag).Value.String(); got != want {
			t.Errorf("--%s=%s, want %s", flag, got, want)
		}
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	if !strings.HasPrefix(file, mounts["access-providers"]+"/") || mounts["plugins"] != "/plugins" {
		t.Errorf("mounts %v, want access-providers holding %s and the plugins volume", mounts, file)
	}
	volumes := deployment(t, objs).Spec.Template.Spec.Volumes
	if len(volumes) != 2 || volumes[0].ConfigMap == nil || volumes[0].ConfigMap.Name != fullname+"-access-providers" || volumes[1].Name != "plugins" {
		t.Errorf("volumes %+v", volumes)
	}

	var role rbacv1.Role
	readYAML(t, "../config/rbac/hub-clusterprofile-role.yaml", &role)
	var roleNamespaces, bindingNamespaces []string
	for _, o := range objs {
		if o.Namespace == namespace && o.Kind != "ConfigMap" {
			continue // the release namespace's RBAC: TestChartRendersTheRBACOfConfig
		}
		switch o.Kind {
		case "ConfigMap":
			var cm corev1.ConfigMap
			o.into(t, &cm)
			a, err := clusters.ParseAccessProviders([]byte(cm.Data["providers.json"]))
			if err != nil || !slices.Equal(a.Names(), []string{"token-plugin"}) || cm.Namespace != namespace {
				t.Errorf("ConfigMap %s/%s: %v, %v", cm.Namespace, cm.Name, a, err)
			}
		case "Role":
			var r rbacv1.Role
			o.into(t, &r)
			roleNamespaces = append(roleNamespaces, r.Namespace)
			if !reflect.DeepEqual(r.Rules, role.Rules) {
				t.Errorf("Role %s/%s rules:\n%s\nwant:\n%s", r.Namespace, r.Name, toYAML(t, r.Rules), toYAML(t, role.Rules))
			}
		case "RoleBinding":
			var b rbacv1.RoleBinding
			o.into(t, &b)
			bindingNamespaces = append(bindingNamespaces, b.Namespace)
			checkBinding(t, b.Name, b.RoleRef, "Role", map[string][]rbacv1.PolicyRule{fullname + "-clusterprofiles": role.Rules}, b.Subjects, fullname)
		}
	}
	want := []string{"fleet", "fleet-b"}
	if !slices.Equal(roleNamespaces, want) || !slices.Equal(bindingNamespaces, want) {
		t.Errorf("Roles in %v and RoleBindings in %v, want both in %v", roleNamespaces, bindingNamespaces, want)
	}

	// Namespaces without providers: nothing could connect.
	_, err := testenv.HelmTemplateErr(t, chartDir, release, namespace, "--set-json", `clusterProfiles.namespaces=["fleet"]`)
	if err == nil || !strings.Contains(err.Error(), "clusterProfiles.namespaces needs clusterProfiles.providers") {
		t.Errorf("namespaces without providers: %v", err)
	}
}
