package daemonconfig

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/endpoint-aggregator/endpoint-aggregator/config"
)

// The hub Role (config/rbac, rendered by the chart) lets the daemon create
// the ConfigMap, and get and update it by its name.
func TestHubRoleAllowsPublishing(t *testing.T) {
	data, err := config.RBAC.ReadFile("rbac/hub-role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.Role
	if err := yaml.Unmarshal(data, &role); err != nil {
		t.Fatal(err)
	}
	allowed := func(verb string) bool {
		return slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
			return slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, "configmaps") && slices.Contains(r.Verbs, verb) &&
				(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, Name))
		})
	}
	for _, verb := range []string{"get", "create", "update"} {
		if !allowed(verb) {
			t.Errorf("config/rbac/hub-role.yaml does not allow %s on ConfigMap %s", verb, Name)
		}
	}
}
