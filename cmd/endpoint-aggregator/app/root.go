package app

import (
	goflag "flag"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
)

// Version and Commit are set at build time with
// -ldflags "-X .../app.Version=v1.2.3 -X .../app.Commit=<git commit>".
var (
	Version = ""
	Commit  = ""
)

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
		Short: "Print the version, the git commit and the Go version it was built from",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "version: %s\ncommit: %s\ngo: %s %s/%s\n",
				version(), commit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
	}
}

// commit is Commit, else the revision the go command stamped (a build with
// VCS stamping from a git checkout), else "unknown".
func commit() string {
	if Commit != "" {
		return Commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "unknown"
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
