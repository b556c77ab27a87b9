package shard

import "time"

// ownership is what this replica holds and may write: the one place that
// says so. The coordinator's lock guards it.
type ownership struct {
	// deadline is until when this replica may write: its last peer Lease
	// renewal that succeeded, as sent, plus the renew budget. epoch
	// counts the renewals that came after the deadline had passed.
	deadline time.Time
	epoch    int
	// held are the fences this replica holds, with the epoch in which
	// it last wrote them; releasing those it is handing over; wanted the
	// members it runs a connection to (assigned or held here).
	held      map[string]int
	releasing map[string]bool
	wanted    map[string]bool
	// unsure are the fences whose take failed with no answer: the API
	// server may have taken it. They count as held for a drain until a
	// read of the fence says (resolveUnsure).
	unsure map[string]bool
}

func newOwnership() ownership {
	return ownership{held: map[string]int{}, releasing: map[string]bool{}, wanted: map[string]bool{}, unsure: map[string]bool{}}
}

// Wants reports whether this replica should run a connection to a member:
// it is assigned here, or held here.
func (c *Coordinator) Wants(cluster string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wanted[cluster]
}

// Owns reports whether this replica may write a member's hub objects now,
// and until when.
func (c *Coordinator) Owns(cluster string) (bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.held[cluster]
	if !ok || e != c.epoch || c.releasing[cluster] || !c.opts.Now().Before(c.deadline) {
		return false, time.Time{}
	}
	return true, c.deadline
}

// Free reports whether nobody may write a member's objects: it has no
// fence, or its fence is free, or its holder is dead as the API server
// itself showed (deadAtSource), not only as a watch that may lag shows.
// The leader withdraws the objects of an unregistered member only then.
func (c *Coordinator) Free(cluster string) bool {
	l := c.fenceLease(cluster)
	if l == nil {
		return true
	}
	f := fenceOf(l)
	return f.holder == "" || (f.holder != c.opts.Identity && c.peers.confirmedDead(f.holder))
}

// Owner returns the holder of a member's fence, "" when none.
func (c *Coordinator) Owner(cluster string) string {
	if l := c.fenceLease(cluster); l != nil {
		return fenceOf(l).holder
	}
	return ""
}

// Deadline is until when this replica may write, as its peer Lease says.
func (c *Coordinator) Deadline() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline
}

// Settled reports whether this replica knows its share: a reconcile found
// every registered member assigned to a live replica, and asked the
// registry to connect those assigned here; or SettleTimeout passed since
// the first reconcile (a member whose fence cannot be written must not
// keep every replica unready).
func (c *Coordinator) Settled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.firstReconcile.IsZero() {
		return false
	}
	return c.assigned || c.opts.Now().Sub(c.firstReconcile) >= c.opts.SettleTimeout
}

// alive is peers.alive, with this replica alive while its deadline holds.
func (c *Coordinator) alive(id string) bool {
	if id == c.opts.Identity {
		return true
	}
	return c.peers.alive(id)
}
