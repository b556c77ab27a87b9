package charts_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
)

const (
	chartDir  = "endpoint-aggregator"
	release   = "endpoint-aggregator"
	namespace = "endpoint-aggregator"
	// fullname is the chart's name for its objects with release above.
	fullname = "endpoint-aggregator"
)

// The files `make chart-sync` copies from config/ into the chart.
var synced = map[string]string{
	"../config/crd/multicluster.x-k8s.io_serviceexports.yaml": chartDir + "/crds/multicluster.x-k8s.io_serviceexports.yaml",
	"../config/crd/multicluster.x-k8s.io_serviceimports.yaml": chartDir + "/crds/multicluster.x-k8s.io_serviceimports.yaml",
	"../config/rbac/hub-clusterrole.yaml":                     chartDir + "/files/rbac/hub-clusterrole.yaml",
	"../config/rbac/hub-writer-role.yaml":                     chartDir + "/files/rbac/hub-writer-role.yaml",
	"../config/rbac/hub-events-role.yaml":                     chartDir + "/files/rbac/hub-events-role.yaml",
	"../config/rbac/hub-role.yaml":                            chartDir + "/files/rbac/hub-role.yaml",
	"../config/rbac/hub-clusterprofile-role.yaml":             chartDir + "/files/rbac/hub-clusterprofile-role.yaml",
	"../config/rbac/member-clusterrole.yaml":                  chartDir + "/files/rbac/member-clusterrole.yaml",
	"../config/dashboards/endpoint-aggregator.json":           chartDir + "/files/dashboards/endpoint-aggregator.json",
}

// TestChartCopiesOfConfigAreUpToDate checks the chart's CRDs, RBAC files and dashboard
// are byte-for-byte the ones in config/ (config/config_test.go checks the
// CRDs against the mcs-api module), and that the chart holds no others.
func TestChartCopiesOfConfigAreUpToDate(t *testing.T) {
	for src, dst := range synced {
		want, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(dst)
		if err != nil {
			t.Errorf("%v: run `make chart-sync`", err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s: run `make chart-sync`", dst, src)
		}
	}
	configCRDs, _ := filepath.Glob("../config/crd/*.yaml")
	var wantCRDs []string
	for _, f := range configCRDs {
		if filepath.Base(f) != "kustomization.yaml" {
			wantCRDs = append(wantCRDs, filepath.Base(f))
		}
	}
	for dir, want := range map[string][]string{
		chartDir + "/crds":             wantCRDs,
		chartDir + "/files/rbac":       {"hub-clusterprofile-role.yaml", "hub-clusterrole.yaml", "hub-events-role.yaml", "hub-role.yaml", "hub-writer-role.yaml", "member-clusterrole.yaml"},
		chartDir + "/files/dashboards": {"endpoint-aggregator.json"},
	} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range entries {
			got = append(got, e.Name())
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s holds %v, want %v (config/ is the source: run `make chart-sync`)", dir, got, want)
		}
	}
}

