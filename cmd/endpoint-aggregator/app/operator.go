package app

import (
	"context"
	"io"

	"github.com/spf13/cobra"
)

// operatorOptions are the options of an operator command (register,
// unregister, status).
type operatorOptions interface {
	addFlags(cmd *cobra.Command)
	validate() error
	run(ctx context.Context, out, errOut io.Writer) error
}

// newOperatorCommand completes cmd, which has no arguments: it adds o's
// flags, and its RunE validates o, then runs it.
func newOperatorCommand(o operatorOptions, cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.NoArgs
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := o.validate(); err != nil {
			return err
		}
		return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
	}
	o.addFlags(cmd)
	return cmd
}
