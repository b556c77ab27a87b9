package shard

import (
	"context"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// Drain hands over every fence this replica holds: it marks its peer Lease
// draining, so that the leader assigns its members elsewhere, and frees each
// fence once its assignee is warm. When ctx is about to end it frees what
// is left regardless. Run must still run. It returns once nothing is held.
func (c *Coordinator) Drain(ctx context.Context) {
	c.BeginDrain(ctx)
	giveUp := time.Duration(0)
	if d, ok := ctx.Deadline(); ok {
		giveUp = time.Until(d) / 2
	}
	timer := time.NewTimer(giveUp)
	defer timer.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		n := c.Holding()
		if n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			klog.InfoS("Handing over the rest of this replica's members before the shutdown timeout", "held", n)
			c.GiveUp()
		case <-tick.C:
			c.giveUpWhenAlone()
		}
	}
	c.Leave(ctx)
}

// BeginDrain marks this replica draining, on its peer Lease too: the leader
// assigns it nothing more and moves its members elsewhere.
func (c *Coordinator) BeginDrain(ctx context.Context) {
	c.mu.Lock()
	c.draining = true
	c.mu.Unlock()
	c.Renew(ctx)
	c.Kick()
}

// GiveUp frees what a draining replica holds at once, even to assignees
// that have not synced: its shutdown timeout is near.
func (c *Coordinator) GiveUp() {
	c.mu.Lock()
	c.giveUp = true
	c.mu.Unlock()
	c.Kick()
}

// Holding is how many fences this replica holds, or may hold: a take
// whose answer was lost counts until a read says.
func (c *Coordinator) Holding() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.held)
	for cluster := range c.unsure {
		if _, ok := c.held[cluster]; !ok {
			n++
		}
	}
	return n
}

// giveUpWhenAlone gives up when no other replica is alive to hand over to:
// what is held is freed now, for the replicas that come next.
func (c *Coordinator) giveUpWhenAlone() {
	if others := slices.DeleteFunc(c.peers.live(), func(id string) bool { return id == c.opts.Identity }); len(others) > 0 {
		return
	}
	c.mu.Lock()
	alone := !c.giveUp
	c.mu.Unlock()
	if alone {
		klog.InfoS("No other replica to hand this replica's members to; freeing their fences")
		c.GiveUp()
	}
}

// Leave deletes this replica's peer Lease once it holds nothing, so that
// peers stop counting on it.
func (c *Coordinator) Leave(ctx context.Context) {
	c.mu.Lock()
	l := c.peerLease
	c.mu.Unlock()
	if l != nil {
		err := c.hub.CoordinationV1().Leases(l.Namespace).Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &l.ResourceVersion}})
		if err != nil && !apierrors.IsNotFound(err) {
			klog.InfoS("Could not delete this replica's peer Lease; it expires on its own", "lease", l.Name, "err", err)
		}
	}
}
