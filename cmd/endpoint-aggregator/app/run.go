package app

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

func newRunCommand() *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the daemon: aggregate registered members into the hub",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			cfg, err := hubConfig(o.Kubeconfig, o.Context)
			if err != nil {
				return err
			}
			d, err := NewDaemon(o, cfg, nil)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			klog.InfoS("Starting endpoint-aggregator", "version", version(), "namespace", o.Namespace, "exportMode", o.ExportMode)
			err = d.Run(ctx)
			klog.InfoS("Stopped")
			klog.Flush()
			return err
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

// hubConfig loads the hub's client config: the kubeconfig file and context
// when given, in-cluster otherwise.
func hubConfig(path, context string) (*rest.Config, error) {
	if path == "" && context == "" {
		if cfg, err := rest.InClusterConfig(); err == nil {
			return cfg, nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
}
