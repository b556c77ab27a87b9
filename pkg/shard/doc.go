// Package shard shares the members of a ClusterSet among the daemon's
// replicas, so that each holds the watches, caches and writes of its share
// only.
//
// # Leases
//
// Every replica holds a peer Lease in the daemon's namespace
// (endpoint-aggregator-replica-<hash of its identity>), renewed every retry
// period. Each registered member has a fence Lease
// (endpoint-aggregator-fence-<cluster>): its holderIdentity is the one
// replica that may write that member's hub objects, its annotation
// endpoint-aggregator.io/assigned-to the replica the leader gives it to.
//
// A fence does not expire on its own: it is as alive as its holder's peer
// Lease, so a replica renews one Lease, not one per member. Its holder
// writes the member's objects only while it can be sure no one else may:
// until a local deadline, the last renewal of its peer Lease that succeeded,
// as sent, plus the renew budget. Another replica counts the holder dead
// only once it has seen that peer Lease unrenewed for a whole lease
// duration on its own clock, which is later by at least
// LeaseDuration - RenewDeadline. A holder whose deadline passed writes
// again only after confirming each of its fences with a conditional update:
// one that someone took meanwhile is lost, not resumed.
//
// # Assignment
//
// The leader (the replica holding the leader Lease) assigns each member to
// a live replica by rendezvous hashing with bounded load (Assign), weighing
// a member by the endpoints the hub holds of it (one it holds none of yet
// weighs the mean of the others, so that a hub filling up does not reorder
// the placement), and writes the choice on the member's fence. A replica joining or leaving moves only the members
// whose choice changed. The leader alone writes the merged objects, from
// the hub's per-cluster records, and withdraws the objects of unregistered
// members once nobody holds their fence.
//
// # Handover
//
// The replica a member is assigned to starts its connection and, once it
// synced (or missed its sync timeout), says so on the fence (annotation
// endpoint-aggregator.io/ready). The holder then stops taking the member's
// keys, waits for the syncs in flight, and frees the fence with a
// conditional update; the assignee takes it the same way and resyncs the
// member, which writes nothing on a converged hub. A fence whose holder is
// dead is taken at once. A replica that shuts down marks its peer Lease
// draining; the leader assigns its members elsewhere, and it exits once it
// handed them over, or when its shutdown timeout ends. A fence's writes are
// independent of another's: a replica sends them in parallel, and reads a
// dead holder's peer Lease once for all its fences.
//
// # Readiness
//
// A replica is settled (and, once the members assigned to it synced or
// timed out, ready) when every registered member is assigned to a live
// replica; or, should that never happen (a fence that cannot be written),
// one member sync timeout after its first reconcile. A replica need not be
// ready to lead: the leader works from the hub's records.
package shard
