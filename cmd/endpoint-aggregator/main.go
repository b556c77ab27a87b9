// Command endpoint-aggregator aggregates the Services of member clusters into
// a hub cluster. See the app package for its subcommands.
package main

import (
	"os"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
)

func main() {
	if err := app.NewCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
