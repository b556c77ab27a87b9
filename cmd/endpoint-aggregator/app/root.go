package app

import (
	goflag "flag"
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
)

// Version is set at build time with -ldflags "-X .../app.Version=v1.2.3".
var Version = ""

// NewCommand returns the endpoint-aggregator root command.
func NewCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "endpoint-aggregator",
		Short:         "Aggregate the Services of member clusters into a hub cluster",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	fs := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(fs)
	root.PersistentFlags().AddGoFlagSet(fs)
	// klog's flags stay accepted but out of --help, all but -v.
	fs.VisitAll(func(f *goflag.Flag) {
		if f.Name != "v" {
			_ = root.PersistentFlags().MarkHidden(f.Name)
		}
	})
	root.AddCommand(newRunCommand(), newVersionCommand())
	root.AddCommand(newRegisterCommand(), newUnregisterCommand(), newStatusCommand(), newExplainCommand(), newCleanupCommand())
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), version())
		},
	}
}

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