// TestChartRendersTheRBACOfConfig renders the chart and checks that the
// ClusterRole and Role rules it grants are exactly those of config/rbac/
// (hub-clusterrole.yaml, hub-writer-role.yaml, hub-events-role.yaml,
// hub-role.yaml, member-clusterrole.yaml), bound to the chart's
// ServiceAccount, plus only the rules the values ask for; with
// includeNamespaces, the writes only in those namespaces.
func TestChartRendersTheRBACOfConfig(t *testing.T) {
	var hubCR, memberCR rbacv1.ClusterRole
	var hubRole, writerRole, eventsRole rbacv1.Role
	readYAML(t, "../config/rbac/hub-clusterrole.yaml", &hubCR)
	readYAML(t, "../config/rbac/hub-writer-role.yaml", &writerRole)
	readYAML(t, "../config/rbac/hub-events-role.yaml", &eventsRole)
	readYAML(t, "../config/rbac/hub-role.yaml", &hubRole)
	readYAML(t, "../config/rbac/member-clusterrole.yaml", &memberCR)
	createNamespaces := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"create"}}
	reviews := []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}
	metricsReader := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}
	// Every hub rule in one ClusterRole, as without includeNamespaces.
	clusterWide := concat(hubCR.Rules, writerRole.Rules, eventsRole.Rules)
	writes := concat(writerRole.Rules, eventsRole.Rules)
	memberReads, memberWrites := splitReads(memberCR.Rules)
	// A hub that is a member also has its Nodes' zones read, for "this
	// cluster first".
	hubNodes := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch"}}}
	own := namespace + "/" + fullname

	for _, tc := range []struct {
		name           string
		args           []string
		clusterRoles   map[string][]rbacv1.PolicyRule
		roles          map[string][]rbacv1.PolicyRule // by namespace/name
		serviceAccount bool
	}{{
		name:           "defaults",
		clusterRoles:   map[string][]rbacv1.PolicyRule{fullname: clusterWide},
		roles:          map[string][]rbacv1.PolicyRule{own: hubRole.Rules},
		serviceAccount: true,
	}, {
		name:           "createNamespaces adds create namespaces",
		args:           []string{"--set", "createNamespaces=true"},
		clusterRoles:   map[string][]rbacv1.PolicyRule{fullname: concat(clusterWide, []rbacv1.PolicyRule{createNamespaces})},
		roles:          map[string][]rbacv1.PolicyRule{own: hubRole.Rules},
		serviceAccount: true,
	}, {
		name: "hubIsMember binds the member rules too",
		args: []string{"--set", "hubIsMember=true"},
		clusterRoles: map[string][]rbacv1.PolicyRule{
			fullname:                 clusterWide,
			fullname + "-hub-member": concat(memberCR.Rules, hubNodes),
		},
		roles:          map[string][]rbacv1.PolicyRule{own: hubRole.Rules},
		serviceAccount: true,
	}, {
		name:         "includeNamespaces grants writes only there, Events also where the daemon records them",
		args:         []string{"--set-json", `includeNamespaces=["shop","shipping"]`},
		clusterRoles: map[string][]rbacv1.PolicyRule{fullname: hubCR.Rules},
		roles: map[string][]rbacv1.PolicyRule{
			own:                                    hubRole.Rules,
			"shop/" + fullname + "-writer":         writes,
			"shipping/" + fullname + "-writer":     writes,
			namespace + "/" + fullname + "-events": eventsRole.Rules,
			"default/" + fullname + "-events":      eventsRole.Rules,
		},
		serviceAccount: true,
	}, {
		name:         "includeNamespaces listing default and the release namespace",
		args:         []string{"--set-json", `includeNamespaces=["default","` + namespace + `"]`, "--set", "createNamespaces=true"},
		clusterRoles: map[string][]rbacv1.PolicyRule{fullname: concat(hubCR.Rules, []rbacv1.PolicyRule{createNamespaces})},
		roles: map[string][]rbacv1.PolicyRule{
			own:                                    hubRole.Rules,
			"default/" + fullname + "-writer":      writes,
			namespace + "/" + fullname + "-writer": writes,
		},
		serviceAccount: true,
	}, {
		name: "includeNamespaces with hubIsMember: the member rules' writes only there",
		args: []string{"--set-json", `includeNamespaces=["shop"]`, "--set", "hubIsMember=true"},
		clusterRoles: map[string][]rbacv1.PolicyRule{
			fullname:                 hubCR.Rules,
			fullname + "-hub-member": concat(memberReads, hubNodes),
		},
		roles: map[string][]rbacv1.PolicyRule{
			own:                                    hubRole.Rules,
			"shop/" + fullname + "-writer":         concat(writerRole.Rules, memberWrites, eventsRole.Rules),
			namespace + "/" + fullname + "-events": eventsRole.Rules,
			"default/" + fullname + "-events":      eventsRole.Rules,
		},
		serviceAccount: true,
	}, {
		name: "metrics.secure lets the daemon review tokens and access",
		args: []string{"--set", "metrics.secure=true"},
		clusterRoles: map[string][]rbacv1.PolicyRule{
			fullname:                     concat(clusterWide, reviews),
			fullname + "-metrics-reader": metricsReader,
		},
		roles:          map[string][]rbacv1.PolicyRule{own: hubRole.Rules},
		serviceAccount: true,
	}, {
		name: "rbac.create=false and an existing ServiceAccount",
		args: []string{"--set", "rbac.create=false", "--set", "serviceAccount.create=false", "--set", "serviceAccount.name=mine"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.args...)
			sa := fullname
			if !tc.serviceAccount {
				sa = "mine"
			}
			gotCR := map[string][]rbacv1.PolicyRule{}
			gotRoles := map[string][]rbacv1.PolicyRule{}
			var sas []string
			for _, o := range objs {
				switch o.Kind {
				case "ServiceAccount":
					sas = append(sas, o.Namespace+"/"+o.Name)
				case "ClusterRole":
					var cr rbacv1.ClusterRole
					o.into(t, &cr)
					gotCR[cr.Name] = cr.Rules
				case "Role":
					var r rbacv1.Role
					o.into(t, &r)
					gotRoles[r.Namespace+"/"+r.Name] = r.Rules
				case "ClusterRoleBinding":
					var b rbacv1.ClusterRoleBinding
					o.into(t, &b)
					checkBinding(t, b.Name, b.RoleRef, "ClusterRole", tc.clusterRoles, b.Subjects, sa)
				case "RoleBinding":
					var b rbacv1.RoleBinding
					o.into(t, &b)
					ref := b.RoleRef
					ref.Name = b.Namespace + "/" + ref.Name
					checkBinding(t, b.Namespace+"/"+b.Name, ref, "Role", tc.roles, b.Subjects, sa)
				}
			}
			if !slices.Equal(keys(gotCR), keys(tc.clusterRoles)) || !slices.Equal(keys(gotRoles), keys(tc.roles)) {
				t.Errorf("rendered ClusterRoles %v and Roles %v, want %v and %v", keys(gotCR), keys(gotRoles), keys(tc.clusterRoles), keys(tc.roles))
			}
			for name, want := range tc.clusterRoles {
				if !reflect.DeepEqual(gotCR[name], want) {
					t.Errorf("ClusterRole %s rules:\n%s\nwant:\n%s", name, toYAML(t, gotCR[name]), toYAML(t, want))
				}
			}
			for name, want := range tc.roles {
				if !reflect.DeepEqual(gotRoles[name], want) {
					t.Errorf("Role %s rules:\n%s\nwant:\n%s", name, toYAML(t, gotRoles[name]), toYAML(t, want))
				}
			}
			var wantSAs []string
			if tc.serviceAccount {
				wantSAs = []string{namespace + "/" + fullname}
			}
			if !slices.Equal(sas, wantSAs) {
				t.Errorf("rendered ServiceAccounts %v, want %v", sas, wantSAs)
			}
		})
	}
}

