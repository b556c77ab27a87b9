// Package sync is the controller that keeps the hub in line with its members.
//
// Member and hub informers feed one typed, rate-limited workqueue keyed
// {Cluster, Namespace, Name}. A key with a cluster owns the hub objects sourced
// from that one member service (per-cluster Service and Endpoints, MCS
// EndpointSlices); a key without one (a clusterset key) owns the objects that
// merge across members (ServiceImport and derived Service). Workers compute
// the desired objects with package endpoints, compare them with the hub's
// caches and write only what differs. Nothing is periodic: every sync is
// computed from caches, so running it again writes nothing.
package sync
