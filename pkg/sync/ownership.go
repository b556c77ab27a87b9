package sync

import (
	"context"
	"time"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

// Sharding tells the controller which keys this replica writes when
// replicas share the members (package shard). A member key of a registered
// member is written by the holder of the member's fence, as its
// lifecycle.State says (Owned, OwnedUntil); the merged objects, and the
// objects of unregistered members once nobody holds their fence, by the
// merging replica, the leader.
type Sharding interface {
	// Merging reports whether this replica writes the merged objects, and
	// until when (zero: no limit).
	Merging() (bool, time.Time)
	// Free reports whether nobody may write a member's objects: it has no
	// fence, or nobody alive holds it.
	Free(cluster string) bool
}

// owns reports whether this replica may write the objects of key, whose
// member is in state st, and until when (zero: no limit). Without sharding
// it writes them all.
func (c *Controller) owns(key Key, st lifecycle.State) (bool, time.Time) {
	sh := c.opts.Sharding
	switch {
	case key.IsClusterSet() && sh == nil:
		return true, time.Time{}
	case key.IsClusterSet():
		return sh.Merging()
	case st.Registered():
		return st.Owned, st.OwnedUntil
	case sh == nil:
		return true, time.Time{}
	}
	merging, until := sh.Merging()
	return merging && sh.Free(key.Cluster), until
}

// fenced checks that this replica may write key's objects. When it may, it
// returns a context that ends when that ends, for the sync's reads and
// writes; when it may not, what is kept of the member's keys goes, and
// the key waits for OwnershipChanged.
func (c *Controller) fenced(ctx context.Context, key Key, st lifecycle.State, out *outcome) (context.Context, context.CancelFunc, bool) {
	ok, until := c.owns(key, st)
	if !ok {
		holds := func() bool {
			now, _ := c.members.Lookup(key.Cluster)
			ok, _ := c.owns(key, now)
			return ok
		}
		out.drop = true
		out.waitFor(waitOwned(key.Cluster), holds)
		if !key.IsClusterSet() && !st.Registered() {
			// The merging replica withdraws it: this replica starting to
			// merge wakes it too.
			out.waitFor(waitOwned(""), holds)
		}
		return ctx, func() {}, false
	}
	if until.IsZero() {
		return ctx, func() {}, true
	}
	ctx, cancel := context.WithDeadline(ctx, until)
	return ctx, cancel, true
}

// OwnershipChanged is told when this replica may have started or stopped
// writing a member's objects ("": the merged ones). The member is resynced
// (the merged keys something is kept of are queued), so that syncs that
// find it no longer written here drop what is kept of it, and whatever
// waited for it goes on.
func (c *Controller) OwnershipChanged(cluster string) {
	if cluster != "" {
		c.resyncMember(cluster)
	} else {
		for _, k := range c.state.keys("") {
			c.queue.add(k, aSweep)
		}
	}
	c.waits.wake(waitOwned(cluster), true)
}

// Busy reports whether a sync of one of a member's keys is in flight
// ("": a key the merging replica writes, a clusterset key or one of an
// unregistered member). A member handed over waits for them, and so does
// a leader before it releases its Lease.
func (c *Controller) Busy(cluster string) bool {
	if cluster != "" {
		return c.queue.busyWith(cluster)
	}
	for _, m := range c.queue.busyMembers() {
		if m == "" {
			return true
		}
		if st, _ := c.members.Lookup(m); !st.Registered() {
			return true
		}
	}
	return false
}

// Weight is the number of endpoints the hub's slices hold of a member, as
// cached: its load, when members are assigned to replicas.
func (c *Controller) Weight(cluster string) int {
	objs, err := c.caches.sliceInf.GetIndexer().ByIndex(byCluster, cluster)
	if err != nil {
		return 0
	}
	n := 0
	for _, o := range objs {
		if d, ok := o.(*endpoints.SliceDigest); ok {
			n += len(d.AddressKeys)
		}
	}
	return n
}