// TestChartGrantsNoClusterWideWritesWithIncludeNamespaces: with
// includeNamespaces (and the optional parts that add rules on), what the
// chart binds cluster-wide to the daemon only reads, except what has no
// namespace: creating Namespaces, TokenReviews and SubjectAccessReviews.
// Every other write is in a listed namespace, or is an Event.
func TestChartGrantsNoClusterWideWritesWithIncludeNamespaces(t *testing.T) {
	objs := render(t, "--set-json", `includeNamespaces=["shop","shipping"]`, "--set", "createNamespaces=true",
		"--set", "hubIsMember=true", "--set", "metrics.secure=true", "--set", "exportMode=serviceexport",
		"--set-json", `clusterProfiles={"namespaces":["fleet"],"providers":[{"name":"p","execConfig":{"apiVersion":"client.authentication.k8s.io/v1","command":"/p"}}]}`)
	clusterScoped := map[string]bool{"namespaces": true, "tokenreviews": true, "subjectaccessreviews": true}
	isRead := func(v string) bool { return slices.Contains([]string{"get", "list", "watch"}, v) }
	bound := map[string]bool{}
	for _, o := range objs {
		if o.Kind == "ClusterRoleBinding" {
			var b rbacv1.ClusterRoleBinding
			o.into(t, &b)
			if slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool { return s.Name == fullname && s.Namespace == namespace }) {
				bound[b.RoleRef.Name] = true
			}
		}
	}
	if len(bound) == 0 {
		t.Fatal("no ClusterRole bound to the daemon")
	}
	writerNamespaces := map[string]bool{}
	for _, o := range objs {
		switch o.Kind {
		case "ClusterRole":
			var cr rbacv1.ClusterRole
			o.into(t, &cr)
			if !bound[cr.Name] {
				continue
			}
			for _, r := range cr.Rules {
				for _, v := range r.Verbs {
					if !isRead(v) && (v != "create" || len(r.Resources) != 1 || !clusterScoped[r.Resources[0]]) {
						t.Errorf("ClusterRole %s grants %s on %v cluster-wide", cr.Name, v, r.Resources)
					}
				}
			}
		case "Role":
			var r rbacv1.Role
			o.into(t, &r)
			for _, rule := range r.Rules {
				if !slices.ContainsFunc(rule.Verbs, func(v string) bool { return !isRead(v) }) || slices.Equal(rule.Resources, []string{"events"}) {
					continue
				}
				switch {
				case r.Namespace == namespace && r.Name == fullname:
					// hub-role.yaml: the Leases in the release namespace.
				case r.Namespace == "shop" || r.Namespace == "shipping":
					writerNamespaces[r.Namespace] = true
				default:
					t.Errorf("Role %s/%s grants %v on %v outside includeNamespaces", r.Namespace, r.Name, rule.Verbs, rule.Resources)
				}
			}
		}
	}
	if !writerNamespaces["shop"] || !writerNamespaces["shipping"] {
		t.Errorf("write Roles in %v, want in shop and shipping", keys(writerNamespaces))
	}
}

