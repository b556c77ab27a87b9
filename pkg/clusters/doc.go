// Package clusters owns the dynamic set of member clusters.
//
// Members are registered by kubeconfig Secrets in the daemon's namespace and,
// optionally, by ClusterProfiles (KEP-4322; clusterprofile.go), whose client
// is built from the operator's access-provider file; both go through one
// registration path and share name ownership (the older object wins). The
// Registry watches them and, per member, builds a client, starts one
// informer per member resource (Services, EndpointSlices and, in MCS mode,
// ServiceExports), and swaps or stops them at runtime: a changed kubeconfig is
// make-before-break, a deleted Secret withdraws the member. A member that never
// answers blocks nobody: each has its own stop channel and sync timeout. A
// health probe runs per member from the start; when a member answers again
// after it failed, its informers are restarted on the same clients at once
// (make-before-break once synced) instead of waiting out client-go's backoff.
//
// The caches hold what the sync reads: Services and ServiceExports stripped
// of the rest, EndpointSlices as their projections (endpoints.ProjectSlice).
//
// Files: registry.go is the Registry's shell (its queue, Run, lookups);
// registrations.go reads Secrets and ClusterProfiles into registrations and
// registers or removes members (a rotation included); claims.go decides
// which registration owns a name; member.go is one member's state;
// connections.go runs a member's connection and follows its health;
// exports.go reads a member's ServiceExports in the version it serves;
// share.go is this replica's share of the members when replicas share
// them; static.go the members registered without a Secret (Options.Static); events.go the Events
// and the state the leader reports.
//
// The package knows nothing of the hub's outputs. It tells its user about
// members through callbacks (see Handler) and exposes each member's listers.
package clusters
