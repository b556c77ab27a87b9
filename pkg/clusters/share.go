package clusters

import (
	"time"

	"k8s.io/klog/v2"
)

// wanted reports whether this replica runs a connection to a member.
func (r *Registry) wanted(cluster string) bool { return r.opts.Wanted == nil || r.opts.Wanted(cluster) }

// elsewhere registers a member that another replica owns: no connection
// here, nothing unreachable about it. A connection it had is stopped; the
// controller no longer writes its objects, as it owns them no more.
func (r *Registry) elsewhere(reg *registration) {
	r.mu.Lock()
	m := r.members[reg.cluster]
	if m == nil {
		m = &member{secret: reg.key}
		r.members[reg.cluster] = m
	}
	stop := []*Cluster{m.active, m.pending}
	had := m.active != nil
	m.ref, m.policy, m.registered = reg.ref, reg.policy, reg.created.Time
	m.active, m.pending, m.timedOut, m.unconnected, m.unconnectedSince, m.elsewhere = nil, nil, false, "", time.Time{}, true
	r.bySecret[reg.key] = reg.cluster
	r.mu.Unlock()
	for _, c := range stop {
		if c != nil {
			c.shutdown()
		}
	}
	if had {
		klog.InfoS("Member owned by another replica now; stopped its connection", "cluster", reg.cluster)
	}
}

// Reconsider brings a member's connection in line with Wanted: it starts
// one the member now wants here, and stops one it no longer does.
func (r *Registry) Reconsider(cluster string) {
	r.mu.RLock()
	m := r.members[cluster]
	r.mu.RUnlock()
	if m != nil && m.static != nil {
		if err := r.addStatic(cluster, m.static); err != nil {
			klog.ErrorS(err, "Registering static member failed", "cluster", cluster)
		}
		return
	}
	for _, cl := range r.claimsOf(cluster) {
		r.queue.Add(cl.key)
	}
}

// Warm reports whether this replica's view of a member is as good as it
// gets: its connection synced or missed its sync timeout, or its
// registration cannot be connected.
func (r *Registry) Warm(cluster string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	m := r.members[cluster]
	switch {
	case m == nil || m.elsewhere:
		return false
	case m.active == nil:
		return m.unconnected != ""
	}
	return m.active.HasSynced() || m.timedOut
}