func checkBinding(t *testing.T, name string, ref rbacv1.RoleRef, kind string, roles map[string][]rbacv1.PolicyRule, subjects []rbacv1.Subject, sa string) {
	t.Helper()
	if _, ok := roles[ref.Name]; !ok || ref.Kind != kind || ref.APIGroup != rbacv1.GroupName {
		t.Errorf("%sBinding %s refers to %+v, not a %s the chart renders", kind, name, ref, kind)
	}
	want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: namespace}}
	if !reflect.DeepEqual(subjects, want) {
		t.Errorf("%sBinding %s subjects %+v, want %+v", kind, name, subjects, want)
	}
}

func concat(rules ...[]rbacv1.PolicyRule) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, r := range rules {
		out = append(out, r...)
	}
	return out
}

// splitReads cuts each rule into its read verbs (get, list, watch) and the
// others, as the chart's rbacRulesOfVerbs does.
func splitReads(rules []rbacv1.PolicyRule) (reads, writes []rbacv1.PolicyRule) {
	for _, r := range rules {
		var rv, wv []string
		for _, v := range r.Verbs {
			if slices.Contains([]string{"get", "list", "watch"}, v) {
				rv = append(rv, v)
			} else {
				wv = append(wv, v)
			}
		}
		if len(rv) > 0 {
			c := *r.DeepCopy()
			c.Verbs = rv
			reads = append(reads, c)
		}
		if len(wv) > 0 {
			c := *r.DeepCopy()
			c.Verbs = wv
			writes = append(writes, c)
		}
	}
	return reads, writes
}

// TestChartDefaultsAreTheDaemonDefaults parses the Deployment's arguments
// with the flags of `endpoint-aggregator run`: every flag the chart passes
// exists, and with default values each has the daemon's default, so the
// chart and the binary cannot drift apart silently.
func TestChartDefaultsAreTheDaemonDefaults(t *testing.T) {
	c := daemonContainer(t, render(t))
	run := runCommand(t)
	if err := run.ParseFlags(c.Args); err != nil {
		t.Fatalf("the chart's args %q do not parse as `endpoint-aggregator run` flags: %v", c.Args, err)
	}
	if args := run.Flags().Args(); !slices.Equal(args, []string{"run"}) {
		t.Errorf("positional args %q, want [run]", args)
	}
	set := 0
	run.Flags().Visit(func(f *pflag.Flag) {
		set++
		if f.Value.String() != f.DefValue {
			t.Errorf("--%s=%s by default in the chart, but the daemon's default is %s", f.Name, f.Value.String(), f.DefValue)
		}
	})
	if set < 10 {
		t.Errorf("the chart sets only %d flags: %q", set, c.Args)
	}
}

