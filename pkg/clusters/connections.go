package clusters

import (
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// errNotConnected asks the registry's queue to retry, with backoff, a
// registration that could not be turned into a connection.
var errNotConnected = errors.New("member not connected")

// unconnected handles a registration that could not be turned into a
// connection. A member that has one keeps it: a broken update must not take
// a working member down. One that has none stays registered, without a
// connection: its hub objects are kept as the hub holds them, subject to
// the unreachable policy, and the registration is retried with backoff.
// Only unregistering withdraws a member.
func (r *Registry) unconnected(reg *registration, m *member, reason string, class ErrorClass, why string) error {
	cluster, ref := reg.cluster, reg.ref
	if m != nil && m.active != nil {
		r.warn(ref, reason, "%s; keeping the previous connection to member %q", why, cluster)
		return nil
	}
	if reason == ReasonNoAccessProvider {
		// Not a registration this daemon can ever serve (another cluster
		// manager's, perhaps): said, not retried.
		r.warn(ref, reason, "%s; member %q not registered", why, cluster)
		return nil
	}
	msg := fmt.Sprintf("%s; member %q is registered but not connected: its hub objects are kept unless the unreachable policy withdraws them, and the daemon retries", why, cluster)
	r.mu.Lock()
	again := m != nil && m.unconnected == why
	r.mu.Unlock()
	if again {
		// A retry that failed the same way: said already.
		r.reject(ref, reason, msg)
		klog.V(2).InfoS("Member still not connected", "cluster", cluster, "reason", reason, "message", why)
	} else {
		r.warn(ref, reason, "%s", msg)
	}
	r.mu.Lock()
	m = r.members[cluster]
	if m == nil {
		m = &member{secret: reg.key, unconnectedSince: time.Now()}
		r.members[cluster] = m
	}
	m.ref, m.policy, m.unconnected, m.unconnectedClass, m.registered = ref, reg.policy, why, class, reg.created.Time
	if m.elsewhere {
		// Wanted here now, and cannot be connected: unreachable from now.
		m.elsewhere, m.unconnectedSince = false, time.Now()
	}
	r.bySecret[reg.key] = cluster
	r.mu.Unlock()
	r.handler.ClusterHealthChanged(cluster, false)
	return fmt.Errorf("%w: %s", errNotConnected, why)
}

// configure applies the daemon's client settings to cluster's config, and
// the registration's choice of compression (nil: the daemon's).
func (r *Registry) configure(cfg *rest.Config, cluster string, compress *bool) {
	cfg.QPS, cfg.Burst = r.opts.QPS, r.opts.Burst
	cfg.UserAgent = r.opts.UserAgent
	if r.opts.WarningHandler != nil {
		cfg.WarningHandler = r.opts.WarningHandler(cluster)
	}
	applyCompression(cfg, r.opts.DisableCompression, compress)
}

// run starts a connection and reports a sync timeout. A rotated connection
// replaces the active one only once it has synced (make-before-break).
func (r *Registry) run(c *Cluster, ref *corev1.ObjectReference) {
	c.started = time.Now()
	c.onWatchFailure = func(f Failure) { r.onWatchFailure(c, ref, f) }
	c.clusterSet = r.opts.ClusterSet
	go c.probeLoop(r.opts.ProbeInterval, r.opts.ProbeTimeout, func(healthy bool) { r.onHealthChanged(c, ref, healthy) })
	synced := c.start(r.opts.SyncTimeout, func() { r.onSynced(c, ref) }, func() { r.onReconnected(c) })
	if synced {
		return
	}
	select {
	case <-c.stop: // stopped before it synced, not timed out
		return
	default:
	}
	c.timedOut.Store(true)
	r.mu.Lock()
	m := r.members[c.name]
	current := m != nil && (m.active == c || m.pending == c)
	active := current && m.active == c
	if active {
		m.timedOut = true
	}
	r.mu.Unlock()
	if !current {
		return
	}
	cause := ""
	if f := c.Failure(); f != nil {
		cause = fmt.Sprintf(" (%s: %s)", f.Class, f.Message)
	}
	if active {
		r.connEventf(ref, corev1.EventTypeWarning, ReasonSyncTimeout,
			"member %q did not sync within %s%s; still trying, its last-known hub objects are kept", c.name, r.opts.SyncTimeout, cause)
		r.handler.ClusterSyncTimedOut(c.name)
	} else {
		r.connEventf(ref, corev1.EventTypeWarning, ReasonRotationRejected,
			"new kubeconfig for member %q did not sync within %s%s; keeping the previous connection while it keeps trying", c.name, r.opts.SyncTimeout, cause)
	}
	klog.InfoS("Member did not sync in time", "cluster", c.name, "timeout", r.opts.SyncTimeout, "cause", strings.TrimSpace(cause))
}

func (r *Registry) onSynced(c *Cluster, ref *corev1.ObjectReference) {
	r.mu.Lock()
	m := r.members[c.name]
	var old *Cluster
	switch {
	case m == nil:
		r.mu.Unlock()
		return
	case m.pending == c:
		old, m.active, m.pending = m.active, c, nil
	case m.active != c:
		r.mu.Unlock()
		return
	}
	m.timedOut = false
	r.mu.Unlock()

	if old != nil {
		old.shutdown()
		r.connEventf(ref, corev1.EventTypeNormal, ReasonRotated, "member %q switched to the new kubeconfig after it synced", c.name)
		klog.InfoS("Member connection rotated", "cluster", c.name)
	} else {
		r.connEventf(ref, corev1.EventTypeNormal, ReasonConnected, "member %q connected and synced in %s", c.name, time.Since(c.started).Round(time.Millisecond))
		klog.InfoS("Member synced", "cluster", c.name, "duration", time.Since(c.started))
	}
	r.handler.ClusterSynced(c.name)
}

// onReconnected tells the handler that fresh informers of the active
// connection synced after an outage (see runInformers): like after a
// rotation, every key of the member is synced again.
func (r *Registry) onReconnected(c *Cluster) {
	r.mu.RLock()
	m := r.members[c.name]
	active := m != nil && m.active == c
	r.mu.RUnlock()
	if active {
		r.handler.ClusterSynced(c.name)
	}
}

// ReasonUnreachable and ReasonReachable are Events on a member's Secret when
// its health probe starts failing or recovers.
const (
	ReasonUnreachable = "MemberUnreachable"
	ReasonReachable   = "MemberReachable"
)

func (r *Registry) onHealthChanged(c *Cluster, ref *corev1.ObjectReference, healthy bool) {
	r.mu.RLock()
	m := r.members[c.name]
	active := m != nil && m.active == c
	r.mu.RUnlock()
	if !active {
		return
	}
	switch {
	case healthy:
		r.connEventf(ref, corev1.EventTypeNormal, ReasonReachable, "member %q answers again", c.name)
		klog.InfoS("Member health changed", "cluster", c.name, "healthy", healthy)
	default:
		class, why := unreachableWhy(c)
		r.connEventf(ref, corev1.EventTypeWarning, class.Reason(), "member %q %s; its last-known endpoints are kept unless an unreachable policy applies", c.name, why)
		klog.InfoS("Member health changed", "cluster", c.name, "healthy", healthy, "cause", class, "message", why)
	}
	r.handler.ClusterHealthChanged(c.name, healthy)
}

// onWatchFailure reports a member whose informers fail to list or watch
// for a new cause. While its probe fails, the probe's Event said why.
func (r *Registry) onWatchFailure(c *Cluster, ref *corev1.ObjectReference, f Failure) {
	r.mu.RLock()
	m := r.members[c.name]
	current := m != nil && (m.active == c || m.pending == c)
	r.mu.RUnlock()
	if !current {
		return
	}
	klog.InfoS("Member informers cannot list or watch", "cluster", c.name, "cause", f.Class, "err", f.Message)
	if _, down := c.UnreachableSince(); down {
		return
	}
	r.connEventf(ref, corev1.EventTypeWarning, f.Class.Reason(), "member %q cannot be listed or watched: %s, %s: %s; retrying", c.name, f.Class, f.Class.Hint(), f.Message)
}
