package clusters

import (
	"context"
	"slices"
	"strings"
	stdsync "sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"k8s.io/client-go/tools/record"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	cpfake "sigs.k8s.io/cluster-inventory-api/client/clientset/versioned/fake"
)

const fleetNS = "fleet"

// providersFile lets ClusterProfiles propose arguments and environment
// (Append, Replace): the daemon must ignore them anyway.
const providersFile = `{"providers": [
  {"name": "token-plugin",
   "execConfig": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/plugins/token-plugin",
                  "args": ["--from-file"], "env": [{"name": "MODE", "value": "file"}], "provideClusterInfo": true},
   "profileSourcedCLIArgsPolicy": "Append",
   "profileSourcedEnvVarsPolicy": "Replace"},
  {"name": "other", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1", "command": "other-plugin"}}
]}`

func mustProviders(t *testing.T) *AccessProviders {
	t.Helper()
	a, err := ParseAccessProviders([]byte(providersFile))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func ext(name, raw string) clientcmdv1.NamedExtension {
	return clientcmdv1.NamedExtension{Name: name, Extension: runtime.RawExtension{Raw: []byte(raw)}}
}

// profile is a ClusterProfile offering the providers given, each for
// https://127.0.0.1:6443 with CA data "foo".
func profile(name string, age time.Duration, providers ...string) *cpv1alpha1.ClusterProfile {
	cp := &cpv1alpha1.ClusterProfile{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: fleetNS, Name: name, UID: k8stypes.UID("uid-cp-" + name), ResourceVersion: "1",
			CreationTimestamp: metav1.NewTime(time.Now().Add(-age)),
		},
		Spec: cpv1alpha1.ClusterProfileSpec{ClusterManager: cpv1alpha1.ClusterManager{Name: "fleet-manager"}},
	}
	for _, p := range providers {
		cp.Status.AccessProviders = append(cp.Status.AccessProviders, cpv1alpha1.AccessProvider{
			Name:    p,
			Cluster: clientcmdv1.Cluster{Server: "https://127.0.0.1:6443", CertificateAuthorityData: []byte("foo")},
		})
	}
	return cp
}

func TestParseAccessProvidersRejectsFilesThatCannotRunAPlugin(t *testing.T) {
	for name, tc := range map[string]struct{ file, want string }{
		"not JSON or YAML": {`{"providers": [`, "does not parse"},
		"misspelt key":     {`{"providers": [{"name": "a", "exec": {"command": "x"}}]}`, "does not parse"},
		"no providers":     {`{"providers": []}`, "no providers"},
		"no name":          {`{"providers": [{"execConfig": {"apiVersion": "client.authentication.k8s.io/v1", "command": "x"}}]}`, "has no name"},
		"no command":       {`{"providers": [{"name": "a", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1"}}]}`, "no execConfig.command"},
		"no apiVersion":    {`{"providers": [{"name": "a", "execConfig": {"command": "x"}}]}`, "no execConfig.apiVersion"},
		"listed twice": {`{"providers": [{"name": "a", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1", "command": "x"}},
		                                  {"name": "a", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1", "command": "y"}}]}`, "listed twice"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseAccessProviders([]byte(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want one saying %q", err, tc.want)
			}
		})
	}
	yamlFile := "providers:\n- name: a\n  execConfig:\n    apiVersion: client.authentication.k8s.io/v1\n    command: /plugins/a\n"
	if a, err := ParseAccessProviders([]byte(yamlFile)); err != nil || !slices.Equal(a.Names(), []string{"a"}) {
		t.Errorf("YAML file: %v, %v", a, err)
	}
}