// TestChartPassesValuesAsFlags renders non-default values and checks the
// flags the daemon would see.
func TestChartPassesValuesAsFlags(t *testing.T) {
	c := daemonContainer(t, render(t,
		"--set", "exportMode=all",
		"--set", "perClusterServices=headless",
		"--set", "createNamespaces=true",
		"--set", "workers=7",
		"--set-json", `includeNamespaces=["shop","shipping"]`,
		"--set-json", `excludeNamespaces=[]`,
		"--set-json", `endpointAddresses={"deniedCIDRs":["10.250.0.0/16"],"allowedCIDRs":["10.0.0.0/8","fd00::/8"],"hubServiceCIDRs":["10.96.0.0/12"]}`,
		"--set", "memberBounds.maxServices=50",
		"--set", "memberBounds.maxEndpoints=0",
		"--set", "writeExportStatus=false",
		"--set", "hubIsMember=true",
		"--set", "hubClusterName=central",
		"--set", "memberSyncTimeout=1m30s",
		"--set", "memberHealth.probeInterval=2s",
		"--set", "memberHealth.probeTimeout=3s",
		"--set", "memberHealth.leaseDuration=0s",
		"--set", "unreachable.grace=45s",
		"--set", "unreachable.withdraw=10m",
		"--set", "replicas=1",
		"--set", "leaderElection.enabled=false",
		"--set", "metrics.port=9090",
		"--set", "logVerbosity=3",
		"--set-json", `extraArgs=["--kube-api-qps=80"]`,
	))
	checkFlags(t, c.Args, map[string]string{
		"export-mode":            "all",
		"per-cluster-services":   "headless",
		"create-namespaces":      "true",
		"workers":                "7",
		"include-namespaces":     "[shop,shipping]",
		"exclude-namespaces":     "[]",
		"denied-endpoint-cidrs":  "[10.250.0.0/16]",
		"allowed-endpoint-cidrs": "[10.0.0.0/8,fd00::/8]",
		"hub-service-cidrs":      "[10.96.0.0/12]",
		"max-member-services":    "50",
		"max-member-endpoints":   "0",
		"write-export-status":    "false",
		"hub-is-member":          "true",
		"hub-cluster-name":       "central",
		"member-sync-timeout":    "1m30s",
		"member-probe-interval":  "2s",
		"member-probe-timeout":   "3s",
		"member-lease-duration":  "0s",
		"unreachable-grace":      "45s",
		"unreachable-withdraw":   "10m0s",
		"leader-elect":           "false",
		"metrics-bind-address":   ":9090",
		"v":                      "3",
		"kube-api-qps":           "80",
	})
	if c.Ports[0].ContainerPort != 9090 || c.LivenessProbe.HTTPGet.Port.String() != "metrics" {
		t.Errorf("metrics port %+v, liveness probe port %v", c.Ports, c.LivenessProbe.HTTPGet.Port)
	}
}

// TestChartPassesLeaseTimingsAndHubClientLimits: the values that were
// reachable only through extraArgs.
func TestChartPassesLeaseTimingsAndHubClientLimits(t *testing.T) {
	c := daemonContainer(t, render(t,
		"--set", "leaderElection.leaseDuration=30s",
		"--set", "leaderElection.renewDeadline=20s",
		"--set", "leaderElection.retryPeriod=4s",
		"--set", "hubClient.qps=200",
		"--set", "hubClient.burst=400",
		"--set", "memberLeaseClient.qps=300",
		"--set", "memberLeaseClient.burst=600",
	))
	checkFlags(t, c.Args, map[string]string{
		"leader-elect-lease-duration": "30s",
		"leader-elect-renew-deadline": "20s",
		"leader-elect-retry-period":   "4s",
		"kube-api-qps":                "200",
		"kube-api-burst":              "400",
		"member-lease-qps":            "300",
		"member-lease-burst":          "600",
	})
}

