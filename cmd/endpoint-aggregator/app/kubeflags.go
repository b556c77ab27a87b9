package app

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

// cliFieldManager is the field manager of everything the operator commands
// write.
const cliFieldManager = "endpoint-aggregator-cli"

// kubeFlags are the connection flags shared by register, unregister and
// status, kubectl style: one kubeconfig file (or the usual $KUBECONFIG /
// ~/.kube/config chain), clusters chosen by context.
type kubeFlags struct {
	Kubeconfig     string
	Namespace      string
	RequestTimeout time.Duration
	// hubDefaulted: the hub is the current context, --hub-context not given.
	hubDefaulted bool
}

func newKubeFlags() *kubeFlags {
	return &kubeFlags{Namespace: defaultNamespace, RequestTimeout: 30 * time.Second}
}

func (f *kubeFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.Kubeconfig, "kubeconfig", f.Kubeconfig,
		"Path to the kubeconfig file with the contexts. Default: the files in $KUBECONFIG, else ~/.kube/config.")
	fs.StringVarP(&f.Namespace, "namespace", "n", f.Namespace,
		"The daemon's namespace in the hub (its --namespace), where the registration Secrets live.")
	fs.DurationVar(&f.RequestTimeout, "request-timeout", f.RequestTimeout,
		"Timeout of each API request. 0 means no timeout.")
}

func (f *kubeFlags) validate() []error {
	var errs []error
	if msgs := validation.IsDNS1123Label(f.Namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--namespace %q is not a valid namespace name: %s", f.Namespace, strings.Join(msgs, "; ")))
	}
	if f.RequestTimeout < 0 {
		errs = append(errs, errors.New("--request-timeout must not be negative"))
	}
	return errs
}

// loadingRules are kubectl's: --kubeconfig, else $KUBECONFIG, else
// ~/.kube/config.
func (f *kubeFlags) loadingRules() *clientcmd.ClientConfigLoadingRules {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.Kubeconfig
	return rules
}

// kubeconfigFiles names the files the kubeconfig is read from, for errors;
// it says so when none of them exists.
func (f *kubeFlags) kubeconfigFiles() string {
	rules := f.loadingRules()
	files := rules.GetLoadingPrecedence()
	if f.Kubeconfig != "" {
		files = []string{f.Kubeconfig}
	}
	for _, p := range files {
		if _, err := os.Stat(p); err == nil {
			return strings.Join(files, ":")
		}
	}
	return strings.Join(files, ":") + ", which does not exist"
}

// defaultHubContext sets *hubContext, when not given, to the kubeconfig's
// current context, as kubectl chooses a cluster.
func (f *kubeFlags) defaultHubContext(hubContext *string) error {
	if *hubContext != "" {
		return nil
	}
	raw, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(f.loadingRules(), &clientcmd.ConfigOverrides{}).RawConfig()
	if err != nil {
		return fmt.Errorf("--hub-context not given, and loading the kubeconfig (%s) for its current context: %w", f.kubeconfigFiles(), err)
	}
	if raw.CurrentContext == "" {
		return fmt.Errorf("--hub-context not given, and the kubeconfig has no current context (%s)", f.kubeconfigFiles())
	}
	*hubContext, f.hubDefaulted = raw.CurrentContext, true
	return nil
}

// restConfig returns the client configuration of a context of the
// kubeconfig. It fails when the context does not exist, rather than falling
// back to the current context.
func (f *kubeFlags) restConfig(kubeContext string) (*rest.Config, error) {
	if kubeContext == "" {
		return nil, errors.New("no context given")
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(f.loadingRules(), &clientcmd.ConfigOverrides{CurrentContext: kubeContext})
	raw, err := cc.RawConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig (%s): %w", f.kubeconfigFiles(), err)
	}
	if _, ok := raw.Contexts[kubeContext]; !ok {
		var names []string
		for n := range raw.Contexts {
			names = append(names, n)
		}
		slices.Sort(names)
		have := "it has none"
		if len(names) > 0 {
			have = "it has " + strings.Join(names, ", ")
		}
		return nil, fmt.Errorf("context %q is not in the kubeconfig %s (%s)", kubeContext, f.kubeconfigFiles(), have)
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("context %q: %w", kubeContext, err)
	}
	cfg.Timeout = f.RequestTimeout
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "endpoint-aggregator-cli/" + version()
	return cfg, nil
}

// cliClients are the clients of one cluster, chosen by context.
type cliClients struct {
	context string
	config  *rest.Config
	kube    kubernetes.Interface
	dynamic dynamic.Interface
	mcs     mcsclientset.Interface
}

func (f *kubeFlags) clients(kubeContext string) (*cliClients, error) {
	cfg, err := f.restConfig(kubeContext)
	if err != nil {
		return nil, err
	}
	return newCLIClients(kubeContext, cfg)
}

// cliWarnings is where the operator commands print API server warnings,
// each distinct one once per run: the hub warns on every core/v1 Endpoints
// read since Kubernetes 1.33.
var cliWarnings io.Writer = os.Stderr

func newCLIClients(kubeContext string, cfg *rest.Config) (*cliClients, error) {
	cfg.WarningHandler = rest.NewWarningWriter(cliWarnings, rest.WarningWriterOptions{Deduplicate: true})
	c := &cliClients{context: kubeContext, config: cfg}
	var err error
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("context %q: %w", kubeContext, err)
	}
	if c.dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("context %q: %w", kubeContext, err)
	}
	if c.mcs, err = mcsclientset.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("context %q: %w", kubeContext, err)
	}
	return c, nil
}
