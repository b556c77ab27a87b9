package app

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// TestMemberIdentityIsConfigRBAC checks that register applies exactly what
// config/rbac/kustomization.yaml lists, in an order the apiserver accepts.
func TestMemberIdentityIsConfigRBAC(t *testing.T) {
	id, err := loadMemberIdentity(false)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range id.objects {
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	want := []string{
		"Namespace/endpoint-aggregator-member",
		"ClusterRole/endpoint-aggregator-member",
		"ServiceAccount/endpoint-aggregator-member",
		"Secret/endpoint-aggregator-member-token",
		"ClusterRoleBinding/endpoint-aggregator-member",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("objects %v, want %v", got, want)
	}
	if id.namespace() != "endpoint-aggregator-member" || id.username() != "system:serviceaccount:endpoint-aggregator-member:endpoint-aggregator-member" {
		t.Errorf("namespace %q user %q", id.namespace(), id.username())
	}

	// The ClusterRole is the file's, rule for rule.
	var fromFile rbacv1.ClusterRole
	data, err := os.ReadFile("../../../config/rbac/member-clusterrole.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &fromFile); err != nil {
		t.Fatal(err)
	}
	if role := identityClusterRole(t, id); !reflect.DeepEqual(role.Rules, fromFile.Rules) {
		t.Errorf("ClusterRole rules %+v, want the file's %+v", role.Rules, fromFile.Rules)
	}
}

func TestMemberIdentityReadOnly(t *testing.T) {
	id, err := loadMemberIdentity(true)
	if err != nil {
		t.Fatal(err)
	}
	role := identityClusterRole(t, id)
	if len(role.Rules) == 0 {
		t.Fatal("no rules left")
	}
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			if strings.Contains(res, "/") {
				t.Errorf("read-only role keeps subresource %s", res)
			}
		}
		for _, v := range r.Verbs {
			if v != "get" && v != "list" && v != "watch" {
				t.Errorf("read-only role keeps verb %s on %v", v, r.Resources)
			}
		}
	}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"multicluster.x-k8s.io"}, Resources: []string{"serviceexports"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"about.k8s.io"}, Resources: []string{"clusterproperties"}, Verbs: []string{"list"}},
	}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("read-only rules %+v", role.Rules)
	}
	// A rule mixing verbs keeps its read verbs.
	mixed := fstest.MapFS{
		"kustomization.yaml": {Data: []byte("resources: [all.yaml]\n")},
		"all.yaml":           {Data: []byte(minimalIdentity + mixedRole)},
	}
	id, err = parseMemberIdentity(mixed, true)
	if err != nil {
		t.Fatal(err)
	}
	if r := identityClusterRole(t, id).Rules; len(r) != 1 || !reflect.DeepEqual(r[0].Verbs, []string{"get", "watch"}) {
		t.Errorf("mixed rule after read-only: %+v", r)
	}
}

const minimalIdentity = `
apiVersion: v1
kind: ServiceAccount
metadata: {name: sa, namespace: ns}
---
# only a comment
---
apiVersion: v1
kind: Secret
type: kubernetes.io/service-account-token
metadata:
  name: sa-token
  namespace: ns
  annotations: {kubernetes.io/service-account.name: sa}
`

const mixedRole = `
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: r}
rules:
  - apiGroups: [""]
    resources: ["services"]
    verbs: ["get", "create", "watch", "delete"]
`

func TestParseMemberIdentityRejects(t *testing.T) {
	for _, tc := range []struct {
		name, manifests, wantErr string
	}{
		{"unknown kind", minimalIdentity + "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: ns}\n", "unsupported kind Deployment"},
		{"wrong apiVersion", minimalIdentity + "---\napiVersion: rbac.authorization.k8s.io/v1beta1\nkind: ClusterRole\nmetadata: {name: r}\n", "apiVersion"},
		{"namespaced kind without namespace", minimalIdentity + "---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: other}\n", "namespace"},
		{"no token Secret", "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: sa, namespace: ns}\n", "no ServiceAccount or no service-account-token Secret"},
		{"token for another ServiceAccount", strings.Replace(minimalIdentity, "service-account.name: sa}", "service-account.name: x}", 1), "is not for ServiceAccount"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fstest.MapFS{
				"kustomization.yaml": {Data: []byte("resources: [all.yaml]\n")},
				"all.yaml":           {Data: []byte(tc.manifests)},
			}
			_, err := parseMemberIdentity(fsys, false)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
	if _, err := parseMemberIdentity(fstest.MapFS{"kustomization.yaml": {Data: []byte("resources: [missing.yaml]\n")}}, false); err == nil {
		t.Error("a missing resource file is not an error")
	}
}

func identityClusterRole(t *testing.T, id *memberIdentity) *rbacv1.ClusterRole {
	t.Helper()
	for _, o := range id.objects {
		if o.GetKind() == "ClusterRole" {
			var role rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
				t.Fatal(err)
			}
			return &role
		}
	}
	t.Fatal("no ClusterRole")
	return nil
}
