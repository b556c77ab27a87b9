// Package daemonconfig owns the daemon's published configuration: the flags
// a running endpoint-aggregator was started with that the operator commands
// (explain, status, cleanup) would otherwise have to be told, kept in one
// ConfigMap in the daemon's namespace on the hub.
//
// A ConfigMap rather than annotations on the leader Lease: it exists without
// leader election, every replica (not only the leader) may write it, its name
// is known without being told --leader-election-id, and RBAC can limit the
// daemon's updates to that one name.
//
// The data maps each flag name to its value as the command line spells it
// (lists comma-separated, durations as time.Duration prints them), plus the
// daemon's version under "version".
package daemonconfig
