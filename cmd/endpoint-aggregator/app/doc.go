// Package app holds the endpoint-aggregator command line: flags become
// Options, Options are validated, and a Daemon wires the hub clients, the
// member registry and the sync controller together.
package app