// The ClusterProfile supplies where to connect; the file alone supplies what
// runs, whatever the ClusterProfile proposes and whatever policy the file
// names for its proposals.
func TestClusterProfileRESTConfigRunsOnlyTheFilesPluginWithTheFilesArguments(t *testing.T) {
	a := mustProviders(t)
	cp := profile("east", time.Hour, "unknown", "token-plugin")
	cp.Status.AccessProviders[1].Cluster.Extensions = []clientcmdv1.NamedExtension{
		ext("clusterprofiles.multicluster.x-k8s.io/exec/additional-args", `["--exfiltrate", "https://evil.example"]`),
		ext("clusterprofiles.multicluster.x-k8s.io/exec/additional-envs", `{"MODE": "evil", "LD_PRELOAD": "/tmp/x.so"}`),
		ext("client.authentication.k8s.io/exec", `{"audience": "east"}`),
	}
	cfg, err := a.RESTConfig(cp, KubeconfigPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || string(cfg.CAData) != "foo" {
		t.Errorf("host %q, CA %q: want the ClusterProfile's", cfg.Host, cfg.CAData)
	}
	e := cfg.ExecProvider
	if e == nil {
		t.Fatal("no exec provider")
	}
	if e.Command != "/plugins/token-plugin" || !slices.Equal(e.Args, []string{"--from-file"}) {
		t.Errorf("exec %q %q, want the file's command and arguments only", e.Command, e.Args)
	}
	if len(e.Env) != 1 || e.Env[0] != (clientcmdapi.ExecEnvVar{Name: "MODE", Value: "file"}) {
		t.Errorf("exec env %v, want the file's only", e.Env)
	}
	if e.InteractiveMode != clientcmdapi.NeverExecInteractiveMode {
		t.Errorf("interactive mode %q", e.InteractiveMode)
	}
	if e.PluginPolicy.PolicyType != clientcmdapi.PluginPolicyAllowlist || len(e.PluginPolicy.Allowlist) != 1 || e.PluginPolicy.Allowlist[0].Command != "/plugins/token-plugin" {
		t.Errorf("plugin policy %+v, want an allowlist of the file's command", e.PluginPolicy)
	}
	if u, ok := e.Config.(*runtime.Unknown); !ok || !strings.Contains(string(u.Raw), `"audience"`) {
		t.Errorf("exec cluster config %#v, want the ClusterProfile's client.authentication.k8s.io/exec extension", e.Config)
	}
	// Building twice must not accumulate anything in the shared provider.
	if cfg2, err := a.RESTConfig(cp, KubeconfigPolicy{}); err != nil || !slices.Equal(cfg2.ExecProvider.Args, e.Args) {
		t.Errorf("second build: %v, %v", cfg2.ExecProvider.Args, err)
	}
}

// File order is the operator's preference; accessProviders win over the
// deprecated credentialProviders of the same name.
func TestClusterProfileProviderChoice(t *testing.T) {
	a := mustProviders(t)
	cp := profile("east", time.Hour, "other", "token-plugin")
	cp.Status.CredentialProviders = []cpv1alpha1.AccessProvider{{Name: "token-plugin", Cluster: clientcmdv1.Cluster{Server: "https://old.example:6443"}}}
	cfg, err := a.RESTConfig(cp, KubeconfigPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ExecProvider.Command != "/plugins/token-plugin" || cfg.Host != "https://127.0.0.1:6443" {
		t.Errorf("chose %q for %q, want the file's first provider with the accessProviders entry", cfg.ExecProvider.Command, cfg.Host)
	}
	legacy := profile("west", time.Hour)
	legacy.Status.CredentialProviders = []cpv1alpha1.AccessProvider{{Name: "other", Cluster: clientcmdv1.Cluster{Server: "https://west.example:6443"}}}
	if cfg, err := a.RESTConfig(legacy, KubeconfigPolicy{}); err != nil || cfg.Host != "https://west.example:6443" {
		t.Errorf("credentialProviders only: %v, %v", cfg, err)
	}
}

// What a ClusterProfile says about the cluster obeys the policy a Secret's
// kubeconfig does.
func TestClusterProfileRESTConfigRefusesWhatTheKubeconfigPolicyRefuses(t *testing.T) {
	a := mustProviders(t)
	for name, tc := range map[string]struct {
		mutate  func(*clientcmdv1.Cluster)
		refused bool
		want    string
	}{
		"insecure":          {func(c *clientcmdv1.Cluster) { c.InsecureSkipTLSVerify = true; c.CertificateAuthorityData = nil }, true, "insecure-skip-tls-verify"},
		"proxy":             {func(c *clientcmdv1.Cluster) { c.ProxyURL = "http://proxy.example:3128" }, true, "proxy-url"},
		"CA file":           {func(c *clientcmdv1.Cluster) { c.CertificateAuthority = "/etc/hostname" }, true, "certificate-authority file path"},
		"no server":         {func(c *clientcmdv1.Cluster) { c.Server = "" }, false, "has no server"},
		"no known provider": {nil, false, "the ClusterProfile offers [unknown], the daemon knows [token-plugin other]"},
	} {
		t.Run(name, func(t *testing.T) {
			cp := profile("east", time.Hour, "token-plugin")
			if tc.mutate == nil {
				cp.Status.AccessProviders[0].Name = "unknown"
			} else {
				tc.mutate(&cp.Status.AccessProviders[0].Cluster)
			}
			_, err := a.RESTConfig(cp, KubeconfigPolicy{})
			if err == nil || !strings.Contains(err.Error(), tc.want) || isRefused(err) != tc.refused {
				t.Errorf("error = %v (refused %t), want one saying %q (refused %t)", err, isRefused(err), tc.want, tc.refused)
			}
		})
	}
}

func TestControlPlaneUnhealthy(t *testing.T) {
	for name, tc := range map[string]struct {
		conds []metav1.Condition
		want  string
	}{
		"no condition": {nil, ""},
		"true":         {[]metav1.Condition{{Type: "ControlPlaneHealthy", Status: metav1.ConditionTrue}}, ""},
		"unknown":      {[]metav1.Condition{{Type: "ControlPlaneHealthy", Status: metav1.ConditionUnknown}}, ""},
		"other false":  {[]metav1.Condition{{Type: "Joined", Status: metav1.ConditionFalse}}, ""},
		"false": {[]metav1.Condition{{Type: "ControlPlaneHealthy", Status: metav1.ConditionFalse, Reason: "APIServerDown", Message: "no answer for 5m"}},
			"the cluster manager reports ControlPlaneHealthy=False (APIServerDown): no answer for 5m"},
	} {
		t.Run(name, func(t *testing.T) {
			cp := profile("east", 0)
			cp.Status.Conditions = tc.conds
			if got := ControlPlaneUnhealthy(cp); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// profileRegistry is a registry watching ClusterProfiles in fleetNS
// besides Secrets, on fake hubs; cfgs records the configs it builds member
// clients from.
type profileRegistry struct {
	*Registry
	hub  *kubefake.Clientset
	cps  *cpfake.Clientset
	h    *recordingHandler
	rec  *record.FakeRecorder
	cfgs *configRecorder
}

func startProfileRegistry(t *testing.T, secrets []runtime.Object, profiles ...runtime.Object) *profileRegistry {
	t.Helper()
	p := &profileRegistry{cps: cpfake.NewSimpleClientset(profiles...), cfgs: &configRecorder{}}
	p.Registry, p.hub, p.h, p.rec = startRegistryWith(t, Options{
		SyncTimeout:   5 * time.Second,
		ProbeInterval: 10 * time.Millisecond,
		NewClients: func(cfg *rest.Config) (Clients, error) {
			p.cfgs.add(cfg)
			return Clients{Kube: kubefake.NewClientset()}, nil
		},
		ClusterProfiles: ClusterProfileOptions{Client: p.cps, Namespaces: []string{fleetNS}, Providers: mustProviders(t)},
	}, secrets...)
	return p
}

type configRecorder struct {
	mu   stdsync.Mutex
	cfgs []*rest.Config
}

func (c *configRecorder) add(cfg *rest.Config) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cfgs = append(c.cfgs, cfg)
}

func (c *configRecorder) last() *rest.Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfgs[len(c.cfgs)-1]
}

func TestRegistryRegistersAndWithdrawsMembersFromClusterProfiles(t *testing.T) {
	p := startProfileRegistry(t, nil, profile("east", time.Hour, "token-plugin"))
	r, cps, h, cfgs := p.Registry, p.cps, p.h, p.cfgs
	waitUntil(t, func() bool { c := r.Get("east"); return c != nil && c.HasSynced() })
	waitUntil(t, r.Ready)
	if c := r.Get("east"); c.secret != profileKeyPrefix+fleetNS+"/east" {
		t.Errorf("east registered by %q", c.secret)
	}
	if got := cfgs.last(); got.ExecProvider == nil || got.ExecProvider.Command != "/plugins/token-plugin" || got.Host != "https://127.0.0.1:6443" {
		t.Errorf("member client built from %+v", got)
	}

	// A condition change is not a new connection.
	before := r.Get("east")
	cp, _ := cps.ApisV1alpha1().ClusterProfiles(fleetNS).Get(context.Background(), "east", metav1.GetOptions{})
	cp.Status.Conditions = []metav1.Condition{{Type: "ControlPlaneHealthy", Status: metav1.ConditionTrue, Reason: "OK", LastTransitionTime: metav1.Now()}}
	cp.ResourceVersion = "2" // the fake API server does not bump it
	if _, err := cps.ApisV1alpha1().ClusterProfiles(fleetNS).UpdateStatus(context.Background(), cp, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if r.Get("east") != before {
		t.Error("a status condition change rebuilt the connection")
	}

	if err := cps.ApisV1alpha1().ClusterProfiles(fleetNS).Delete(context.Background(), "east", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { _, removed := h.snapshot(); return slices.Equal(removed, []string{"east"}) })
	if r.Get("east") != nil {
		t.Error("east still registered after its ClusterProfile was deleted")
	}
}

// ControlPlaneHealthy=False makes the member unreachable, whatever its probe
// says, and True again reachable: the unreachable machinery applies.
func TestRegistryCountsControlPlaneHealthyFalseAsUnreachable(t *testing.T) {
	p := startProfileRegistry(t, nil, profile("east", time.Hour, "token-plugin"))
	r, cps, h := p.Registry, p.cps, p.h
	waitUntil(t, func() bool { c := r.Get("east"); return c != nil && c.HasSynced() })
	setCondition := func(status metav1.ConditionStatus, rv string) {
		t.Helper()
		cp, _ := cps.ApisV1alpha1().ClusterProfiles(fleetNS).Get(context.Background(), "east", metav1.GetOptions{})
		cp.Status.Conditions = []metav1.Condition{{Type: "ControlPlaneHealthy", Status: status, Reason: "Probe", LastTransitionTime: metav1.Now()}}
		cp.ResourceVersion = rv
		if _, err := cps.ApisV1alpha1().ClusterProfiles(fleetNS).UpdateStatus(context.Background(), cp, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setCondition(metav1.ConditionFalse, "2")
	waitUntil(t, func() bool { _, down := r.Get("east").UnreachableSince(); return down })
	setCondition(metav1.ConditionTrue, "3")
	waitUntil(t, func() bool { _, down := r.Get("east").UnreachableSince(); return !down })
	_, _, health := h.calls()
	if !slices.Contains(health, "east=false") || health[len(health)-1] != "east=true" {
		t.Errorf("health callbacks %v, want east=false then east=true", health)
	}
}

// One name claimed by a Secret and a ClusterProfile: the older wins, in
// either order, and the other gets an Event. When the winner goes, the other
// takes the name.
func TestRegistrySecretAndClusterProfileClaimingOneNameOlderWins(t *testing.T) {
	for _, older := range []string{"Secret", "ClusterProfile"} {
		t.Run("older "+older, func(t *testing.T) {
			secretAge, profileAge := 2*time.Hour, time.Hour
			winner, loser, loserKind := ns+"/east-kubeconfig", profileKeyPrefix+fleetNS+"/east", "ClusterProfile"
			if older == "ClusterProfile" {
				secretAge, profileAge = profileAge, secretAge
				winner, loser, loserKind = loser, winner, "Secret"
			}
			p := startProfileRegistry(t,
				[]runtime.Object{secret("east-kubeconfig", "east", tokenKubeconfig, secretAge)},
				profile("east", profileAge, "token-plugin"))
			waitUntil(t, func() bool { c := p.Get("east"); return c != nil && c.HasSynced() })
			if got := p.Get("east").secret; got != winner {
				t.Fatalf("east registered by %q, want %q", got, winner)
			}
			waitUntil(t, func() bool { return len(p.rec.Events) > 0 })
			want := "cluster name \"east\" is already registered by the older " + older
			if got := strings.Join(events(p.rec), "\n"); !strings.Contains(got, ReasonDuplicateName) || !strings.Contains(got, want) || !strings.Contains(got, "this "+loserKind+" is ignored") {
				t.Errorf("events:\n%s\nwant %s: %s ... this %s is ignored", got, ReasonDuplicateName, want, loserKind)
			}

			var err error
			if older == "ClusterProfile" {
				err = p.cps.ApisV1alpha1().ClusterProfiles(fleetNS).Delete(context.Background(), "east", metav1.DeleteOptions{})
			} else {
				err = p.hub.CoreV1().Secrets(ns).Delete(context.Background(), "east-kubeconfig", metav1.DeleteOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
			waitUntil(t, func() bool { c := p.Get("east"); return c != nil && c.secret == loser && c.HasSynced() })
		})
	}
}
