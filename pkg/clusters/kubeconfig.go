package clusters

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigPolicy lists the kubeconfig features a registration Secret may use.
// Everything that makes the daemon run a command or read a local file is
// refused unless explicitly allowed: a Secret is data, not a program.
type KubeconfigPolicy struct {
	AllowExec               bool
	AllowAuthProvider       bool
	AllowTokenFile          bool
	AllowFilePaths          bool
	AllowInsecureSkipVerify bool
	AllowProxy              bool
}

// ErrRefused marks a kubeconfig that parsed but uses a refused feature.
var ErrRefused = errors.New("kubeconfig refused")

// RESTConfig parses kubeconfig data, checks it against the policy and returns
// the client config of its current context. It never reads a file or runs a
// command for a refused feature, because checks run before the config is built.
func RESTConfig(data []byte, policy KubeconfigPolicy) (*rest.Config, error) {
	if len(data) == 0 {
		return nil, errors.New("kubeconfig is empty")
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig does not parse: %w", err)
	}
	return restConfigFrom(cfg, policy)
}

// restConfigFrom checks a parsed kubeconfig against the policy and returns
// the client config of its current context.
func restConfigFrom(cfg *clientcmdapi.Config, policy KubeconfigPolicy) (*rest.Config, error) {
	if err := checkKubeconfig(cfg, policy); err != nil {
		return nil, err
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig is not usable: %w", err)
	}
	return rc, nil
}

// checkKubeconfig verifies the current context and everything it points at.
func checkKubeconfig(cfg *clientcmdapi.Config, p KubeconfigPolicy) error {
	name := cfg.CurrentContext
	if name == "" {
		if len(cfg.Contexts) != 1 {
			return fmt.Errorf("kubeconfig has no current-context and %d contexts", len(cfg.Contexts))
		}
		for n := range cfg.Contexts {
			name = n
		}
		cfg.CurrentContext = name
	}
	ctx, ok := cfg.Contexts[name]
	if !ok {
		return fmt.Errorf("kubeconfig current-context %q does not exist", name)
	}
	cluster, ok := cfg.Clusters[ctx.Cluster]
	if !ok {
		return fmt.Errorf("kubeconfig context %q names cluster %q, which does not exist", name, ctx.Cluster)
	}
	if cluster.Server == "" {
		return fmt.Errorf("kubeconfig cluster %q has no server", ctx.Cluster)
	}
	user, ok := cfg.AuthInfos[ctx.AuthInfo]
	if !ok && ctx.AuthInfo != "" {
		return fmt.Errorf("kubeconfig context %q names user %q, which does not exist", name, ctx.AuthInfo)
	}

	refuse := func(what, flag string) error {
		return fmt.Errorf("%w: %s is not allowed (start the daemon with %s to allow it)", ErrRefused, what, flag)
	}
	if cluster.CertificateAuthority != "" && !p.AllowFilePaths {
		return refuse("cluster certificate-authority file path", "--allow-kubeconfig-file-paths")
	}
	if cluster.InsecureSkipTLSVerify && !p.AllowInsecureSkipVerify {
		return refuse("insecure-skip-tls-verify", "--allow-kubeconfig-insecure")
	}
	if u, err := url.Parse(cluster.Server); err == nil && strings.EqualFold(u.Scheme, "http") && !p.AllowInsecureSkipVerify {
		// Plain HTTP: anyone on the path reads the credentials and
		// rewrites what the member says.
		return refuse("a plain http:// server", "--allow-kubeconfig-insecure")
	}
	if cluster.ProxyURL != "" && !p.AllowProxy {
		return refuse("proxy-url", "--allow-kubeconfig-proxy")
	}
	if user == nil {
		return nil
	}
	switch {
	case user.Exec != nil && !p.AllowExec:
		return refuse(fmt.Sprintf("exec credential plugin %q", user.Exec.Command), "--allow-kubeconfig-exec")
	case user.AuthProvider != nil && !p.AllowAuthProvider:
		return refuse(fmt.Sprintf("auth-provider %q", user.AuthProvider.Name), "--allow-kubeconfig-auth-provider")
	case user.TokenFile != "" && !p.AllowTokenFile:
		return refuse("tokenFile", "--allow-kubeconfig-token-file")
	case (user.ClientCertificate != "" || user.ClientKey != "") && !p.AllowFilePaths:
		return refuse("client-certificate/client-key file paths", "--allow-kubeconfig-file-paths")
	}
	if user.Exec != nil && user.Exec.InteractiveMode == "" {
		// A daemon has no terminal to prompt on.
		user.Exec.InteractiveMode = clientcmdapi.NeverExecInteractiveMode
	}
	return nil
}

func isRefused(err error) bool { return errors.Is(err, ErrRefused) }
