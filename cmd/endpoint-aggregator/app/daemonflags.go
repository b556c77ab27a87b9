package app

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/daemonconfig"
)

// daemonFlags is where an operator command's mirrors of the daemon's flags
// came from.
type daemonFlags struct {
	// Config is what the daemon published; nil when nothing was read.
	Config *daemonconfig.Config
	// Source says it in a few words, for reports.
	Source string
}

// useDaemonConfig reads the configuration the daemon published in its
// namespace ns and gives it to the flags of fs the command line did not
// set (fs may be nil: then it only reads). A flag given explicitly wins, with a warning when it differs. When
// nothing can be read, the flags keep this command's defaults and one
// warning says so.
func useDaemonConfig(ctx context.Context, hub *cliClients, ns string, fs *pflag.FlagSet, errOut io.Writer) daemonFlags {
	ref := ns + "/" + daemonconfig.Name
	c, err := daemonconfig.Read(ctx, hub.kube.CoreV1(), ns)
	switch {
	case err != nil:
		fmt.Fprintf(errOut, "Warning: reading the daemon's configuration (ConfigMap %s): %v; assuming it runs with this command's defaults: pass its flags if it does not.\n", ref, err)
		return daemonFlags{Source: "this command's defaults (the daemon's configuration could not be read)"}
	case c == nil:
		fmt.Fprintf(errOut, "Warning: the daemon publishes no configuration in namespace %s (no ConfigMap %s: a daemon older than this command, or none ran); "+
			"assuming it runs with this command's defaults: pass its flags if it does not.\n", ns, daemonconfig.Name)
		return daemonFlags{Source: "this command's defaults (the daemon published none)"}
	}
	if fs == nil { // options built without flags: nothing to fill in
		return daemonFlags{Config: c, Source: "ConfigMap " + ref}
	}
	diffs, errs := daemonconfig.Apply(fs, *c)
	for _, d := range diffs {
		fmt.Fprintf(errOut, "Warning: --%s=%s given, but the daemon runs with --%s=%s (ConfigMap %s): using the value given.\n", d.Flag, d.Given, d.Flag, d.Published, ref)
	}
	for _, err := range errs {
		fmt.Fprintf(errOut, "Warning: the daemon's configuration (ConfigMap %s): %v; using this command's default.\n", ref, err)
	}
	src := "as published in ConfigMap " + ref
	if c.Version != "" {
		src += " by endpoint-aggregator " + c.Version
	}
	if len(diffs) > 0 {
		src += ", overridden by flags given"
	}
	return daemonFlags{Config: c, Source: src}
}
