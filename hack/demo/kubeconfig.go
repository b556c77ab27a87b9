package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
)

// namedKubeconfig is one cluster's self-contained kubeconfig and the name
// its context gets in the merged file.
type namedKubeconfig struct {
	name string
	data []byte
}

// mergeKubeconfigs returns one kubeconfig with a context per cluster, named
// like the cluster, whose cluster and user entries carry that cluster's
// server, CA and credentials under the same name. The current context is
// the first cluster's (the hub), so kubectl and the CLI pick it by default.
func mergeKubeconfigs(in []namedKubeconfig) ([]byte, error) {
	if len(in) == 0 {
		return nil, fmt.Errorf("no kubeconfigs to merge")
	}
	merged := clientcmdapi.NewConfig()
	for _, k := range in {
		if _, dup := merged.Contexts[k.name]; dup {
			return nil, fmt.Errorf("two kubeconfigs named %q", k.name)
		}
		kc, err := clientcmd.Load(k.data)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig of %s: %w", k.name, err)
		}
		ctxName := kc.CurrentContext
		if _, ok := kc.Contexts[k.name]; ok {
			ctxName = k.name
		}
		ctx, ok := kc.Contexts[ctxName]
		if !ok {
			return nil, fmt.Errorf("kubeconfig of %s: no context %q", k.name, ctxName)
		}
		cluster, ok := kc.Clusters[ctx.Cluster]
		if !ok {
			return nil, fmt.Errorf("kubeconfig of %s: context %q names cluster %q, which it lacks", k.name, ctxName, ctx.Cluster)
		}
		user, ok := kc.AuthInfos[ctx.AuthInfo]
		if !ok {
			return nil, fmt.Errorf("kubeconfig of %s: context %q names user %q, which it lacks", k.name, ctxName, ctx.AuthInfo)
		}
		merged.Clusters[k.name] = cluster.DeepCopy()
		merged.AuthInfos[k.name] = user.DeepCopy()
		merged.Contexts[k.name] = &clientcmdapi.Context{Cluster: k.name, AuthInfo: k.name}
	}
	merged.CurrentContext = in[0].name
	return clientcmd.Write(*merged)
}

// checkContexts makes sure that each cluster's context in the kubeconfig at
// path reaches that cluster's API server, as the printed commands will.
func checkContexts(ctx context.Context, path string, clusters []*testenv.Cluster) error {
	for _, c := range clusters {
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.Name}).ClientConfig()
		if err != nil {
			return fmt.Errorf("merged kubeconfig, context %s: %w", c.Name, err)
		}
		if cfg.Host != c.Config.Host {
			return fmt.Errorf("merged kubeconfig, context %s: server %s, want %s", c.Name, cfg.Host, c.Config.Host)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		if _, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			return fmt.Errorf("merged kubeconfig, context %s: %w", c.Name, err)
		}
	}
	return nil
}

// hints are the commands the demo suggests once the hub tables are printed.
type hints struct {
	kubeconfig  string // the merged kubeconfig
	cli         string // the endpoint-aggregator binary, as the user would type it
	kubectl     string
	kubectlNote string // how to get a kubectl when none was found, or ""
	daemonLog   string
	metricsURL  string
}

// print writes the merged KUBECONFIG and the commands to try with it.
func (h hints) print(w io.Writer) {
	kc := h.kubeconfig
	fmt.Fprintf(w, "\nOne kubeconfig with the contexts hub, east and west (valid while the demo runs):\n")
	fmt.Fprintf(w, "  export KUBECONFIG=%s\n", kc)
	fmt.Fprintf(w, "\nAsk the CLI what the daemon sees:\n")
	fmt.Fprintf(w, "  %s status --kubeconfig %s --hub-context hub\n", h.cli, kc)
	fmt.Fprintf(w, "  %s explain %s/cart --kubeconfig %s --hub-context hub\n", h.cli, appNamespace, kc)
	fmt.Fprintf(w, "  %s explain %s/db --kubeconfig %s --hub-context hub\n", h.cli, appNamespace, kc)
	fmt.Fprintf(w, "\nLook at the clusters:%s\n", h.kubectlNote)
	fmt.Fprintf(w, "  %s --kubeconfig %s --context hub get serviceimports,svc,endpointslices -n %s\n", h.kubectl, kc, appNamespace)
	fmt.Fprintf(w, "  %s --kubeconfig %s --context east get svc,endpointslices -n %s\n", h.kubectl, kc, appNamespace)
	fmt.Fprintf(w, "  # change a member and watch the hub follow:\n")
	fmt.Fprintf(w, "  %s --kubeconfig %s --context west delete endpointslice cart-demo -n %s\n", h.kubectl, kc, appNamespace)
	fmt.Fprintf(w, "  %s --kubeconfig %s --context hub get endpointslices -n %s -w\n", h.kubectl, kc, appNamespace)
	fmt.Fprintf(w, "\nDaemon log: %s\nMetrics:    %s\n", h.daemonLog, h.metricsURL)
}

// cliPath is binary as a user in dir would type it: relative to dir when
// binary lies under it (bin/endpoint-aggregator from the repository's root,
// where `make demo` runs), else absolute.
func cliPath(binary, dir string) string {
	rel, err := filepath.Rel(dir, binary)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return binary
	}
	if !strings.ContainsRune(rel, filepath.Separator) {
		return "." + string(filepath.Separator) + rel // a bare name would be looked up in $PATH
	}
	return rel
}