// checkFlags parses args as `endpoint-aggregator run` flags and checks the
// values of those in want.
func checkFlags(t *testing.T, args []string, want map[string]string) {
	t.Helper()
	run := runCommand(t)
	if err := run.ParseFlags(args); err != nil {
		t.Fatalf("args %q: %v", args, err)
	}
	for flag, w := range want {
		f := run.Flags().Lookup(flag)
		if f == nil {
			t.Errorf("no flag --%s", flag)
			continue
		}
		if got := f.Value.String(); got != w {
			t.Errorf("--%s=%s, want %s", flag, got, w)
		}
	}
}

// TestChartDeploymentIsHardened checks the Deployment's pod against what
// DESIGN §6 asks: leader-elected replicas, downward-API namespace, probes on
// the metrics port and a locked-down security context.
func TestChartDeploymentIsHardened(t *testing.T) {
	objs := render(t)
	d := deployment(t, objs)
	if d.Namespace != namespace || d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("Deployment %s/%s replicas %v, want 2 in %s", d.Namespace, d.Name, d.Spec.Replicas, namespace)
	}
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != fullname || pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
		t.Errorf("serviceAccountName %q automount %v", pod.ServiceAccountName, pod.AutomountServiceAccountToken)
	}
	c := daemonContainer(t, objs)
	if !slices.Contains(c.Args, "--leader-elect=true") || !slices.Contains(c.Args, "--leader-election-id="+fullname) {
		t.Errorf("args %q: want leader election on, Lease %s", c.Args, fullname)
	}
	if len(c.Env) == 0 || c.Env[0].Name != "POD_NAMESPACE" || c.Env[0].ValueFrom == nil ||
		c.Env[0].ValueFrom.FieldRef == nil || c.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("env %+v: want POD_NAMESPACE from metadata.namespace", c.Env)
	}
	if i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "GOMEMLIMIT" }); i < 0 ||
		c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.ResourceFieldRef == nil || c.Env[i].ValueFrom.ResourceFieldRef.Resource != "limits.memory" {
		t.Errorf("env %+v: want GOMEMLIMIT from limits.memory", c.Env)
	}
	for name, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != name || p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("probe %s: %+v", name, p)
		}
	}
	// Until it is first ready, /readyz is probed every second: a new pod is
	// Ready within a second of syncing, not a readiness period later.
	if p := c.StartupProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.PeriodSeconds != 1 {
		t.Errorf("startupProbe %+v: want /readyz every second", p)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("ports %+v", c.Ports)
	}
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("no container securityContext")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot,
		sc.RunAsUser == nil || *sc.RunAsUser != 65532,
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem,
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation,
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0,
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("container securityContext %s", toYAML(t, sc))
	}
	if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %s", toYAML(t, psc))
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want memory requests and limits", c.Resources)
	}

	kinds := func(objs []object) map[string]int {
		n := map[string]int{}
		for _, o := range objs {
			n[o.Kind]++
		}
		return n
	}
	if k := kinds(objs); k["PodDisruptionBudget"] != 1 || k["ServiceMonitor"] != 0 || k["Service"] != 1 {
		t.Errorf("defaults render %v: want one PodDisruptionBudget and metrics Service, no ServiceMonitor", k)
	}
	if k := kinds(render(t, "--set", "replicas=1", "--set", "serviceMonitor.enabled=true")); k["PodDisruptionBudget"] != 0 || k["ServiceMonitor"] != 1 {
		t.Errorf("replicas=1 with a ServiceMonitor renders %v: want no PodDisruptionBudget, one ServiceMonitor", k)
	}
}

