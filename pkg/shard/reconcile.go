package shard

import (
	"context"
	"sort"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Reconcile decides about every fence once, and on the leader assigns.
// Run calls it on every Lease change and retry period.
func (c *Coordinator) Reconcile(ctx context.Context) {
	c.mu.Lock()
	c.dead = map[string]bool{}
	c.mu.Unlock()
	c.resolveUnsure(ctx)
	// Registrations read before the registry read its Secrets may miss
	// some: every member assigned among them says nothing of the others.
	complete := c.members.SecretsSynced()
	names := c.members.Names()
	registered := make(map[string]bool, len(names))
	for _, n := range names {
		registered[n] = true
	}
	fences := map[string]fence{}
	seen := map[string]bool{}
	if all, err := c.leases.List(labels.SelectorFromSet(labels.Set{LabelRole: RoleFence})); err == nil {
		for _, l := range all {
			seen[l.Labels[LabelFenceCluster]] = true
		}
	}
	c.mu.Lock()
	for n := range c.wrote {
		seen[n] = true
	}
	c.mu.Unlock()
	for n := range seen {
		if l := c.fenceLease(n); l != nil && n != "" {
			fences[n] = fenceOf(l)
		}
	}
	if c.opts.Leading != nil && c.opts.Leading() {
		c.assign(ctx, names, fences)
	}
	clusters := map[string]bool{}
	for n := range registered {
		clusters[n] = true
	}
	for n := range fences {
		clusters[n] = true
	}
	c.mu.Lock()
	for n := range c.held {
		clusters[n] = true
	}
	c.mu.Unlock()
	type step struct {
		act action
		f   fence
	}
	steps := make([]step, 0, len(clusters))
	for cluster := range clusters {
		f, ok := fences[cluster]
		if !ok {
			f = fence{cluster: cluster}
		}
		c.mu.Lock()
		e, held := c.held[cluster]
		v := view{
			me: c.opts.Identity, registered: registered[cluster],
			held: held && e == c.epoch, stale: held && e != c.epoch,
			draining: c.draining, giveUp: c.giveUp, alive: c.alive,
		}
		releasing := c.releasing[cluster]
		c.mu.Unlock()
		v.warm = v.registered && c.members.Warm(cluster)
		c.note(cluster, f, v)
		act := decide(v, f)
		if releasing {
			act = none // in hand: free decides
		}
		if act == none && !ok && held && !releasing {
			act = forget // the fence was deleted
		}
		steps = append(steps, step{act, f})
	}
	// A member assigned here is connected while its fence is taken, not
	// after: the connection's first list is most of a takeover, and the
	// sync writes nothing before Owns says so.
	for _, cluster := range c.updateWanted(fences, registered, clusters) {
		c.members.Reconsider(cluster)
	}
	// The fences' writes are independent, each conditional on the fence
	// as read: they go in parallel, so that taking over a dead replica's
	// hundreds of members is not hundreds of round trips in a row. Whether
	// a holder is dead is read once per holder, first.
	for _, st := range steps {
		if st.act == acquire && st.f.holder != "" {
			c.deadAtSource(ctx, st.f.holder)
		}
	}
	workqueue.ParallelizeUntil(ctx, fenceWriters, len(steps), func(i int) { c.do(ctx, steps[i].act, steps[i].f) })
	changed := c.updateWanted(fences, registered, clusters)
	c.mu.Lock()
	for cluster := range c.unownedSince {
		if !clusters[cluster] {
			delete(c.unownedSince, cluster)
		}
	}
	c.mu.Unlock()
	for _, cluster := range changed {
		c.members.Reconsider(cluster)
	}
	assigned := complete
	for n := range registered {
		f, ok := fences[n]
		// An assignee counts once seen alive: after a restart, fences
		// still name replicas that are gone, and this replica is not
		// settled before they are reassigned.
		if !ok || f.assignedTo == "" || (f.assignedTo != c.opts.Identity && !c.peers.seenAlive(f.assignedTo)) {
			assigned = false
			break
		}
	}
	c.mu.Lock()
	if c.firstReconcile.IsZero() {
		c.firstReconcile = c.opts.Now()
	}
	c.assigned = assigned
	c.mu.Unlock()
}

// updateWanted brings the members this replica connects to in line with
// the fences and what it holds, and returns those that changed.
func (c *Coordinator) updateWanted(fences map[string]fence, registered, clusters map[string]bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var changed []string
	for cluster := range clusters {
		f := fences[cluster]
		want := registered[cluster] && (f.assignedTo == c.opts.Identity || f.holder == c.opts.Identity)
		if _, h := c.held[cluster]; h {
			want = registered[cluster]
		}
		if c.wanted[cluster] != want {
			if want {
				c.wanted[cluster] = true
			} else {
				delete(c.wanted, cluster)
			}
			changed = append(changed, cluster)
		}
	}
	sort.Strings(changed)
	return changed
}

// note keeps the times the metrics report: since when a member is assigned
// here and not held, and, on the leader, since when it has no live holder.
func (c *Coordinator) note(cluster string, f fence, v view) {
	now := c.opts.Now()
	leading := c.opts.Leading != nil && c.opts.Leading()
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.assignedTo == v.me && f.holder != v.me {
		if _, ok := c.assignedAt[cluster]; !ok {
			c.assignedAt[cluster] = now
		}
	} else if f.holder != v.me {
		delete(c.assignedAt, cluster)
	}
	if leading && v.registered && (f.holder == "" || !v.alive(f.holder)) {
		if _, ok := c.unownedSince[cluster]; !ok {
			c.unownedSince[cluster] = now
		}
	} else {
		delete(c.unownedSince, cluster)
	}
}

// do carries out one action.
func (c *Coordinator) do(ctx context.Context, act action, f fence) {
	switch act {
	case none:
	case forget:
		c.mu.Lock()
		delete(c.held, f.cluster)
		delete(c.releasing, f.cluster)
		delete(c.unsure, f.cluster)
		c.mu.Unlock()
		klog.InfoS("Lost a member's fence to another replica; no longer writing it", "cluster", f.cluster, "holder", f.holder)
		c.syncer.OwnershipChanged(f.cluster)
	case acquire:
		if f.holder != "" && !c.deadAtSource(ctx, f.holder) {
			return
		}
		c.take(ctx, f, "Took a member's fence", "previous", f.holder)
	case confirm:
		c.take(ctx, f, "Confirmed a member's fence after a lapse")
	case signalReady:
		l := f.lease.DeepCopy()
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[AnnotationReady] = c.opts.Identity
		if err := c.writeFence(ctx, f.cluster, l); err != nil {
			klog.V(2).InfoS("Could not mark a fence ready", "cluster", f.cluster, "err", err)
		}
	case release:
		c.mu.Lock()
		c.releasing[f.cluster] = true
		c.mu.Unlock()
		c.syncer.OwnershipChanged(f.cluster)
		c.opts.Go(func() { c.free(ctx, f.cluster) })
	}
}
