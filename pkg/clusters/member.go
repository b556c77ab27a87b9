package clusters

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

// member is the registry's state for one cluster name.
type member struct {
	secret string                  // queue key of the owning Secret or ClusterProfile
	ref    *corev1.ObjectReference // its Event reference; nil for static members
	// active is the connection the sync reads from; nil while the
	// registration could not be turned into one (see unconnected).
	active   *Cluster
	pending  *Cluster // a rotated connection waiting to sync
	timedOut bool
	// unconnected is why a member without an active connection has none,
	// since unconnectedSince; policy is its registration's unreachable
	// policy, which applies meanwhile.
	unconnected      string
	unconnectedClass ErrorClass
	unconnectedSince time.Time
	policy           lifecycle.Policy
	// registered is the creationTimestamp of the registration that owns
	// the name, by the hub's clock; zero for static members.
	registered time.Time
	// elsewhere: the member is not wanted here (another replica owns it),
	// so it has no connection here; static is a static member's config.
	elsewhere bool
	static    *rest.Config
}

// state is the member's lifecycle state.
func (m *member) state() lifecycle.State {
	st := lifecycle.State{Phase: lifecycle.Registered, Owned: !m.elsewhere, Policy: m.policy, RegisteredAt: m.registered}
	c := m.active
	if m.elsewhere {
		return st
	}
	if c == nil {
		st.Unreachable, st.Since, st.Reason = true, m.unconnectedSince, m.unconnected
		st.Cause = string(m.unconnectedClass)
		return st
	}
	st.Phase = lifecycle.Connected
	st.AboutID = c.Identity().ClusterID
	st.ExportVersion = string(c.ExportVersion())
	if c.HasSynced() {
		st.Phase = lifecycle.Synced
	}
	st.Policy = c.policy
	f := c.Failure()
	if f != nil {
		st.Cause, st.Reason = string(f.Class), f.Message
	}
	if since, down := c.UnreachableSince(); down {
		st.Unreachable, st.Since = true, since
		if f == nil {
			st.Reason = "does not answer its health probe"
		}
	}
	return st
}

// unreachableWhy says why an unreachable member is, for its Event: the
// cluster manager's report, or the class of the probe's failure, what it
// usually means, and the error.
func unreachableWhy(c *Cluster) (ErrorClass, string) {
	if reported := c.reported.Load(); reported != nil && *reported != "" {
		return ClassUnhealthy, "is unhealthy: " + *reported
	}
	f := c.Failure()
	if f == nil {
		return ClassOther, "does not answer its health probe"
	}
	return f.Class, fmt.Sprintf("is unreachable: %s, %s: %s", f.Class, f.Class.Hint(), f.Message)
}

// shutdown stops the member's connections.
func (m *member) shutdown() {
	if m.active != nil {
		m.active.shutdown()
	}
	if m.pending != nil {
		m.pending.shutdown()
	}
}