// TestChartRefusesBadValues checks the schema and the templates reject
// values the daemon would refuse, or that would run it unsafely.
func TestChartRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in helm's error
	}{
		{[]string{"--set", "exportMode=everything"}, "/exportMode"},
		{[]string{"--set", "perClusterServices=clusterip"}, "/perClusterServices"},
		{[]string{"--set", "workers=0"}, "/workers"},
		{[]string{"--set", "replicas=two"}, "/replicas"},
		{[]string{"--set", "createNamespaces=yes"}, "/createNamespaces"},
		{[]string{"--set", "noSuchValue=1"}, "'noSuchValue' not allowed"},
		{[]string{"--set", "image.noSuchValue=1"}, "'noSuchValue' not allowed"},
		{[]string{"--set-json", `includeNamespaces=["Not_A_Namespace"]`}, "/includeNamespaces/0"},
		{[]string{"--set", "memberSyncTimeout=soon"}, "/memberSyncTimeout"},
		{[]string{"--set", "memberHealth.probeInterval=0s"}, "/memberHealth/probeInterval"},
		{[]string{"--set", "memberHealth.probeTimeout=0m0s"}, "/memberHealth/probeTimeout"},
		{[]string{"--set", "memberHealth=null"}, "memberHealth"},
		{[]string{"--set", "leaderElection.enabled=false"}, "replicas > 1 needs leaderElection.enabled"},
		{[]string{"--set", "serviceAccount.create=false"}, "serviceAccount.name is required"},
		{[]string{"--set", "metrics.secure=on"}, "/metrics/secure"},
		{[]string{"--set-json", `metrics.readers=[{"name":"prometheus"}]`}, "namespace"},
		{[]string{"--set", "networkPolicy.enabled=yes"}, "/networkPolicy/enabled"},
	} {
		_, err := testenv.HelmTemplateErr(t, chartDir, release, namespace, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("helm template %q: error %v, want one about %q", tc.args, err, tc.want)
		}
	}
}

// TestChartLints runs `helm lint --strict` (values against the schema,
// templates rendered) with the default and with every optional part on.
func TestChartLints(t *testing.T) {
	helm := testenv.RequireHelm(t)
	for _, args := range [][]string{nil, {"--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true", "--set", "dashboards.enabled=true", "--set", "createNamespaces=true", "--set", "hubIsMember=true", "--set", "replicas=1"},
		{"--set-json", `includeNamespaces=["shop"]`, "--set", "metrics.secure=true", "--set", "metrics.certSecret=tls", "--set", "serviceMonitor.enabled=true",
			"--set", "networkPolicy.enabled=true", "--set-json", `networkPolicy.metricsFrom=[{"podSelector":{}}]`, "--set-json", `networkPolicy.egressTo=[{"ipBlock":{"cidr":"0.0.0.0/0"}}]`}} {
		home := t.TempDir()
		cmd := exec.Command(helm, append([]string{"lint", "--strict", chartDir}, args...)...)
		cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("helm lint --strict %q: %v\n%s", args, err, out)
		}
	}
}

// object is one rendered manifest.
type object struct {
	Kind            string
	Name, Namespace string
	raw             []byte
}

func (o object) into(t *testing.T, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(o.raw, v); err != nil {
		t.Fatalf("%s %s: %v", o.Kind, o.Name, err)
	}
}

// render runs helm template on the chart and splits the output.
func render(t *testing.T, args ...string) []object {
	t.Helper()
	out := testenv.HelmTemplate(t, chartDir, release, namespace, args...)
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	var objs []object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) == 0 || strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var m struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("rendered manifest does not parse: %v\n%s", err, doc)
		}
		objs = append(objs, object{Kind: m.Kind, Name: m.Metadata.Name, Namespace: m.Metadata.Namespace, raw: doc})
	}
	return objs
}

func stripComments(doc []byte) string {
	var b strings.Builder
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func deployment(t *testing.T, objs []object) *appsv1.Deployment {
	t.Helper()
	for _, o := range objs {
		if o.Kind == "Deployment" {
			var d appsv1.Deployment
			o.into(t, &d)
			return &d
		}
	}
	t.Fatal("no Deployment rendered")
	return nil
}

func daemonContainer(t *testing.T, objs []object) corev1.Container {
	t.Helper()
	cs := deployment(t, objs).Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("%d containers, want 1", len(cs))
	}
	return cs[0]
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func toYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// runCommand returns a fresh `endpoint-aggregator run` command, whose flags
// the tests parse the chart's arguments with.
func runCommand(t *testing.T) *cobra.Command {
	t.Helper()
	run, _, err := app.NewCommand().Find([]string{"run"})
	if err != nil || run.Name() != "run" {
		t.Fatalf("no run subcommand: %v", err)
	}
	return run
}
