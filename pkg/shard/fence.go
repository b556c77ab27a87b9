package shard

import (
	"crypto/sha256"
	"encoding/hex"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// Names, labels and annotations of the Leases of sharding.
const (
	// PeerLeasePrefix names a replica's peer Lease: prefix + PeerName.
	PeerLeasePrefix = "endpoint-aggregator-replica-"
	// FenceLeasePrefix names a member's fence Lease: prefix + cluster.
	FenceLeasePrefix = "endpoint-aggregator-fence-"
	// LabelRole marks the Leases of sharding: RolePeer or RoleFence.
	LabelRole = "endpoint-aggregator.io/shard"
	RolePeer  = "replica"
	RoleFence = "fence"
	// LabelFenceCluster is the member of a fence Lease.
	LabelFenceCluster = "endpoint-aggregator.io/fence-cluster"
	// AnnotationAssignedTo is the replica the leader gives a member to.
	AnnotationAssignedTo = "endpoint-aggregator.io/assigned-to"
	// AnnotationReady is the assignee that synced the member and waits
	// for the holder to free the fence.
	AnnotationReady = "endpoint-aggregator.io/ready"
	// AnnotationDraining on a peer Lease: the replica shuts down; it is
	// assigned nothing and hands over what it holds.
	AnnotationDraining = "endpoint-aggregator.io/draining"
)

// PeerName is the name of a replica's peer Lease. Identities hold
// characters names may not, so the name is a hash of one.
func PeerName(identity string) string {
	sum := sha256.Sum256([]byte(identity))
	return PeerLeasePrefix + hex.EncodeToString(sum[:6])
}

// FenceName is the name of a member's fence Lease.
func FenceName(cluster string) string { return FenceLeasePrefix + cluster }

// fence is what one fence Lease says.
type fence struct {
	cluster    string
	holder     string // "" while free
	assignedTo string
	ready      string
	lease      *coordinationv1.Lease // nil: the member has no fence yet
}

func fenceOf(l *coordinationv1.Lease) fence {
	f := fence{cluster: l.Labels[LabelFenceCluster], lease: l}
	if l.Spec.HolderIdentity != nil {
		f.holder = *l.Spec.HolderIdentity
	}
	f.assignedTo = l.Annotations[AnnotationAssignedTo]
	f.ready = l.Annotations[AnnotationReady]
	return f
}

// action is what a replica does about one member's fence.
type action int

const (
	none action = iota
	// acquire takes a free fence, or one whose holder is dead.
	acquire
	// signalReady tells the holder that the assignee synced.
	signalReady
	// release stops taking the member's keys, waits for the syncs in
	// flight and frees the fence.
	release
	// confirm rewrites a fence the replica holds, after its deadline
	// passed, to make sure nobody took it meanwhile.
	confirm
	// forget drops a fence the replica thought it held: someone else
	// holds it now.
	forget
)

func (a action) String() string {
	return [...]string{"none", "acquire", "signalReady", "release", "confirm", "forget"}[a]
}

// view is what one replica knows when it decides about a fence.
type view struct {
	me string
	// registered: this replica's registry knows the member.
	registered bool
	// warm: this replica's connection to the member synced, missed its
	// sync timeout, or cannot be made (nothing better will come).
	warm bool
	// held: the replica holds the fence as it last wrote it, in the
	// current epoch of its peer Lease (confirmed since the last lapse);
	// stale: it holds it from an earlier epoch.
	held, stale bool
	// draining: the replica shuts down and hands over all it holds,
	// even to an assignee that is not warm, once its timeout is near.
	draining, giveUp bool
	alive            func(identity string) bool
}

// decide is what replica v.me does about fence f. It is a pure function of
// what the replica knows, so the order explorer can drive it.
func decide(v view, f fence) action {
	if f.lease == nil {
		return none // the leader creates it
	}
	mine := f.holder == v.me
	switch {
	case (v.held || v.stale) && !mine:
		return forget
	case mine && !v.registered:
		// Unregistered here: the leader withdraws its objects once the
		// fence is free.
		return release
	case mine && v.giveUp:
		return release
	case mine && f.assignedTo != v.me && f.assignedTo != "" && f.ready == f.assignedTo && v.alive(f.assignedTo):
		return release
	case mine && !v.held:
		return confirm
	case mine:
		return none
	case f.assignedTo != v.me || !v.registered || v.draining:
		return none
	case f.holder == "" || !v.alive(f.holder):
		return acquire
	case v.warm && f.ready != v.me:
		return signalReady
	}
	return none
}
