package clusters

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdlatest "k8s.io/client-go/tools/clientcmd/api/latest"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	cpclientset "sigs.k8s.io/cluster-inventory-api/client/clientset/versioned"
	"sigs.k8s.io/cluster-inventory-api/pkg/access"
	"sigs.k8s.io/yaml"
)

// ClusterProfileOptions turn on members from ClusterProfiles
// (multicluster.x-k8s.io/v1alpha1, KEP-4322), beside registration Secrets.
type ClusterProfileOptions struct {
	// Client reads ClusterProfiles in the hub.
	Client cpclientset.Interface
	// Namespaces are watched for ClusterProfiles; none turns them off.
	Namespaces []string
	// ClusterManager, if set, keeps only the ClusterProfiles labelled
	// x-k8s.io/cluster-manager=<ClusterManager>.
	ClusterManager string
	// Providers is the operator's access-provider file: the only source of
	// the credential plugin commands.
	Providers *AccessProviders
}

func (o ClusterProfileOptions) enabled() bool { return len(o.Namespaces) > 0 }

// Event reasons on ClusterProfiles besides those on Secrets.
const (
	// ReasonNoAccessProvider: none of the ClusterProfile's access providers
	// is in the daemon's access-provider file.
	ReasonNoAccessProvider = "NoAccessProvider"
	// ReasonInvalidAccessProvider: the chosen access provider's cluster
	// cannot be used.
	ReasonInvalidAccessProvider = "InvalidAccessProvider"
)

// profileKeyPrefix starts the registry's queue key of a ClusterProfile,
// "ClusterProfile:<namespace>/<name>". Secret keys are "<namespace>/<name>",
// and a namespace name has neither capitals nor colons.
const profileKeyPrefix = "ClusterProfile:"

// AccessProviders is the access-provider file the operator mounts, in the
// format of sigs.k8s.io/cluster-inventory-api/pkg/access (JSON, or YAML):
//
//	{"providers": [{"name": "token-plugin",
//	  "execConfig": {"apiVersion": "client.authentication.k8s.io/v1",
//	                 "command": "/plugins/token-plugin", "args": ["--flag"]}}]}
//
// A ClusterProfile names a provider in status.accessProviders[].name and
// supplies only the cluster to connect to (server, CA data). The command,
// its arguments and environment come from this file alone: the
// profileSourcedCLIArgsPolicy and profileSourcedEnvVarsPolicy of the format
// are forced to Ignore, and client-go may run no other command (its plugin
// allowlist holds the provider's command).
type AccessProviders struct {
	providers []access.Provider
}

// LoadAccessProviders reads and checks an access-provider file.
func LoadAccessProviders(path string) (*AccessProviders, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("access-provider file: %w", err)
	}
	a, err := ParseAccessProviders(data)
	if err != nil {
		return nil, fmt.Errorf("access-provider file %s: %w", path, err)
	}
	return a, nil
}

// ParseAccessProviders parses the content of an access-provider file. Unknown
// fields are errors, so a misspelt key does not pass silently.
func ParseAccessProviders(data []byte) (*AccessProviders, error) {
	var cfg access.Config
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return nil, fmt.Errorf("does not parse: %w", err)
	}
	if len(cfg.Providers) == 0 {
		return nil, errors.New("lists no providers")
	}
	seen := map[string]bool{}
	for i := range cfg.Providers {
		p := &cfg.Providers[i]
		switch {
		case p.Name == "":
			return nil, fmt.Errorf("provider %d has no name", i)
		case seen[p.Name]:
			return nil, fmt.Errorf("provider %q is listed twice", p.Name)
		case p.ExecConfig == nil || p.ExecConfig.Command == "":
			return nil, fmt.Errorf("provider %q has no execConfig.command", p.Name)
		case p.ExecConfig.APIVersion == "":
			return nil, fmt.Errorf("provider %q has no execConfig.apiVersion (e.g. client.authentication.k8s.io/v1)", p.Name)
		}
		seen[p.Name] = true
		// A ClusterProfile's proposed arguments and environment are ignored.
		p.ProfileSourcedCLIArgsPolicy = access.ProfileSourcedCLIArgsPolicyIgnore
		p.ProfileSourcedEnvVarsPolicy = access.ProfileSourcedEnvVarsPolicyIgnore
		// A daemon has no terminal to prompt on.
		p.ExecConfig.InteractiveMode = clientcmdapi.NeverExecInteractiveMode
	}
	return &AccessProviders{providers: cfg.Providers}, nil
}

// Names returns the provider names, in file order.
func (a *AccessProviders) Names() []string {
	out := make([]string, 0, len(a.providers))
	for _, p := range a.providers {
		out = append(out, p.Name)
	}
	return out
}

// choose returns the first provider of the file (file order is the
// operator's preference) that the ClusterProfile offers, and the
// ClusterProfile's entry for it, as pkg/access does: accessProviders win
// over the deprecated credentialProviders of the same name.
func (a *AccessProviders) choose(cp *cpv1alpha1.ClusterProfile) (*access.Provider, *cpv1alpha1.AccessProvider) {
	offered := map[string]*cpv1alpha1.AccessProvider{}
	for i := range cp.Status.CredentialProviders {
		offered[cp.Status.CredentialProviders[i].Name] = &cp.Status.CredentialProviders[i]
	}
	for i := range cp.Status.AccessProviders {
		offered[cp.Status.AccessProviders[i].Name] = &cp.Status.AccessProviders[i]
	}
	for i := range a.providers {
		if ap, ok := offered[a.providers[i].Name]; ok {
			return &a.providers[i], ap
		}
	}
	return nil, nil
}

// errNoAccessProvider marks a ClusterProfile that offers no provider of the
// file.
var errNoAccessProvider = errors.New("no access provider of the daemon's access-provider file")

// RESTConfig returns the client config of the member a ClusterProfile
// describes: server, CA and the other cluster fields from the chosen
// status.accessProviders entry, checked against the policy like a
// registration Secret's kubeconfig, and the credential plugin of the file.
// Extensions proposing plugin arguments or environment are dropped; the
// reserved client.authentication.k8s.io/exec extension stays, as per-cluster
// data the plugin receives with provideClusterInfo.
func (a *AccessProviders) RESTConfig(cp *cpv1alpha1.ClusterProfile, policy KubeconfigPolicy) (*rest.Config, error) {
	p, ap := a.choose(cp)
	if p == nil {
		return nil, fmt.Errorf("%w: the ClusterProfile offers %v, the daemon knows %v", errNoAccessProvider, offeredNames(cp), a.Names())
	}
	cluster := clientcmdapi.NewCluster()
	if err := clientcmdlatest.Scheme.Convert(&ap.Cluster, cluster, nil); err != nil {
		return nil, fmt.Errorf("access provider %q: cluster does not convert: %w", p.Name, err)
	}
	for name := range cluster.Extensions {
		if name != execClusterExtension {
			delete(cluster.Extensions, name)
		}
	}
	exec := p.ExecConfig.DeepCopy()
	exec.PluginPolicy = clientcmdapi.PluginPolicy{
		PolicyType: clientcmdapi.PluginPolicyAllowlist,
		Allowlist:  []clientcmdapi.AllowlistEntry{{Command: exec.Command}},
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters[p.Name] = cluster
	kc.AuthInfos[p.Name] = &clientcmdapi.AuthInfo{Exec: exec}
	kc.Contexts[p.Name] = &clientcmdapi.Context{Cluster: p.Name, AuthInfo: p.Name}
	kc.CurrentContext = p.Name
	// The plugin is the operator's: it may run. Everything else the
	// ClusterProfile says obeys the daemon's kubeconfig policy.
	policy.AllowExec = true
	cfg, err := restConfigFrom(kc, policy)
	if err != nil {
		return nil, fmt.Errorf("access provider %q: %w", p.Name, err)
	}
	return cfg, nil
}

// execClusterExtension is the cluster extension client-go hands to an exec
// plugin as spec.cluster.config.
const execClusterExtension = "client.authentication.k8s.io/exec"

func offeredNames(cp *cpv1alpha1.ClusterProfile) []string {
	var out []string
	for _, ap := range cp.Status.AccessProviders {
		out = append(out, ap.Name)
	}
	for _, ap := range cp.Status.CredentialProviders {
		out = append(out, ap.Name)
	}
	return out
}

// profileHash identifies what a ClusterProfile's connection is built from:
// the chosen provider and its cluster, and the setting annotations. Status
// conditions and properties are not part of it, so a condition change never
// rebuilds the connection.
func (a *AccessProviders) profileHash(cp *cpv1alpha1.ClusterProfile) string {
	var chosen []byte
	if p, ap := a.choose(cp); p != nil {
		chosen, _ = json.Marshal(ap)
	}
	return hashOf(cp.Name, chosen, settingAnnotations(cp.Annotations)...)
}

// ControlPlaneUnhealthy returns why the cluster manager reports the
// ClusterProfile's control plane unhealthy (condition ControlPlaneHealthy
// False), or "". Unknown or a missing condition leaves it to the probe.
func ControlPlaneUnhealthy(cp *cpv1alpha1.ClusterProfile) string {
	c := meta.FindStatusCondition(cp.Status.Conditions, cpv1alpha1.ClusterConditionControlPlaneHealthy)
	if c == nil || c.Status != metav1.ConditionFalse {
		return ""
	}
	msg := fmt.Sprintf("the cluster manager reports %s=False", cpv1alpha1.ClusterConditionControlPlaneHealthy)
	if c.Reason != "" {
		msg += " (" + c.Reason + ")"
	}
	if c.Message != "" {
		msg += ": " + c.Message
	}
	return msg
}

func profileRef(cp *cpv1alpha1.ClusterProfile) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		Kind: "ClusterProfile", APIVersion: cpv1alpha1.GroupVersion.String(),
		Namespace: cp.Namespace, Name: cp.Name, UID: cp.UID, ResourceVersion: cp.ResourceVersion,
	}
}
